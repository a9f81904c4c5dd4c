#!/bin/bash
# One call, carrying .device/bl.tar.xz (bundle.sh: bl/fr the committed
# build, every plugin, the example vendor's plugin, gpucheck.test,
# cuda.test, cudaexec.test; bl/C gen, the fa3 and dsa plugins,
# gpucheck-C.test and the source, with c.patch). Its parts, in order, each
# where the seconds left of T allow (call.sh [T [U]], T 570 by default):
# B. C, the seesaw's key buffers landing a column block at a time (nine
#    mbarriers a buffer, where there were two halves): C's images (gen) and
#    ptxas's figures of both seesaws (C first) on the CPU, beside C's checks through
#    NVRTC (the random decode; the schedule, prefill and shared memory; the
#    in-process backend, the graph step and sparse/FP8 under memcheck; the
#    in-process backend under synccheck), and N's code through NVRTC into
#    the cache, an untimed run; then interleaved rounds of
#    bench --gpu over the seesaw's rows, N (the committed plugins) and C,
#    both through NVRTC, while more than U seconds are left (call.sh T U;
#    U 200 by default).
# A. The committed build from its images (no NVRTC): bench --gpu --json
#    --plot (at least 170 s left), then cudaexec, cuda and gpucheck (at
#    least 120 s left).
# A2. Its other checks, at least 100 s left, each stopped 15 s before T:
#    the 16-row body, the graph step and sparse/FP8 under memcheck, the
#    Python GPU suites, each path through a real attnplug serve, an eager
#    layer by parts, the Python bench.
# Outputs: imagesC.tar.gz, ab.txt, outC.tar.gz (B); bench.json, bench.svg,
# out.tar.gz (A, A2).
set -u
T=${1:-570} U=${2:-200}
. "$(dirname "$0")/../call-lib.sh"
unpack bl /tmp/res # E, D, B
rm -rf /tmp/resC && mkdir -p /tmp/resC

# B. C's images (gen, NVRTC on the CPU) and ptxas's figures of the
# seesaw, committed (N) and C, beside C's checks.
R=/tmp/resC
(variant_images C
 for v in C N; do src=$PWD/devkernels/mla_decode_sm90.cu; [ $v = C ] && src=$E/C/src.cu
   [ $(left $T) -gt 60 ] || break
   seesaw_ptxas $v $src
   grep -E 'C75[0-9][0-9]' /tmp/ptxas-$v.log | head -4
   cuobjdump -sass -fun mla_decode_ss64 /tmp/m-$v.cubin > /tmp/ss.sass 2>/dev/null
   echo "ss64 SASS lines $(wc -l < /tmp/ss.sass), DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/ss.sass), ARRIVE $(grep -c 'WARPGROUP.ARRIVE' /tmp/ss.sass), HGMMA $(grep -c HGMMA /tmp/ss.sass), local $(grep -cE 'STL|LDL' /tmp/ss.sass)"
 done) > /tmp/genC.txt 2>&1 &
genC=$!
export ATTNPLUG_CACHE_DIR=/tmp/cache-bl ATTNPLUG_DEVICE_CODE=nvrtc
runs=('TestMLADecodeRandom'
      'TestSharedMemoryOfTheEntries|TestPrefillMethods|TestScheduleOnDevice'
      'TestInProcessBackendOnDevice|TestDecodeStepGraph|TestSparseAndFP8'
      'TestInProcessBackendOnDevice')
pre=("" "" "compute-sanitizer --tool memcheck --error-exitcode 3" "compute-sanitizer --tool synccheck --error-exitcode 3")
warm_n # N's code through NVRTC into the cache beside the checks
checks C $E/C/gpucheck-C.test $R/checks-C.log 170
wait $wN
ab_rounds C "$SEESAW_ROWS" $U
wait $genC; cat /tmp/genC.txt | tee $R/gen.txt
tar -C $R -czf $OUT/outC.tar.gz .
echo "B done at $(at)"
unset ATTNPLUG_DEVICE_CODE ATTNPLUG_CACHE_DIR

# A. The committed build, from its images.
R=/tmp/res
mkdir -p bin && cp -r $B/* bin/
if [ $(left $T) -ge 170 ]; then
  timeout $(lim 300) $B/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $B/plugins > $OUT/bench.json 2> $R/bench.err
  echo "bench rc=$? at $(at)"
fi
export ATTNPLUG_FIRST_USE_PLUGINS=$B/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
if [ $(left $T) -ge 120 ]; then
  committed_tests $D $R
fi
tar -C $R -czf $OUT/out.tar.gz .

# A2. The committed build's other checks.
if [ $(left $T) -lt 100 ]; then echo "A2 skipped, done at $(at)"; exit 0; fi
committed_checks $D $R
echo "done at $(at)"
