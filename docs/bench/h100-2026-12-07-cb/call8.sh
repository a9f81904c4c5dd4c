#!/bin/bash
# Call 8: the images of call 7 as the tree embeds them, no NVRTC: every
# gpucheck decode, sparse/FP8 and prefill check (the mma.sync bodies on
# Hopper included), compute-sanitizer memcheck of the graph step and the
# wide body. .device/cb8.tar.xz: the tree's gpucheck.test (CGO_ENABLED=0
# go test -c -ldflags "-s -w" -o .device/cb8/gpucheck.test
# ./internal/gpucheck, then tar -I 'xz -9 -T1' -C .device -cf cb8.tar.xz
# cb8/gpucheck.test). call8.sh [T]: T, the seconds the call may run (300
# unless given).
set -u
T=${1:-300}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/cb8.tar.xz || exit 1
E=/tmp/e/cb8
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-cb8
unset ATTNPLUG_DEVICE_CODE
rm -f /tmp/checks-*.log
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
pids=""
for part in 0 1 2 3; do
  (cd internal/gpucheck && timeout 200 ${pre[$part]} $E/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 190s > /tmp/checks-$part.log 2>&1; echo "checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
{ for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY|nvrtc|NVRTC" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B2 -A20 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log
echo "done at $(at)"
