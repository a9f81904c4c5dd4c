#!/bin/bash
# Call 2: the kernels' shared memory written once (each body's layout in its
# source, exported as <entry>_shared): build the images with nvcc 13 (gen:
# the manifest records every entry's shared memory from the PTX), and check
# the sources through NVRTC (the test binaries embed the images of before,
# stale): each loaded module's constants against what the plans give, and
# the decode, sparse, FP8 and prefill kernels against float64.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d2.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf /tmp/img && mkdir -p /tmp/img
/tmp/d/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"
tail -3 $OUT/gen.log
grep -c '_shared\|"mla\|"mha' /tmp/img/manifest.json
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
export ATTNPLUG_REQUIRE_GPU=1
(cd internal/gpucheck && timeout 400 /tmp/d/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks' \
  -test.timeout 390s > $OUT/gpucheck-nvrtc.log 2>&1; echo "gpucheck (NVRTC) rc=$? at $(( $(date +%s) - S ))s")
grep -E "^(--- |FAIL|ok|PASS|panic)|entries' shared memory|NVRTC" $OUT/gpucheck-nvrtc.log | cut -c1-160 | head -30
grep -B2 -A12 -- "--- FAIL" $OUT/gpucheck-nvrtc.log | head -40
echo "call2 done at $(( $(date +%s) - S ))s"
