#!/bin/bash
# Call 7: the committed images of the tree's loader, ahead of time (no
# NVRTC): the kernel checks against float64, whole and split queries.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d7.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1
(cd internal/gpucheck && timeout 100 /tmp/d/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph|TestPrefillMethods' \
  -test.timeout 95s > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)|NVRTC" $OUT/gpucheck.log | cut -c1-120
grep -B2 -A12 -- "--- FAIL" $OUT/gpucheck.log | head -30
echo "call7 done at $(( $(date +%s) - S ))s"
