#!/bin/bash
# .device/cb2 (call2.sh's): the host, gpucheck.test and gen of the tree
# (B2: the combine's loads held as bf16 pairs, J 12 / 6 / 2 chunks a trip
# with every lane's LSE of each, as main; mla_combine_rows as B), and the
# plugins of the tree, of B (call 1's: a lane's LSE of one chunk, J 16 /
# 8 / 4), of B3 (B2 with whole rows holding their loads as floats, as
# main) and of main (A). Packed with xz -9 -T1.
# Run from the repository root of the tree: bundle2.sh MAIN B B3 (checkouts).
set -e
M=${1:?main} B=${2:?B} B3=${3:?B3}
D=.device/cb2
rm -rf $D && mkdir -p $D/{A,B,B2,B3}/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
here=$PWD
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
go test -c -ldflags "-s -w" -o $D/gpucheck.test ./internal/gpucheck
go build -ldflags "-s -w" -o $D/gen ./devkernels/gen
plugins $D/B2/plugins
(cd $B && plugins $here/$D/B/plugins)
(cd $B3 && plugins $here/$D/B3/plugins)
(cd $M && plugins $here/$D/A/plugins)
(cd .device && tar -I 'xz -9 -T1' -cf cb2.tar.xz cb2/attnplug cb2/gpucheck.test cb2/gen \
  cb2/{A,B,B2,B3}/plugins/attnplug-backend-fa3 cb2/{A,B,B2,B3}/plugins/attnplug-backend-dsa)
ls -la .device/cb2.tar.xz
