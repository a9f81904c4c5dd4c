#!/bin/bash
# Prepared for the next session's first call (call-next.sh): the committed
# build (host, plugins, gpucheck.test; the images of a62c26e, which no
# device has run yet), and its plugins again with fullcost-sweep.patch
# (S: ATTNPLUG_EXP_FULL_COST_<rows> sets a body's full cost), packed with
# xz -9 -T1 into .device/nx.tar.xz.
# Run from the repository root of a clean tree.
set -e
D=.device/nx
rm -rf $D && mkdir -p $D/plugins $D/S/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa flashinfer; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
plugins $D/plugins
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
git apply docs/bench/h100-2026-12-07-pb/fullcost-sweep.patch
plugins $D/S/plugins
git checkout devkernels/devkernels.go
(cd .device && tar -I 'xz -9 -T1' -cf nx.tar.xz nx/attnplug nx/gpucheck.test nx/plugins/attnplug-backend-fa3 nx/S/plugins/attnplug-backend-fa3 \
  nx/plugins/attnplug-backend-dsa nx/S/plugins/attnplug-backend-dsa nx/plugins/attnplug-backend-flashinfer nx/S/plugins/attnplug-backend-flashinfer)
ls -la .device/nx.tar.xz
