#!/bin/bash
# Call G: the Python GPU tests at DeepSeek-V3's context length over a 32768-token pool.
set -u
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/devB2.tar.xz || exit 1
mkdir -p bin && cp -r /tmp/d/bin/* bin/
cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 120 python3 -m unittest -v test_sglang_backend.BackendGPUTest > $OUT/python.log 2>&1; echo "python rc=$?"
grep -E "ok$|FAIL|ERROR|^Ran|^OK|rel err" $OUT/python.log | cut -c1-160 | tail -40
grep -A20 "^FAIL:\|^ERROR:" $OUT/python.log | head -40
