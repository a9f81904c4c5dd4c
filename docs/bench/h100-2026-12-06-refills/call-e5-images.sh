#!/bin/bash
# Session 53, call 7: E5 as it is to be committed (warpgroup 0's refill of
# K0's blocks 0-3 16 keys at a time as its own P V's k-steps retire): its
# float64 checks (NVRTC, outputs poisoned), compute-sanitizer memcheck and
# synccheck, and its images (gen).
set -u
S0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s53g.tar.xz || exit 1
E=/tmp/e/s53g
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
mkdir -p /tmp/img-E5 && (timeout 300 $E/gen-E5 -set kernels -out /tmp/img-E5 > /tmp/gen-E5.log 2>&1; echo "gen E5 rc=$?" > /tmp/gen.rc) &
GP=$!
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 200 $E/gpucheck-E5.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph|TestPrefillMethods' \
  -test.timeout 195s > $OUT/checks-E5.log 2>&1; echo "E5 checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-E5.log | cut -c1-160 | head -8
grep -B2 -A14 -- "--- FAIL" $OUT/checks-E5.log | cut -c1-300 | head -30
for tool in memcheck synccheck; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 150 compute-sanitizer --tool $tool $E/gpucheck-E5.test -test.v -test.count=1 -test.short \
    -test.run TestInProcessBackendOnDevice -test.timeout 140s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(( $(date +%s) - S0 ))s")
  tail -2 /tmp/san-$tool.log; { echo "=== compute-sanitizer --tool $tool"; tail -30 /tmp/san-$tool.log; } >> $OUT/checks-E5.log
done
wait $GP; cat /tmp/gen.rc; tail -2 /tmp/gen-E5.log
cp /tmp/gen-E5.log /tmp/img-E5/GEN.log; tar -C /tmp/img-E5 -czf $OUT/images-E5.tar.gz .
echo "done at $(( $(date +%s) - S0 ))s"
