#!/bin/bash
# .device/pf2.tar.xz for call2.sh, packed with xz -9 -T1. Run from the
# repository root of a clean tree at e299359 (N committed, its images from
# call 1). A's build is .device/nx2.tar.xz, carried beside it.
# - C: the host, the fa3, dsa and flashinfer plugins and gpucheck.test of
#   the tree, with its images;
# - E1 (e1.patch: thread 0 of each decode block also asks L1 for its first
#   item's request before the wait): gen, fa3 and dsa plugins,
#   gpucheck-E1.test.
set -e
D=.device/pf2
F=docs/bench/h100-2026-12-07-pf
rm -rf $D && mkdir -p $D/C/plugins $D/E1/plugins
export CGO_ENABLED=0
plugins() { for p in $2; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/C/plugins "fa3 dsa flashinfer"
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
git apply $F/e1.patch
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
plugins $D/E1/plugins "fa3 dsa"
go test -c -ldflags "-s -w" -o $D/gpucheck-E1.test ./internal/gpucheck
git checkout devkernels/
(cd .device && tar -I 'xz -9 -T1' -cf pf2.tar.xz pf2/attnplug pf2/gen pf2/gpucheck.test pf2/gpucheck-E1.test \
  pf2/C/plugins/attnplug-backend-{fa3,dsa,flashinfer} pf2/E1/plugins/attnplug-backend-{fa3,dsa})
git status --short
ls -la .device/pf2.tar.xz
