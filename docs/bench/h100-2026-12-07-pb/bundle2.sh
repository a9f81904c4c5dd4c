#!/bin/bash
# .device/pb2 (call2.sh's): the host, plugins, gpucheck.test and gen of the
# tree (P: bf16 partial outputs, every output row written a whole 32-byte
# sector at a time, quad_store16); the plugins of call 1's P (H: bf16
# partials by half-sector stores, kept from bundle.sh's build in
# .device/pb-H); the plugins of main (A: fp32 partials, 0b42a11). Packed
# with xz -9 -T1, like files next to each other.
# Run from the repository root of the tree: bundle2.sh MAIN_CHECKOUT.
set -e
M=${1:?main checkout}
D=.device/pb2
rm -rf $D && mkdir -p $D/A/plugins $D/P/plugins $D/H
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/P/plugins
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
cp -r .device/pb-H/plugins $D/H/
here=$PWD
(cd $M && plugins $here/$D/A/plugins)
(cd .device && tar -I 'xz -9 -T1' -cf pb2.tar.xz pb2/attnplug pb2/gen \
  pb2/{A,H,P}/plugins/attnplug-backend-fa3 pb2/{A,H,P}/plugins/attnplug-backend-dsa pb2/gpucheck.test)
ls -la .device/pb2.tar.xz
