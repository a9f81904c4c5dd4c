#!/bin/bash
# Call 7: the images of the tree (gen), whose sources differ from call 5's
# only in the combine's comments (its chunk counts corrected). .device/cb7.tar.xz: gen built from the
# tree (CGO_ENABLED=0 go build -ldflags "-s -w" -o .device/cb7/gen
# ./devkernels/gen, then tar -I 'xz -9 -T1' -C .device -cf cb7.tar.xz cb7/gen).
set -u
S0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e /tmp/img && mkdir -p /tmp/e /tmp/img && tar -C /tmp/e -xJf .device/cb7.tar.xz || exit 1
timeout 150 /tmp/e/cb7/gen -set kernels -out /tmp/img > /tmp/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S0 ))s"
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
{ grep -vi "warpgroup.arrive is injected" /tmp/gen.log | tail -20
  cuobjdump -res-usage /tmp/img/mla_decode.sm_90.cubin 2>&1 | grep -A1 -E "Function mla_combine" ; } | tee $OUT/gen.txt
