#!/bin/bash
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/dev.tar.xz || exit 1
xz -dc .device/gpucheck.xz > /tmp/d/gpucheck.test && chmod +x /tmp/d/gpucheck.test
nvidia-smi --query-gpu=name --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=/tmp/d/bin/plugins
(cd internal/gpucheck && timeout 200 /tmp/d/gpucheck.test -test.v -test.count=1 -test.run 'TestHopperLaunchFeatures|TestDecodeStepGraph|TestServingLoop' > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$?")
grep -hE "^(--- |FAIL|ok|PASS|panic)|hopper_test" $OUT/gpucheck.log | cut -c1-200
mkdir -p bin/plugins && cp /tmp/d/bin/attnplug bin/ && cp /tmp/d/bin/plugins/attnplug-backend-fa3 bin/plugins/
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 300 python3 -m unittest -v test_sglang_backend.BackendGPUTest test_sglang_backend.FakeKernelTest > $OUT/python.log 2>&1; echo "python rc=$?")
grep -E "(ok|FAIL|ERROR)$|^Ran|^OK|^FAILED|fp8 cache|rel err" $OUT/python.log | cut -c1-200 | head -60
grep -A25 "^FAIL:\|^ERROR:" $OUT/python.log | head -50
echo "call3 done at $(( $(date +%s) - S ))s"
