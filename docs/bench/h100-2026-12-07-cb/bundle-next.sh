#!/bin/bash
# Prepared for the next session's first call (call-next.sh), packed into
# .device/nx2.tar.xz with xz -9 -T1:
# - the committed build: host, plugins (fa3, dsa, flashinfer), the images
#   checked by this report's call 8;
# - its fa3 and dsa plugins again with itemcost-sweep.patch (S:
#   ATTNPLUG_EXP_ITEM_COST_<rows> sets a body's item cost in the cut);
# - gpucheck-exp.test: the committed gpucheck with the parts report's
#   experiment test (../h100-2026-12-07-parts/exp_parts_test.go.txt);
# - gpucheck-tl.test: the same with the parts report's timeline.patch
#   compiled in (ATTNPLUG_TL);
# - P: prefetch.patch (each decode block asks L2 for its first item's first
#   keys before its wait; the schedule no longer lets the decode start
#   before it ends): its fa3 and dsa plugins and gpucheck-P.test;
# - R2: rows-out.patch (one helper for where a body's rows go, computed
#   where main computes it): its fa3 and dsa plugins.
# Run from the repository root of a clean tree: bundle-next.sh.
set -e
D=.device/nx2
P=docs/bench/h100-2026-12-07-parts
rm -rf $D && mkdir -p $D/plugins $D/S/plugins $D/P/plugins $D/R2/plugins
export CGO_ENABLED=0
plugins() { for p in $2; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/plugins "fa3 dsa flashinfer"
cp $P/exp_parts_test.go.txt internal/gpucheck/exp_parts_test.go
go test -c -ldflags "-s -w" -o $D/gpucheck-exp.test ./internal/gpucheck
git apply $P/timeline.patch
sed -i '1i #define ATTNPLUG_TL 1' devkernels/mla_common.cuh
go test -c -ldflags "-s -w" -o $D/gpucheck-tl.test ./internal/gpucheck
git checkout devkernels/ && rm internal/gpucheck/exp_parts_test.go
git apply docs/bench/h100-2026-12-07-cb/itemcost-sweep.patch
plugins $D/S/plugins "fa3 dsa"
git checkout devkernels/devkernels.go
git apply docs/bench/h100-2026-12-07-cb/prefetch.patch
plugins $D/P/plugins "fa3 dsa"
go test -c -ldflags "-s -w" -o $D/gpucheck-P.test ./internal/gpucheck
git checkout devkernels/
git apply docs/bench/h100-2026-12-07-cb/rows-out.patch
plugins $D/R2/plugins "fa3 dsa"
git checkout devkernels/
(cd .device && tar -I 'xz -9 -T1' -cf nx2.tar.xz nx2/attnplug nx2/gpucheck-exp.test nx2/gpucheck-tl.test nx2/gpucheck-P.test \
  nx2/plugins/attnplug-backend-fa3 nx2/S/plugins/attnplug-backend-fa3 nx2/P/plugins/attnplug-backend-fa3 nx2/R2/plugins/attnplug-backend-fa3 \
  nx2/plugins/attnplug-backend-dsa nx2/S/plugins/attnplug-backend-dsa nx2/P/plugins/attnplug-backend-dsa nx2/R2/plugins/attnplug-backend-dsa \
  nx2/plugins/attnplug-backend-flashinfer)
git status --short
ls -la .device/nx2.tar.xz
