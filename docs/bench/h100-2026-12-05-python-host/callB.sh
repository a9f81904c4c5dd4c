#!/bin/bash
# Call B: make test-gpu's packages on the committed images (no NVRTC), the
# Python GPU tests (the draft steps and long extends among them), and the
# Python bench: decode steps through AttnplugMLABackend in a CUDA graph and an
# eager layer's host cost, the tree's python/attnplug against the last
# commit's (oldpy) in the same run.
set -u
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/devB2.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=/tmp/d/bin/plugins
mkdir -p bin && cp -r /tmp/d/bin/* bin/
(cd launch/cudaexec && timeout 60 /tmp/d/cudaexec.test -test.v -test.count=1 > $OUT/cudaexec.log 2>&1; echo "cudaexec rc=$? at $(( $(date +%s) - S ))s")
(cd cuda && timeout 60 /tmp/d/cuda.test -test.v -test.count=1 > $OUT/cuda.log 2>&1; echo "cuda rc=$? at $(( $(date +%s) - S ))s")
(cd internal/gpucheck && timeout 100 /tmp/d/gpucheck.test -test.v -test.count=1 -test.short -test.run 'TestMLADecodeRandom|TestPrefixChunks|TestFirstUse|TestDecodeStepGraph|TestSparseAndFP8' -test.timeout 95s > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- (FAIL|PASS|SKIP)|FAIL|ok|PASS|panic)" $OUT/cudaexec.log $OUT/cuda.log $OUT/gpucheck.log | cut -c1-120 | tr '\n' ' '; echo
grep -hB2 -A12 -- "--- FAIL" $OUT/*.log | head -40
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout $(left 300) python3 -m unittest -v test_sglang_backend.BackendGPUTest test_sglang_backend.FakeKernelTest.test_eager_decode_verify_extend test_device test_device_tma > $OUT/python.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s")
grep -E "^Ran|^OK|^FAILED" $OUT/python.log
grep -A25 "^FAIL:\|^ERROR:" $OUT/python.log | head -40
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout $(left 400) python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench.txt 2>&1; echo "pybench rc=$? at $(( $(date +%s) - S ))s")
cut -c1-160 $OUT/pybench.txt | tail -22
[ $(left 470) -gt 30 ] && (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/d/oldpy/python:testing timeout $(left 470) python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench-old.txt 2>&1; echo "pybench old rc=$? at $(( $(date +%s) - S ))s")
cut -c1-160 $OUT/pybench-old.txt | tail -14
echo "callB done at $(( $(date +%s) - S ))s"
