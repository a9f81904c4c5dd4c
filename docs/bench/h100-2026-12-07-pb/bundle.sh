#!/bin/bash
# .device/pb (call.sh's): the host, plugins, gpucheck.test and gen of the
# tree (P: split items' partial outputs in bf16); the tree's plugins and
# gpucheck.test again with dyn16.patch applied and ATTNPLUG_DYN16 defined
# (D: the 16-row body's dense bf16 blocks claim their request's tiles as
# they go, P's partials too); the plugins of
# main (A: fp32 partials, 0b42a11). Packed with xz -9 -T1, like files next
# to each other (the window is 64 MiB).
# Run from the repository root of the tree: bundle.sh MAIN_CHECKOUT.
set -e
M=${1:?main checkout}
D=.device/pb
rm -rf $D && mkdir -p $D/A/plugins $D/P/plugins $D/D/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/P/plugins
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
cp devkernels/tile.cuh /tmp/tile.cuh.keep; cp devkernels/mla_decode_sm90.cu /tmp/sm90.cu.keep
git apply docs/bench/h100-2026-12-07-pb/dyn16.patch
sed -i '1i #define ATTNPLUG_DYN16 1' devkernels/tile.cuh
plugins $D/D/plugins
go test -c -ldflags "-s -w" -o $D/gpucheck-D.test ./internal/gpucheck
cp /tmp/tile.cuh.keep devkernels/tile.cuh; cp /tmp/sm90.cu.keep devkernels/mla_decode_sm90.cu
here=$PWD
(cd $M && plugins $here/$D/A/plugins)
(cd .device && tar -I 'xz -9 -T1' -cf pb.tar.xz pb/attnplug pb/gen \
  pb/{A,P,D}/plugins/attnplug-backend-fa3 pb/{A,P,D}/plugins/attnplug-backend-dsa pb/gpucheck.test pb/gpucheck-D.test)
ls -la .device/pb.tar.xz
