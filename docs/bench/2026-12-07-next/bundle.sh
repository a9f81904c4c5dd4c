#!/bin/bash
# Builds .device/nx.tar.xz, which call.sh carries, from a clean tree
# (CGO_ENABLED=0): nx/fr, the committed build (the host, every plugin, the
# example vendor's plugin, gpucheck.test, cuda.test, cudaexec.test); nx/V,
# with v.patch: gen, the fa3 and dsa plugins, gpucheck-V.test and the
# patched mla_decode_sm90.cu (for ptxas). Similar binaries sit side by side
# in the archive, so that xz stores each pair about once.
set -eu
top=$(git rev-parse --show-toplevel)
cd "$top"
git diff --quiet || { echo "bundle.sh: the tree has changes" >&2; exit 1; }
P=docs/bench/2026-12-07-next
B=.device/nx; rm -rf $B && mkdir -p $B/fr/bin/plugins $B/fr/acme $B/V/plugins
export CGO_ENABLED=0
go build -ldflags "-s -w" -o $B/fr/bin/attnplug ./cmd/host
for p in $(ls plugins); do [ -f plugins/$p/main.go ] && go build -ldflags "-s -w" -o $B/fr/bin/plugins/attnplug-backend-$p ./plugins/$p; done
(cd examples/vendor-backend && GOWORK=off go build -buildvcs=false -ldflags "-s -w" -o "$top/$B/fr/acme/attnplug-backend-acme_mla" .)
go test -c -ldflags "-s -w" -o $B/fr/gpucheck.test ./internal/gpucheck
go test -c -ldflags "-s -w" -o $B/fr/cuda.test ./cuda
go test -c -ldflags "-s -w" -o $B/fr/cudaexec.test ./launch/cudaexec
git rev-parse --short HEAD > $B/fr/rev
trap 'git -C "$top" checkout -- devkernels/mla_decode_sm90.cu' EXIT
git apply $P/v.patch
cp devkernels/mla_decode_sm90.cu $B/V/src.cu
go build -ldflags "-s -w" -o $B/V/gen ./devkernels/gen
for p in fa3 dsa; do go build -ldflags "-s -w" -o $B/V/plugins/attnplug-backend-$p ./plugins/$p; done
go test -c -ldflags "-s -w" -o $B/V/gpucheck-V.test ./internal/gpucheck
git rev-parse --short HEAD > $B/rev
cd .device && XZ_OPT="-9 -T1" tar -cJf nx.tar.xz nx/rev nx/fr/rev nx/fr/bin/attnplug nx/fr/acme nx/V/src.cu \
  nx/fr/bin/plugins/attnplug-backend-fa3 nx/V/plugins/attnplug-backend-fa3 \
  nx/fr/bin/plugins/attnplug-backend-dsa nx/V/plugins/attnplug-backend-dsa \
  $(ls nx/fr/bin/plugins/* | grep -v -e fa3 -e dsa) \
  nx/fr/gpucheck.test nx/V/gpucheck-V.test nx/V/gen nx/fr/cuda.test nx/fr/cudaexec.test
ls -la nx.tar.xz
