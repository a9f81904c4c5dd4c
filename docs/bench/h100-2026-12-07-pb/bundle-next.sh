#!/bin/bash
# Prepared for the next session's first call (call-next.sh): the committed
# build (host, plugins, gpucheck.test; the images of a62c26e, which no
# device has run yet), packed with xz -9 -T1 into .device/nx.tar.xz.
# Run from the repository root of a clean tree.
set -e
D=.device/nx
rm -rf $D && mkdir -p $D/plugins
export CGO_ENABLED=0
for p in fa3 dsa flashinfer; do go build -ldflags "-s -w" -o $D/plugins/attnplug-backend-$p ./plugins/$p; done
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
(cd .device && tar -I 'xz -9 -T1' -cf nx.tar.xz nx)
ls -la .device/nx.tar.xz
