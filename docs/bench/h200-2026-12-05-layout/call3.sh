#!/bin/bash
# Call 3: the committed images (nvcc 13, layouts exported as <entry>_shared)
# ahead of time, no NVRTC: cuda, cudaexec, gpucheck's kernel checks (each
# loaded module's shared memory against the plans', decode, sparse, FP8,
# prefill, prefix chunks, a decode step in a graph, first use); the Python
# GPU suites (DeepSeek-V3.2's sparse backend, the dense backend, the
# launcher); attnplug bench --gpu --json with the targets; and the Python
# bench (the kernel from Python, 61-layer steps through the class, an eager
# layer, each path and the sparse rows beside torch).
set -u
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d3.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=/tmp/d/bin/plugins
mkdir -p bin && cp -r /tmp/d/bin/* bin/
(cd launch/cudaexec && timeout 60 /tmp/d/cudaexec.test -test.count=1 > $OUT/cudaexec.log 2>&1; echo "cudaexec rc=$?")
(cd cuda && timeout 60 /tmp/d/cuda.test -test.count=1 > $OUT/cuda.log 2>&1; echo "cuda rc=$? at $(( $(date +%s) - S ))s")
(cd internal/gpucheck && timeout 150 /tmp/d/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestFirstUse' \
  -test.timeout 145s > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- (FAIL|PASS|SKIP)|FAIL|ok|PASS|panic)|entries' shared memory" $OUT/cudaexec.log $OUT/cuda.log $OUT/gpucheck.log | cut -c1-140
grep -hB2 -A12 -- "--- FAIL" $OUT/*.log | head -30
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout $(left 300) python3 -m unittest -v test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma > $OUT/python.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s")
grep -E "^Ran|^OK|^FAILED" $OUT/python.log; grep -A20 "^FAIL:\|^ERROR:" $OUT/python.log | head -30
timeout $(left 400) bin/attnplug bench --gpu --json --plugin-dir bin/plugins > $OUT/bench.json 2> $OUT/bench.err; echo "bench rc=$? at $(( $(date +%s) - S ))s"
tail -3 $OUT/bench.err
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout $(left 590) python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench.txt 2>&1; echo "pybench rc=$? at $(( $(date +%s) - S ))s")
cut -c1-150 $OUT/pybench.txt | tail -45
echo "call3 done at $(( $(date +%s) - S ))s"
