#!/bin/bash
# .device/cb3 (call3.sh's): the host, gpucheck.test and gen of the tree
# (B4: ranges of 128 or 256 columns merged as B, a lane's LSE of one chunk,
# J 16 / 8; whole rows as main, J 2; mla_combine_rows as B), and the
# plugins of the tree, of B5 (B4 with whole rows merged as the ranges, J
# 2) and of main (A). Packed with xz -9 -T1.
# Run from the repository root of the tree: bundle3.sh MAIN B5 (checkouts).
set -e
M=${1:?main} B5=${2:?B5}
D=.device/cb3
rm -rf $D && mkdir -p $D/{A,B4,B5}/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
here=$PWD
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
plugins $D/B4/plugins
(cd $B5 && plugins $here/$D/B5/plugins)
(cd $M && plugins $here/$D/A/plugins)
(cd .device && tar -I 'xz -9 -T1' -cf cb3.tar.xz cb3/attnplug cb3/gpucheck.test cb3/gen \
  cb3/{A,B4,B5}/plugins/attnplug-backend-fa3 cb3/{A,B4,B5}/plugins/attnplug-backend-dsa)
ls -la .device/cb3.tar.xz
