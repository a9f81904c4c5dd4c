#!/bin/bash
# bundle.sh NAME [VARIANT PATCH[:PATCH...]]...: builds .device/NAME.tar.xz,
# which a device call carries, from a clean tree (CGO_ENABLED=0):
#   NAME/fr       the committed build: bin/attnplug, bin/plugins (every
#                 plugin), acme (the example vendor's plugin),
#                 gpucheck.test, cuda.test, cudaexec.test, rev;
#   NAME/VARIANT  for each variant, with its patches applied to the tree in
#                 order: attnplug, gen, plugins (fa3, dsa and flashinfer),
#                 gpucheck-VARIANT.test, src.cu (the patched
#                 mla_decode_sm90.cu, for ptxas) and tree/ (the files under
#                 python/ that the patches change, as patched).
# Similar binaries sit side by side in the archive, so that xz stores each
# pair about once.
set -eu
[ $# -ge 1 ] && [ $(( $# % 2 )) = 1 ] || { echo "usage: bundle.sh NAME [VARIANT PATCH[:PATCH...]]..." >&2; exit 2; }
N=$1; shift
top=$(git rev-parse --show-toplevel)
vs=() ps=()
while [ $# -gt 0 ]; do
  abs=""
  IFS=: read -ra list <<< "$2"
  for p in "${list[@]}"; do abs="$abs $(realpath "$p")"; done
  vs+=("$1") ps+=("$abs"); shift 2
done
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
trap 'git -C "$top" checkout -q -- .' EXIT
for i in "${!vs[@]}"; do
  V=${vs[$i]}
  mkdir -p $B/$V/plugins
  for p in ${ps[$i]}; do git apply "$p"; done
  cp devkernels/mla_decode_sm90.cu $B/$V/src.cu
  for f in $(git diff --name-only -- python); do mkdir -p $B/$V/tree/$(dirname $f) && cp $f $B/$V/tree/$f; done
  go build -ldflags "-s -w" -o $B/$V/attnplug ./cmd/host
  go build -ldflags "-s -w" -o $B/$V/gen ./devkernels/gen
  for p in fa3 dsa flashinfer; do go build -ldflags "-s -w" -o $B/$V/plugins/attnplug-backend-$p ./plugins/$p; done
  go test -c -ldflags "-s -w" -o $B/$V/gpucheck-$V.test ./internal/gpucheck
  git checkout -q -- .
  files="$files $N/$V/src.cu $N/fr/bin/attnplug $N/$V/attnplug"
  for p in fa3 dsa flashinfer; do files="$files $N/fr/bin/plugins/attnplug-backend-$p $N/$V/plugins/attnplug-backend-$p"; done
  files="$files $N/fr/gpucheck.test $N/$V/gpucheck-$V.test $N/$V/gen"
  [ -d $B/$V/tree ] && files="$files $(cd .device && find $N/$V/tree -type f | sort | tr '\n' ' ')"
done
cd .device
files=$(printf '%s\n' $files | awk '!seen[$0]++')
rest=$(find $N -type f | grep -vxF -f <(printf '%s\n' $files) | sort)
XZ_OPT="-9 -T1" tar -cJf $N.tar.xz $files $rest
ls -la $N.tar.xz
