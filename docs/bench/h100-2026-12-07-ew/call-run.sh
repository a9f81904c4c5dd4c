#!/bin/bash
# Prepared for the next session's first call, not run: the committed build
# (b07f6f0, with G2's images) from .device/fr.tar.xz, on an H200 if one comes.
# The committed build on one machine, in one call, carrying .device/fr.tar.xz
# (the host, every plugin, the example vendor's plugin, gpucheck.test,
# cuda.test, cudaexec.test, built CGO_ENABLED=0 at the commit in fr/rev):
# 1. attnplug bench --gpu --json --plot: every row, torch beside it, the goals;
# 2. the checks from the committed images (no NVRTC), and the Python GPU suites;
# 3. each path through a real attnplug serve; an eager layer by parts;
# 4. the Python bench: 61-layer steps in a graph, eager layers, beside torch;
# beside the Python GPU suites, the 16-row body, the graph step and sparse/FP8
# under compute-sanitizer memcheck (G2's images, the 16-row body over a bf16
# cache).
set -u
S0=$(date +%s); at() { echo "$(( $(date +%s) - S0 ))s"; }
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
mkdir -p /tmp/d && rm -rf /tmp/d/fr && tar -C /tmp/d -xJf .device/fr.tar.xz || exit 1
D=/tmp/d/fr B=$D/bin; cp $D/rev $R/rev
export ATTNPLUG_REQUIRE_GPU=1
unset ATTNPLUG_DEVICE_CODE
mkdir -p bin && cp -r $B/* bin/
timeout 300 $B/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $B/plugins > $OUT/bench.json 2> $R/bench.err
echo "bench rc=$? at $(at)"
export ATTNPLUG_FIRST_USE_PLUGINS=$D/bin/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
(cd launch/cudaexec && timeout 40 $D/cudaexec.test -test.count=1 > $R/cudaexec.log 2>&1; echo "cudaexec rc=$?")
(cd cuda && timeout 40 $D/cuda.test -test.count=1 >> $R/cudaexec.log 2>&1; echo "cuda rc=$?")
(cd internal/gpucheck && timeout 150 $D/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestScheduleOnDevice|TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper|TestFirstUse|TestHostAcrossASwap' \
  -test.timeout 145s > $R/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(at)")
(cd internal/gpucheck && timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $D/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestNarrowWGMMAOnHopper|TestDecodeStepGraph|TestSparseAndFP8' -test.timeout 145s > $R/memcheck.log 2>&1; echo "memcheck rc=$? at $(at)") &
MP=$!
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 200 python3 -m unittest -v \
  test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $R/python.log 2>&1; echo "python rc=$? at $(at)")
wait $MP
bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false 2> /tmp/serve.err &
SP=$!; sleep 3
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=. timeout 100 python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock > $R/paths.txt 2>&1; echo "paths rc=$? at $(at)")
kill $SP
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=.:testing timeout 80 python3 ../docs/bench/h100-2026-12-06-fp8-seesaw/eager_parts.py ../bin/attnplug > $R/eager_parts.txt 2>&1; echo "eager parts rc=$? at $(at)")
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout 240 python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $R/pybench.txt 2>&1; echo "pybench rc=$? at $(at)")
grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)|ERROR SUMMARY" $R/gpucheck.log $R/cudaexec.log $R/memcheck.log | sort | uniq -c
tail -4 $R/python.log
tar -C $R -czf $OUT/out.tar.gz .
echo "done at $(at)"
