#!/bin/bash
# Prepared, not run: the committed build's full run from its images (no
# NVRTC), carrying .device/fr.tar.xz (bundle.sh). The last full run on an
# H200 is from 2026-12-06; issue 39's goals are judged there. In order,
# each where the seconds left of T allow (call.sh [T], T 480 by default),
# each stopped 15 s before T:
# A. bench --gpu --json --plot; cudaexec, cuda and gpucheck (at least
#    120 s left).
# A2. At least 100 s left: the 16-row body, the graph step and sparse/FP8
#    under memcheck, the Python GPU suites, each path through a real
#    attnplug serve, an eager layer by parts, the Python bench.
# Outputs: bench.json, bench.svg, out.tar.gz.
set -u
T=${1:-480}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
lim() { local x=$(left $((T - 15))); [ $x -gt $1 ] && x=$1; echo $x; } # at most $1 s, and 15 s before T
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/fr.tar.xz || exit 1
D=/tmp/e/fr B=/tmp/e/fr/bin; cp $D/rev $R/rev
echo "unpacked at $(at)"
export ATTNPLUG_REQUIRE_GPU=1
unset ATTNPLUG_DEVICE_CODE
mkdir -p bin && cp -r $B/* bin/

# A.
timeout $(lim 300) $B/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $B/plugins > $OUT/bench.json 2> $R/bench.err
echo "bench rc=$? at $(at)"
export ATTNPLUG_FIRST_USE_PLUGINS=$B/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
if [ $(left $T) -ge 120 ]; then
  (cd launch/cudaexec && timeout $(lim 40) $D/cudaexec.test -test.count=1 > $R/cudaexec.log 2>&1; echo "cudaexec rc=$?")
  (cd cuda && timeout $(lim 40) $D/cuda.test -test.count=1 >> $R/cudaexec.log 2>&1; echo "cuda rc=$?")
  (cd internal/gpucheck && timeout $(lim 150) $D/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestScheduleOnDevice|TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper|TestFirstUse|TestHostAcrossASwap' \
    -test.timeout 145s > $R/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(at)")
  grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)" $R/gpucheck.log $R/cudaexec.log | sort | uniq -c
fi
tar -C $R -czf $OUT/out.tar.gz .

# A2.
if [ $(left $T) -lt 100 ]; then echo "A2 skipped, done at $(at)"; exit 0; fi
(cd internal/gpucheck && timeout $(lim 150) compute-sanitizer --tool memcheck --error-exitcode 3 $D/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestNarrowWGMMAOnHopper|TestDecodeStepGraph|TestSparseAndFP8' -test.timeout 145s > $R/memcheck.log 2>&1; echo "memcheck rc=$? at $(at)") &
MP=$!
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout $(lim 200) python3 -m unittest -v \
  test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $R/python.log 2>&1; echo "python rc=$? at $(at)")
wait $MP
bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false 2> /tmp/serve.err &
SP=$!; sleep 3
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=. timeout $(lim 100) python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock > $R/paths.txt 2>&1; echo "paths rc=$? at $(at)")
kill $SP
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=.:testing timeout $(lim 80) python3 ../docs/bench/h100-2026-12-06-fp8-seesaw/eager_parts.py ../bin/attnplug > $R/eager_parts.txt 2>&1; echo "eager parts rc=$? at $(at)")
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout $(lim 240) python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $R/pybench.txt 2>&1; echo "pybench rc=$? at $(at)")
grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)|ERROR SUMMARY" $R/memcheck.log | sort | uniq -c
tail -4 $R/python.log
tar -C $R -czf $OUT/out.tar.gz .
echo "done at $(at)"
