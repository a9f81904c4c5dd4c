#!/bin/bash
# Call 9: the tree at the session's end on whichever card comes (an H200 is
# what issue 38's done-when asks for): gpucheck's kernel checks on the
# committed images, the Python GPU suites of the backends, and attnplug
# bench --gpu --json --plot.
set -u
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d9.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=/tmp/d/bin/plugins
mkdir -p bin && cp -r /tmp/d/bin/* bin/
timeout 80 bin/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir bin/plugins > $OUT/bench.json 2> $OUT/bench.err; echo "bench rc=$? at $(( $(date +%s) - S ))s"
(cd internal/gpucheck && timeout 70 /tmp/d/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph' \
  -test.timeout 65s > $OUT/gotests.log 2>&1; echo "gpucheck rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- (FAIL|PASS)|FAIL|ok|PASS|panic)" $OUT/gotests.log | cut -c1-100 | tr '\n' ' '; echo
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout $(left 190) python3 -m unittest test_sglang_dsa test_sglang_backend.BackendGPUTest > $OUT/python.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s")
grep -E "^Ran|^OK|^FAILED" $OUT/python.log
echo "call9 done at $(( $(date +%s) - S ))s"
