#!/bin/bash
# Call A: the kernels' images built with nvcc 13 (mla_schedule_split added);
# on the binaries of the tree (mla_decode compiled by NVRTC, its images being
# stale): the decode tests (extends cut into work requests) and the
# methods-agree test, the Python backend's GPU tests (long extends, prefix
# chunks), bench --gpu's extend rows beside torch, and an eager layer
# through the Python backend.
set -u
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/devA2.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
( /tmp/d/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"; tar -C /tmp -czf $OUT/images.tgz img ) &
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=/tmp/d/bin/plugins
(cd internal/gpucheck && timeout 140 /tmp/d/gpucheck.test -test.v -test.count=1 -test.run 'TestMLADecodeRandom|TestMethodsAgreeWithMLA|TestPrefixChunks|TestPrefillMethods' -test.short -test.timeout 135s > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(( $(date +%s) - S ))s")
grep -E "^(--- |FAIL|ok|PASS|panic)|extend|NVRTC" $OUT/gpucheck.log | cut -c1-200 | head -24
grep -B2 -A10 -- "--- FAIL" $OUT/gpucheck.log | head -24
mkdir -p bin/plugins && cp /tmp/d/bin/attnplug bin/ && cp /tmp/d/bin/plugins/attnplug-backend-fa3 bin/plugins/
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 150 python3 -m unittest -v \
  test_sglang_backend.BackendGPUTest.test_extend_matches_the_reference test_sglang_backend.BackendGPUTest.test_chunked_prefix_matches_the_reference \
  test_sglang_backend.BackendGPUTest.test_draft_steps_match_the_reference test_sglang_backend.FakeKernelTest.test_draft_decode_steps test_sglang_backend.FakeKernelTest.test_draft_graph_hooks_2026_protocol > $OUT/python.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s")
grep -E "(ok|FAIL|ERROR)$|^Ran|^OK|^FAILED|rel err" $OUT/python.log | cut -c1-200 | head -12
grep -A25 "^FAIL:\|^ERROR:" $OUT/python.log | head -30
wait
timeout $(left 380) /tmp/d/bin/attnplug bench --gpu --only extend --plugin-dir /tmp/d/bin/plugins > $OUT/bench.txt 2>&1; echo "bench rc=$? at $(( $(date +%s) - S ))s"
cut -c1-240 $OUT/bench.txt
[ $(left 440) -gt 50 ] && (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout $(left 440) python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench.txt 2>&1; echo "pybench rc=$? at $(( $(date +%s) - S ))s")
cut -c1-160 $OUT/pybench.txt | tail -14
tail -2 $OUT/gen.log
echo "callA done at $(( $(date +%s) - S ))s"
