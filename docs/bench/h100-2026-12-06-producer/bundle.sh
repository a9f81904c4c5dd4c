#!/bin/bash
# bundle.sh NAME "B1:r0/r1/r2" ...: .device/NAME with the host (working tree),
# A's plugins (HEAD, via git stash) and, per variant, the working tree's
# plugins, gpucheck-<V>.test and gen-<V> with PC_REG0/1/2's defaults set.
set -e
cd /work/main
N=$1; shift
D=.device/$N
rm -rf $D && mkdir -p $D/A/plugins
export CGO_ENABLED=0
F=devkernels/mla_decode_sm90.cu
cp $F /tmp/pc-orig.cu
trap 'cp /tmp/pc-orig.cu $F' EXIT
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
go build -ldflags "-s -w -X main.version=B" -o $D/attnplug ./cmd/host
for spec in "$@"; do
  V=${spec%%:*}; R=${spec#*:}; IFS=/ read r0 r1 r2 u <<< "$R"
  cp /tmp/pc-orig.cu $F
  sed -i "s/^#define PC_REG0 .*/#define PC_REG0 $r0/; s/^#define PC_REG1 .*/#define PC_REG1 $r1/; s/^#define PC_REG2 .*/#define PC_REG2 $r2/; s/^#define PC_SUNROLL [01]/#define PC_SUNROLL ${u:-1}/" $F
  grep -E "^#define PC_(REG[012]|SUNROLL)" $F | tr '\n' ' '; echo "($V)"
  mkdir -p $D/$V/plugins
  plugins $D/$V/plugins
  go test -c -ldflags "-s -w" -o $D/gpucheck-$V.test ./internal/gpucheck
  go build -ldflags "-s -w" -o $D/gen-$V ./devkernels/gen
done
cp /tmp/pc-orig.cu $F
git stash -q
trap 'git stash pop -q; cp /tmp/pc-orig.cu $F' EXIT
plugins $D/A/plugins
git stash pop -q; trap - EXIT
tar -C .device -I 'xz -9 -T2' -cf .device/$N.tar.xz $N
ls -la .device/$N.tar.xz
