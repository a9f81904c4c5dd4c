#!/bin/bash
# Builds .device/bl.tar.xz, which call.sh carries, from a clean tree
# (CGO_ENABLED=0): bl/fr, the committed build (the host, every plugin, the
# example vendor's plugin, gpucheck.test, cuda.test, cudaexec.test); bl/C,
# with c.patch: gen, the fa3 and dsa plugins, gpucheck-C.test and the
# patched mla_decode_sm90.cu (for ptxas). Similar binaries sit side by side
# in the archive, so that xz stores each pair about once.
set -eu
top=$(git rev-parse --show-toplevel)
cd "$top"
git diff --quiet || { echo "bundle.sh: the tree has changes" >&2; exit 1; }
P=docs/bench/h100-2026-12-07-blocks
B=.device/bl; rm -rf $B && mkdir -p $B/fr/bin/plugins $B/fr/acme $B/C/plugins
export CGO_ENABLED=0
go build -ldflags "-s -w" -o $B/fr/bin/attnplug ./cmd/host
for p in $(ls plugins); do [ -f plugins/$p/main.go ] && go build -ldflags "-s -w" -o $B/fr/bin/plugins/attnplug-backend-$p ./plugins/$p; done
(cd examples/vendor-backend && GOWORK=off go build -buildvcs=false -ldflags "-s -w" -o "$top/$B/fr/acme/attnplug-backend-acme_mla" .)
go test -c -ldflags "-s -w" -o $B/fr/gpucheck.test ./internal/gpucheck
go test -c -ldflags "-s -w" -o $B/fr/cuda.test ./cuda
go test -c -ldflags "-s -w" -o $B/fr/cudaexec.test ./launch/cudaexec
git rev-parse --short HEAD > $B/fr/rev
trap 'git -C "$top" checkout -- devkernels/mla_decode_sm90.cu' EXIT
git apply $P/c.patch
cp devkernels/mla_decode_sm90.cu $B/C/src.cu
go build -ldflags "-s -w" -o $B/C/gen ./devkernels/gen
for p in fa3 dsa; do go build -ldflags "-s -w" -o $B/C/plugins/attnplug-backend-$p ./plugins/$p; done
go test -c -ldflags "-s -w" -o $B/C/gpucheck-C.test ./internal/gpucheck
git rev-parse --short HEAD > $B/rev
cd .device && XZ_OPT="-9 -T1" tar -cJf bl.tar.xz bl/rev bl/fr/rev bl/fr/bin/attnplug bl/fr/acme bl/C/src.cu \
  bl/fr/bin/plugins/attnplug-backend-fa3 bl/C/plugins/attnplug-backend-fa3 \
  bl/fr/bin/plugins/attnplug-backend-dsa bl/C/plugins/attnplug-backend-dsa \
  $(ls bl/fr/bin/plugins/* | grep -v -e fa3 -e dsa) \
  bl/fr/gpucheck.test bl/C/gpucheck-C.test bl/C/gen bl/fr/cuda.test bl/fr/cudaexec.test
ls -la bl.tar.xz
