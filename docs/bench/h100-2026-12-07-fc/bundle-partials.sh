#!/bin/bash
# .device/pb (call-partials.sh's, prepared, not run): the host and plugins
# of the tree (A), and its plugins with partials-bf16.patch applied and
# ATTNPLUG_PART_BF16 defined (P: the split items' partial outputs in bf16,
# half the bytes written and merged; the workspace stays sized for fp32).
# Run from the repository root of a clean tree.
set -e
D=.device/pb
rm -rf $D && mkdir -p $D/A/plugins $D/P/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/A/plugins
git apply docs/bench/h100-2026-12-07-fc/partials-bf16.patch
sed -i '1i #define ATTNPLUG_PART_BF16 1' devkernels/tile.cuh
plugins $D/P/plugins
git checkout devkernels/
tar -C .device -I 'xz -9 -T1' -cf .device/pb.tar.xz pb
ls -la .device/pb.tar.xz
