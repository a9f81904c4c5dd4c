#!/bin/bash
# .device/h2: host + plugins of HEAD (B), plugins of cc3818b (A, before the
# packed cut) and c126a39 (C, the 2026-12-04 build), gpucheck.test (HEAD +
# the untracked experiment test) and gpucheck-tl.test (the same with the
# timeline instrumentation compiled in). The experiment test is
# exp_parts_test.go.txt here, copied to internal/gpucheck/exp_parts_test.go
# before the build.
set -e
cd /work/main
D=.device/h2
rm -rf $D && mkdir -p $D/A/plugins $D/B/plugins $D/C/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/B/plugins
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
git apply docs/bench/h100-2026-12-07-parts/timeline.patch
sed -i '1i #define ATTNPLUG_TL 1' devkernels/mla_common.cuh
go test -c -ldflags "-s -w" -o $D/gpucheck-tl.test ./internal/gpucheck
git checkout devkernels/
for v in A:cc3818b C:c126a39; do
  rm -rf /tmp/wt; git worktree add -f /tmp/wt ${v#*:} >/dev/null 2>&1
  (cd /tmp/wt && plugins /work/main/$D/${v%%:*}/plugins)
  git worktree remove --force /tmp/wt
done
tar -C .device -I 'xz -9 -T2' -cf .device/h2.tar.xz h2
ls -la .device/h2.tar.xz; du -sh $D/*
