#!/bin/bash
# Session 55, call 8: the Python launcher's cuLaunchKernel without argtypes
# (B) on the committed build's binaries (4b0fa8c): the Python GPU suites,
# then an eager layer by parts, A (device.py of 2e2822d) and B interleaved,
# three rounds.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/s55f.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_ACME_BIN=/tmp/d/s55f/acme/attnplug-backend-acme_mla
mkdir -p bin && cp -r /tmp/d/s55f/bin/* bin/
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 150 python3 -m unittest -v test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $OUT/python.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s")
grep -E "^Ran|^OK|^FAILED" $OUT/python.log; grep -A25 "^FAIL:\|^ERROR:" $OUT/python.log | head -40
rm -rf /tmp/pyA && mkdir -p /tmp/pyA && cp -r python /tmp/pyA/ && cp .device/device_A.py /tmp/pyA/python/attnplug/device.py
P=$PWD/docs/bench/h100-2026-12-06-fp8-seesaw/eager_parts.py
for r in 1 2 3; do
  for v in A B; do
    d=$PWD/python; [ $v = A ] && d=/tmp/pyA/python
    (cd $d && PYTHONUNBUFFERED=1 PYTHONPATH=.:testing timeout 60 python3 $P $OLDPWD/bin/attnplug 2>&1 | tail -2 | sed "s/^/$v $r /" >> $OUT/eager-ab.txt)
  done
done
cat $OUT/eager-ab.txt
echo "done at $(( $(date +%s) - S ))s"
