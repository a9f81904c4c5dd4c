#!/bin/bash
# Call 1: queries bound in two parts (QuerySplit: q_nope and q_rope, each
# strided, read through QView). Build the images with nvcc 13 (gen), and
# check the sources through NVRTC (the test binary embeds the images of
# before, stale): every decode form (dense, FP8, sparse, sparse FP8) with
# whole and split queries against float64, outputs poisoned; the entries'
# shared memory; a decode step in a graph; cudaexec's own tests.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d1.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf /tmp/img && mkdir -p /tmp/img
/tmp/d/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"
tail -3 $OUT/gen.log
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
export ATTNPLUG_REQUIRE_GPU=1
(cd launch/cudaexec && timeout 60 /tmp/d/cudaexec.test -test.count=1 > $OUT/cudaexec.log 2>&1; echo "cudaexec rc=$?")
(cd internal/gpucheck && timeout 420 /tmp/d/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
  -test.timeout 410s > $OUT/gpucheck-nvrtc.log 2>&1; echo "gpucheck (NVRTC) rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)|split|NVRTC" $OUT/cudaexec.log $OUT/gpucheck-nvrtc.log | cut -c1-170 | head -60
grep -B2 -A12 -- "--- FAIL" $OUT/gpucheck-nvrtc.log | head -40
echo "call1 done at $(( $(date +%s) - S ))s"
