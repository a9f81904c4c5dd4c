#!/bin/bash
# The committed images of the full-cost cut (gen's, from the A/B call):
# gpucheck's schedule, graph and decode checks from the images, no NVRTC
# (.device/v7.tar.xz: gpucheck.test of the commit with them).
set -u
S0=$(date +%s)
rm -f /tmp/checks-*.log
mkdir -p /tmp/v && tar -C /tmp/v -xJf .device/v7.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi-images.txt
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-v
unset ATTNPLUG_DEVICE_CODE
runs=('TestScheduleOnDevice|TestDecodeStepGraph' 'TestMLADecodeRandom|TestSparseAndFP8')
pids=""
for part in 0 1; do
  (cd internal/gpucheck && timeout 100 /tmp/v/v7/gpucheck.test -test.v -test.count=1 -test.short -test.run "${runs[$part]}" \
    -test.timeout 100s > /tmp/checks-$part.log 2>&1; echo "checks $part rc=$? at $(( $(date +%s) - S0 ))s") &
  pids="$pids $!"
done
wait $pids
cat /tmp/checks-*.log > /tmp/checks.log
{ grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|images|nvrtc|NVRTC" /tmp/checks.log | cut -c1-260 | head -30
  grep -B2 -A20 -- "--- FAIL" /tmp/checks.log | cut -c1-400 | head -40; } > $OUT/checks-images.log
cat $OUT/checks-images.log
