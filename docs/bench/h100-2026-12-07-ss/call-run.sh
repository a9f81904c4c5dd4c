#!/bin/bash
# The committed build on one machine, in one call (the run report's call.sh
# less bench --gpu, the paths through a serve and the Python bench), carrying .device/fr.tar.xz
# (the host, every plugin, the example vendor's plugin, gpucheck.test,
# cuda.test, cudaexec.test, built CGO_ENABLED=0 at the commit in fr/rev):
# the checks from the committed images (no NVRTC), the graph step under
# memcheck, and the Python GPU suites.
set -u
S0=$(date +%s); at() { echo "$(( $(date +%s) - S0 ))s"; }
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
mkdir -p /tmp/d && rm -rf /tmp/d/fr && tar -C /tmp/d -xJf .device/fr.tar.xz || exit 1
D=/tmp/d/fr B=$D/bin; cp $D/rev $R/rev
export ATTNPLUG_REQUIRE_GPU=1
unset ATTNPLUG_DEVICE_CODE
mkdir -p bin && cp -r $B/* bin/
export ATTNPLUG_FIRST_USE_PLUGINS=$D/bin/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
(cd launch/cudaexec && timeout 40 $D/cudaexec.test -test.count=1 > $R/cudaexec.log 2>&1; echo "cudaexec rc=$?")
(cd cuda && timeout 40 $D/cuda.test -test.count=1 >> $R/cudaexec.log 2>&1; echo "cuda rc=$?")
g() { (cd internal/gpucheck && timeout 150 ${3:-} $D/gpucheck.test -test.v -test.count=1 -test.short -test.run "$1" \
  -test.timeout 145s > $R/gpucheck-$2.log 2>&1; echo "gpucheck $2 rc=$? at $(at)"); }
g 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestScheduleOnDevice|TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper' 1 &
g 'TestDecodeStepGraph' 3 "compute-sanitizer --tool memcheck --error-exitcode 3" &
g 'TestFirstUse|TestHostAcrossASwap' 2
wait
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 100 python3 -m unittest -v \
  test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $R/python.log 2>&1; echo "python rc=$? at $(at)")
grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)|ERROR SUMMARY" $R/gpucheck-*.log $R/cudaexec.log | sort | uniq -c
tail -4 $R/python.log
tar -C $R -czf $OUT/out.tar.gz .
echo "done at $(at)"
