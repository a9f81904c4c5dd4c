#!/bin/bash
# The cluster merge (cluster-merge.patch, NVRTC): each shape's host plan
# against the same batch with a request's items in clusters that merge
# through distributed shared memory (exp_parts_test.go,
# TestExpClusterMerge), each checked against float64 (outputs poisoned);
# then compute-sanitizer memcheck of two of them where time is left.
# call-cm.sh [T]: T, the seconds the call may run (300 unless given).
set -u
T=${1:-300}
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
mkdir -p /tmp/e4 && tar -C /tmp/e4 -xJf .device/h4.tar.xz; E=/tmp/e4/h4
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache4 ATTNPLUG_DEVICE_CODE=nvrtc
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi-cm.txt
cd internal/gpucheck
CM="h16_b1_s4096_c8_n32,h16_b1_s4096_c8_n64,h16_b16_s4096_c8_n8,h16_b16_s16384_c8_n8"
CM="$CM,h128_b1_s4096_c4_n32,h128_b1_s4096_c4_n64,h128_b16_s4096_c4_n4,h128_b16_s16384_c4_n4,h128_b1_s16384_c4_n64,h16_b1_s4096_c4_n32,h128_b2_s4096_c4_n32"
EXP_CM=$CM timeout $(left $((T - 15))) $E/gpucheck-cm.test -test.v -test.count=1 -test.run TestExpClusterMerge -test.timeout 280s > /tmp/cm.log 2>&1
echo "cm rc=$? at $(( $(date +%s) - S0 ))s"
grep -vE "^=== |^\s*$" /tmp/cm.log | sed 's/^ *//' | cut -c1-330 > $OUT/cm.log; cat $OUT/cm.log
if [ $(left $T) -gt 70 ]; then
  EXP_CM=h16_b1_s4096_c8_n32,h128_b16_s4096_c4_n4 timeout $(left $((T - 5))) compute-sanitizer --tool memcheck $E/gpucheck-cm.test -test.v -test.count=1 -test.run TestExpClusterMerge -test.timeout 120s > /tmp/san-memcheck.log 2>&1
  echo "memcheck rc=$?"; grep -hE "^(--- |FAIL|ok|PASS)|ERROR SUMMARY|CM " /tmp/san-memcheck.log | cut -c1-200 | head -8
fi 2>&1 | tee $OUT/cm-sanitizers.txt
echo "done at $(( $(date +%s) - S0 ))s"
