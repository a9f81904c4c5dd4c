#!/bin/bash
# Builds .device/fl.tar.xz, which call.sh carries, from a clean tree at
# 22dd0d0 (CGO_ENABLED=0): fl/fr, the committed build (the host, every
# plugin, the example vendor's plugin, gpucheck.test, cuda.test,
# cudaexec.test); fl/F, gen with fold.diff; fl/L, gen, the fa3 and dsa
# plugins and gpucheck-L.test with fold.diff and l.patch. Similar binaries
# sit side by side in the archive, so that xz stores each pair about once.
set -eu
top=$(git rev-parse --show-toplevel)
cd "$top"
git diff --quiet || { echo "bundle.sh: the tree has changes" >&2; exit 1; }
P=docs/bench/2026-12-07-prepared
B=.device/fl; rm -rf $B && mkdir -p $B/fr/bin/plugins $B/fr/acme $B/F $B/L/plugins
export CGO_ENABLED=0
go build -ldflags "-s -w" -o $B/fr/bin/attnplug ./cmd/host
for p in $(ls plugins); do [ -f plugins/$p/main.go ] && go build -ldflags "-s -w" -o $B/fr/bin/plugins/attnplug-backend-$p ./plugins/$p; done
(cd examples/vendor-backend && GOWORK=off go build -buildvcs=false -ldflags "-s -w" -o "$top/$B/fr/acme/attnplug-backend-acme_mla" .)
go test -c -ldflags "-s -w" -o $B/fr/gpucheck.test ./internal/gpucheck
go test -c -ldflags "-s -w" -o $B/fr/cuda.test ./cuda
go test -c -ldflags "-s -w" -o $B/fr/cudaexec.test ./launch/cudaexec
git rev-parse --short HEAD > $B/fr/rev
trap 'git -C "$top" checkout -- devkernels/mla_decode_sm90.cu' EXIT
git apply $P/fold.diff
go build -ldflags "-s -w" -o $B/F/gen ./devkernels/gen
git apply $P/l.patch
go build -ldflags "-s -w" -o $B/L/gen ./devkernels/gen
for p in fa3 dsa; do go build -ldflags "-s -w" -o $B/L/plugins/attnplug-backend-$p ./plugins/$p; done
go test -c -ldflags "-s -w" -o $B/L/gpucheck-L.test ./internal/gpucheck
git rev-parse --short HEAD > $B/rev
cd .device && XZ_OPT="-9 -T1" tar -cJf fl.tar.xz fl/rev fl/fr/rev fl/fr/bin/attnplug fl/fr/acme \
  fl/fr/bin/plugins/attnplug-backend-fa3 fl/L/plugins/attnplug-backend-fa3 \
  fl/fr/bin/plugins/attnplug-backend-dsa fl/L/plugins/attnplug-backend-dsa \
  $(ls fl/fr/bin/plugins/* | grep -v -e fa3 -e dsa) \
  fl/fr/gpucheck.test fl/L/gpucheck-L.test fl/F/gen fl/L/gen fl/fr/cuda.test fl/fr/cudaexec.test
ls -la fl.tar.xz
