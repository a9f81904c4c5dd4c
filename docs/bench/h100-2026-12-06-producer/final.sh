#!/bin/bash
# The final run of the committed build (d972f1b's code, s57f: no kernel
# changed since the H100 run of 2026-12-06 11:14), for issues 37 and 38's
# runs on an H200, and only there (on any other GPU: profile.sh): the
# committed images ahead of time, no NVRTC: cudaexec and cuda; gpucheck's
# kernel checks (every decode form, whole and split queries, FP8, sparse,
# prefill, prefix chunks, a decode step in a graph, first use through the
# real plugins, a Host across a hot swap); the Python GPU suites (the dense
# and sparse sglang backends, the launcher, TMA, the Python bench's checks,
# acme); attnplug bench --gpu --json --plot; the Python bench (61-layer
# steps through the class in a graph beside the kernel, an eager layer) and
# the paths through a real attnplug serve; an eager layer by parts.
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $G"
set -u
REAL_OUT=$OUT; OUT=/tmp/fin; mkdir -p $OUT
S=$(date +%s)
left() { local v=$(( $1 - ($(date +%s) - S) )); [ $v -lt 5 ] && v=5; echo $v; }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/s57f.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=/tmp/d/s57f/bin/plugins ATTNPLUG_ACME_BIN=/tmp/d/s57f/acme/attnplug-backend-acme_mla
mkdir -p bin && cp -r /tmp/d/s57f/bin/* bin/
(cd launch/cudaexec && timeout 60 /tmp/d/s57f/cudaexec.test -test.count=1 > $OUT/cudaexec.log 2>&1; echo "cudaexec rc=$?")
(cd cuda && timeout 60 /tmp/d/s57f/cuda.test -test.count=1 > /tmp/cuda.log 2>&1; echo "cuda rc=$? at $(( $(date +%s) - S ))s")
cat /tmp/cuda.log >> $OUT/cudaexec.log
(cd internal/gpucheck && timeout 170 /tmp/d/s57f/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestFirstUse|TestHostAcrossASwap' \
  -test.timeout 165s > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- (FAIL|PASS|SKIP)|FAIL|ok|PASS|panic)|NVRTC|swap" $OUT/cudaexec.log $OUT/gpucheck.log | cut -c1-160
grep -hB2 -A12 -- "--- FAIL" $OUT/*.log | head -30
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout $(left 300) python3 -m unittest -v test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $OUT/python.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s")
grep -E "^Ran|^OK|^FAILED" $OUT/python.log; grep -A25 "^FAIL:\|^ERROR:" $OUT/python.log | head -50
timeout $(left 470) bin/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir bin/plugins > $OUT/bench.json 2> /tmp/bench.err; echo "bench rc=$? at $(( $(date +%s) - S ))s"
tail -3 /tmp/bench.err; cat /tmp/bench.err >> $OUT/cudaexec.log
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout $(left 590) python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench.txt 2>&1; echo "pybench rc=$? at $(( $(date +%s) - S ))s")
cut -c1-150 $OUT/pybench.txt | tail -50
bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false 2> /tmp/serve.err &
SP=$!; sleep 3
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=. timeout $(left 595) python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock > $OUT/paths.txt 2>&1; echo "attnplug.bench rc=$? at $(( $(date +%s) - S ))s")
kill $SP; cat $OUT/paths.txt
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=.:testing timeout $(left 598) python3 ../docs/bench/h100-2026-12-06-fp8-seesaw/eager_parts.py ../bin/attnplug >> $OUT/pybench.txt 2>&1; echo "eager parts rc=$? at $(( $(date +%s) - S ))s")
tail -2 $OUT/pybench.txt
echo "call done at $(( $(date +%s) - S ))s"
tar -C /tmp/fin -czf $REAL_OUT/final.tar.gz .
