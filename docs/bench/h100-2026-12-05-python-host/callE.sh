#!/bin/bash
# Call E: the draft steps at DeepSeek-V3's context length over a smaller pool, on the GPU.
set -u
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/devB2.tar.xz || exit 1
mkdir -p bin && cp -r /tmp/d/bin/* bin/
cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 150 python3 -m unittest -v test_sglang_backend.BackendGPUTest.test_draft_steps_match_the_reference test_sglang_backend.FakeKernelTest.test_draft_at_deepseek_v3_context_length > $OUT/python.log 2>&1; echo "python rc=$?"
grep -v "^$" $OUT/python.log | cut -c1-200 | tail -20
