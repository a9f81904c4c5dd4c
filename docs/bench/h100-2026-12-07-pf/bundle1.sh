#!/bin/bash
# .device/pf1.tar.xz for call1.sh, packed with xz -9 -T1. Run from the
# repository root, on HEAD 7276944 with n.patch applied (N: the decode
# reads its items, and where mla_schedule ran asks L2 for its first keys,
# before its wait; counts[1] says which). A's build is .device/nx2.tar.xz
# (../h100-2026-12-07-cb/bundle-next.sh), carried beside it.
# - gen, the host, N's fa3 and dsa plugins, gpucheck-N.test;
# - V256: N asking L2 for 256 keys, not 128: its fa3 and dsa plugins;
# - gpucheck-tl.test: N with tl.patch (each block's timeline, ATTNPLUG_TL)
#   and the parts report's experiment test.
set -e
D=.device/pf1
F=docs/bench/h100-2026-12-07-pf
rm -rf $D && mkdir -p $D/N/plugins $D/V256/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/N/plugins
go test -c -ldflags "-s -w" -o $D/gpucheck-N.test ./internal/gpucheck
cp devkernels/mla_common.cuh devkernels/mla_decode_sm90.cu /tmp/
sed -i 's/^\(#define MLA_PREFETCH_[A-Z0-9]*(KS, IT) prefetch_keys<[A-Z0-9 *]*>(KS, IT, \)128)/\1256)/' devkernels/mla_common.cuh
grep -c "IT, 256)" devkernels/mla_common.cuh
plugins $D/V256/plugins
cp /tmp/mla_common.cuh devkernels/
git apply $F/tl.patch
sed -i '1i #define ATTNPLUG_TL 1' devkernels/mla_common.cuh
cp docs/bench/h100-2026-12-07-parts/exp_parts_test.go.txt internal/gpucheck/exp_parts_test.go
go test -c -ldflags "-s -w" -o $D/gpucheck-tl.test ./internal/gpucheck
cp /tmp/mla_common.cuh /tmp/mla_decode_sm90.cu devkernels/ && rm internal/gpucheck/exp_parts_test.go
(cd .device && tar -I 'xz -9 -T1' -cf pf1.tar.xz pf1/gen pf1/attnplug pf1/gpucheck-N.test pf1/gpucheck-tl.test \
  pf1/{N,V256}/plugins/attnplug-backend-fa3 pf1/{N,V256}/plugins/attnplug-backend-dsa)
git diff --stat
ls -la .device/pf1.tar.xz
