#!/bin/bash
# Call 5: the tree's figures again on whichever card comes (an H200 is what
# issues 38 and 39 ask for): gpucheck's kernel checks on the committed
# images, the Python GPU suites, attnplug bench --gpu --json with the
# targets, python -m attnplug.bench --gpu and the Python bench of the class.
set -u
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d3.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=/tmp/d/bin/plugins
mkdir -p bin && cp -r /tmp/d/bin/* bin/
(cd internal/gpucheck && timeout 150 /tmp/d/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestFirstUse' \
  -test.timeout 145s > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- (FAIL|PASS|SKIP)|FAIL|ok|PASS|panic)" $OUT/gpucheck.log | cut -c1-140 | tr '\n' ' '; echo
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout $(left 260) python3 -m unittest -v test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench > $OUT/python.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s")
grep -E "^Ran|^OK|^FAILED" $OUT/python.log; grep -A20 "^FAIL:\|^ERROR:" $OUT/python.log | head -30
timeout $(left 380) bin/attnplug bench --gpu --json --plugin-dir bin/plugins > $OUT/bench.json 2> $OUT/bench.err; echo "bench rc=$? at $(( $(date +%s) - S ))s"
bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false --plugin-dir bin/plugins > /dev/null 2>&1 &
SP=$!
for i in $(seq 50); do [ -S /tmp/ap.sock ] && break; sleep 0.2; done
(cd python && PYTHONUNBUFFERED=1 timeout $(left 430) python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock --json > $OUT/paths.json 2> $OUT/paths.txt; echo "paths rc=$? at $(( $(date +%s) - S ))s")
kill $SP
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout $(left 580) python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench.txt 2>&1; echo "pybench rc=$? at $(( $(date +%s) - S ))s")
cut -c1-150 $OUT/paths.txt; cut -c1-150 $OUT/pybench.txt | tail -40
echo "call5 done at $(( $(date +%s) - S ))s"
