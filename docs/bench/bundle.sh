#!/bin/bash
# bundle.sh NAME [VARIANT PATCH]: builds .device/NAME.tar.xz, which a
# device call carries, from a clean tree (CGO_ENABLED=0):
#   NAME/fr       the committed build: bin/attnplug, bin/plugins (every
#                 plugin), acme (the example vendor's plugin),
#                 gpucheck.test, cuda.test, cudaexec.test, rev;
#   NAME/VARIANT  with PATCH applied to the tree: gen, plugins (fa3 and
#                 dsa), gpucheck-VARIANT.test and src.cu (the patched
#                 mla_decode_sm90.cu, for ptxas).
# Similar binaries sit side by side in the archive, so that xz stores each
# pair about once.
set -eu
[ $# = 1 ] || [ $# = 3 ] || { echo "usage: bundle.sh NAME [VARIANT PATCH]" >&2; exit 2; }
N=$1 V=${2:-} P=${3:-}
top=$(git rev-parse --show-toplevel)
[ -z "$P" ] || P=$(realpath "$P")
cd "$top"
git diff --quiet || { echo "bundle.sh: the tree has changes" >&2; exit 1; }
B=.device/$N; rm -rf $B && mkdir -p $B/fr/bin/plugins $B/fr/acme
export CGO_ENABLED=0
go build -ldflags "-s -w" -o $B/fr/bin/attnplug ./cmd/host
for p in $(ls plugins); do [ -f plugins/$p/main.go ] && go build -ldflags "-s -w" -o $B/fr/bin/plugins/attnplug-backend-$p ./plugins/$p; done
(cd examples/vendor-backend && GOWORK=off go build -buildvcs=false -ldflags "-s -w" -o "$top/$B/fr/acme/attnplug-backend-acme_mla" .)
go test -c -ldflags "-s -w" -o $B/fr/gpucheck.test ./internal/gpucheck
go test -c -ldflags "-s -w" -o $B/fr/cuda.test ./cuda
go test -c -ldflags "-s -w" -o $B/fr/cudaexec.test ./launch/cudaexec
git rev-parse --short HEAD > $B/fr/rev
git rev-parse --short HEAD > $B/rev
files="$N/rev $N/fr/rev $N/fr/bin/attnplug $N/fr/acme/attnplug-backend-acme_mla"
if [ -n "$V" ]; then
  mkdir -p $B/$V/plugins
  trap 'git -C "$top" checkout -- .' EXIT
  git apply "$P"
  cp devkernels/mla_decode_sm90.cu $B/$V/src.cu
  go build -ldflags "-s -w" -o $B/$V/gen ./devkernels/gen
  for p in fa3 dsa; do go build -ldflags "-s -w" -o $B/$V/plugins/attnplug-backend-$p ./plugins/$p; done
  go test -c -ldflags "-s -w" -o $B/$V/gpucheck-$V.test ./internal/gpucheck
  files="$files $N/$V/src.cu $N/fr/bin/plugins/attnplug-backend-fa3 $N/$V/plugins/attnplug-backend-fa3
    $N/fr/bin/plugins/attnplug-backend-dsa $N/$V/plugins/attnplug-backend-dsa
    $N/fr/gpucheck.test $N/$V/gpucheck-$V.test $N/$V/gen"
fi
cd .device
rest=$(find $N/fr -type f | grep -vxF -f <(printf '%s\n' $files) | sort)
XZ_OPT="-9 -T1" tar -cJf $N.tar.xz $files $rest
ls -la $N.tar.xz
