#!/bin/bash
# .device/cb9 (call9.sh's): the host of the tree, its plugins (C, f4d93fa)
# and those of V1 (C with mla_combine_rows capped at 64 registers,
# __launch_bounds__(256, 4): variants/V1.patch). Packed with xz -9 -T1.
# Run from the repository root of the tree: bundle9.sh V1 (checkout).
set -e
V1=${1:?V1}
D=.device/cb9
rm -rf $D && mkdir -p $D/{C,V1}/plugins
export CGO_ENABLED=0
plugins() { for p in fa3 dsa; do go build -ldflags "-s -w" -o $1/attnplug-backend-$p ./plugins/$p; done; }
here=$PWD
go build -ldflags "-s -w" -o $D/attnplug ./cmd/host
plugins $D/C/plugins
(cd $V1 && plugins $here/$D/V1/plugins)
(cd .device && tar -I 'xz -9 -T1' -cf cb9.tar.xz cb9/attnplug cb9/{C,V1}/plugins/attnplug-backend-fa3 cb9/{C,V1}/plugins/attnplug-backend-dsa)
ls -la .device/cb9.tar.xz
