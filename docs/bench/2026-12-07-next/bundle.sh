#!/bin/bash
# Builds .device/fr.tar.xz, which call.sh carries, from a clean tree
# (CGO_ENABLED=0): fr/bin the host and every plugin, fr/acme the example
# vendor's plugin, and gpucheck.test, cuda.test, cudaexec.test.
set -eu
top=$(git rev-parse --show-toplevel)
cd "$top"
git diff --quiet || { echo "bundle.sh: the tree has changes" >&2; exit 1; }
B=.device/fr; rm -rf $B && mkdir -p $B/bin/plugins $B/acme
export CGO_ENABLED=0
go build -ldflags "-s -w" -o $B/bin/attnplug ./cmd/host
for p in $(ls plugins); do [ -f plugins/$p/main.go ] && go build -ldflags "-s -w" -o $B/bin/plugins/attnplug-backend-$p ./plugins/$p; done
(cd examples/vendor-backend && GOWORK=off go build -buildvcs=false -ldflags "-s -w" -o "$top/$B/acme/attnplug-backend-acme_mla" .)
go test -c -ldflags "-s -w" -o $B/gpucheck.test ./internal/gpucheck
go test -c -ldflags "-s -w" -o $B/cuda.test ./cuda
go test -c -ldflags "-s -w" -o $B/cudaexec.test ./launch/cudaexec
git rev-parse --short HEAD > $B/rev
cd .device && XZ_OPT="-9 -T1" tar -cJf fr.tar.xz fr
ls -la fr.tar.xz
