#!/bin/bash
# Call 7: the Python package as it stands at the end of the session (the
# backends split into sglang_mla and sglang_dsa, one layer method): every
# Python GPU suite, and python -m attnplug.bench's test.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d7.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p bin && cp -r /tmp/d/bin/* bin/
cd python
export PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin ATTNPLUG_ACME_BIN=/tmp/d/acme
timeout 400 python3 -m unittest -v test_sglang_dsa test_sglang_backend test_device test_device_tma test_bench test_vendor_sglang > $OUT/python-final.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s"
grep -E "^Ran|^OK|^FAILED" $OUT/python-final.log
grep -A30 "^FAIL:\|^ERROR:" $OUT/python-final.log | head -50
echo "call7 done at $(( $(date +%s) - S ))s"
