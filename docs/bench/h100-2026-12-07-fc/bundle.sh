#!/bin/bash
# .device/n6 (call.sh's): the host and plugins of the tree (N, the full-cost
# cut), the plugins of fcb4377 (A), gpucheck.test and gen of the tree; run
# from the repository root with the change applied, then packed with
# xz -9 -T1 (12.8 MB: the two plugins of a set are alike).
set -e
cd /work/main
D=.device/n6
rm -rf $D && mkdir -p $D/A/plugins $D/N/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/N/plugins
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
rm -rf /tmp/wt; git worktree add -f /tmp/wt fcb4377 >/dev/null 2>&1
(cd /tmp/wt && plugins /work/main/$D/A/plugins)
git worktree remove --force /tmp/wt
tar -C .device -I 'xz -9 -T1' -cf .device/n6.tar.xz n6
ls -la .device/n6.tar.xz; du -sh $D/* $D/*/plugins
