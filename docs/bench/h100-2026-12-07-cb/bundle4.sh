#!/bin/bash
# .device/cb4 (call4.sh's): the host, gpucheck.test and gen of the tree
# (C: B4's combine without R's output rows' helpers: main's bodies), and
# the plugins of the tree, of B4 and of main (A). Packed with xz -9 -T1.
# Run from the repository root of the tree: bundle4.sh MAIN B4 (checkouts).
set -e
M=${1:?main} B4=${2:?B4}
D=.device/cb4
rm -rf $D && mkdir -p $D/{A,C,B4}/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
here=$PWD
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
plugins $D/C/plugins
(cd $B4 && plugins $here/$D/B4/plugins)
(cd $M && plugins $here/$D/A/plugins)
(cd .device && tar -I 'xz -9 -T1' -cf cb4.tar.xz cb4/attnplug cb4/gpucheck.test cb4/gen \
  cb4/{A,C,B4}/plugins/attnplug-backend-fa3 cb4/{A,C,B4}/plugins/attnplug-backend-dsa)
ls -la .device/cb4.tar.xz
