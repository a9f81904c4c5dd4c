#!/bin/bash
# Call 8: the images of the tree (its comments reflowed: the source hash
# changes).
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d8.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf /tmp/img && mkdir -p /tmp/img
/tmp/d/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
echo "call8 done at $(( $(date +%s) - S ))s"
