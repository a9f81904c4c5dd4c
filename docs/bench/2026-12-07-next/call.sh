#!/bin/bash
# Prepared, not run. Carries .device/nx.tar.xz (bundle.sh: nx/fr the
# committed build, every plugin, the example vendor's plugin,
# gpucheck.test, cuda.test, cudaexec.test; nx/V gen, the fa3 and dsa
# plugins, gpucheck-V.test and the source, with v.patch). Its parts, in
# order, each where the seconds left of T allow (call.sh [T], T 540 by
# default), each stopped 15 s before T:
# A. The committed build's full run from its images (no NVRTC): bench
#    --gpu --json --plot, then cudaexec, cuda and gpucheck (at least 120 s
#    left). The last full run on an H200 is from 2026-12-06; issue 39's
#    goals are judged there. V's images (gen) and ptxas's figures of both
#    seesaws are made on the CPU meanwhile.
# B. At least 200 s left: V, the seesaw's validity arrivals from the 16
#    threads that write the keys' validity, where all 128 of warpgroup 0
#    arrived (a refill of blocks 0-3 arrives 144 times, where it arrived
#    256): V's checks through NVRTC (the random decode; the schedule and
#    shared memory; the in-process backend, the graph step and sparse/FP8
#    under memcheck; the in-process backend under synccheck), N's code
#    through NVRTC into the cache (an untimed run), then interleaved rounds
#    of bench --gpu over the seesaw's rows, N (the committed plugins) and
#    V, while more than 130 s are left (45 where only B runs).
# A2. At least 100 s left: the committed build's 16-row body, graph step
#    and sparse/FP8 under memcheck, the Python GPU suites, each path
#    through a real attnplug serve, an eager layer by parts, the Python
#    bench.
# On an H100 only B runs: the committed kernels are those of the last full
# H100 run (h100-2026-12-07-run3.md), whose A and A2 passed; A is for the
# H200, whose last full run is older (ONLY_B=0 or 1 overrides).
# Outputs: bench.json, bench.svg, out.tar.gz (A, A2); imagesV.tar.gz,
# ab.txt, outV.tar.gz (B).
set -u
T=${1:-540}
. "$(dirname "$0")/../call-lib.sh"
unpack nx /tmp/res # E, D, B
rm -rf /tmp/resV && mkdir -p /tmp/resV
unset ATTNPLUG_DEVICE_CODE
mkdir -p bin && cp -r $B/* bin/

ONLY_B=${ONLY_B:-$(grep -q H100 /tmp/res/smi.txt && echo 1 || echo 0)}
echo "ONLY_B=$ONLY_B"
# A. The committed build, from its images.
R=/tmp/res
if [ $ONLY_B = 0 ]; then
timeout $(lim 300) $B/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $B/plugins > $OUT/bench.json 2> $R/bench.err
echo "bench rc=$? at $(at)"
fi
# V's images (gen, NVRTC on the CPU) and ptxas's figures of the seesaw, V
# and the committed source (N), beside the untimed checks.
(variant_images V
 for v in V N; do src=$PWD/devkernels/mla_decode_sm90.cu; [ $v = V ] && src=$E/V/src.cu
   [ $(left $T) -gt 60 ] || break
   seesaw_ptxas $v $src
   grep -E 'C75[0-9][0-9]' /tmp/ptxas-$v.log | grep -o "(C75[0-9]*).*function '[a-z0-9_]*'" | sed 's/ in around line [0-9]*//' | sort | uniq -c
 done) > /tmp/genV.txt 2>&1 &
genV=$!
export ATTNPLUG_FIRST_USE_PLUGINS=$B/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
if [ $ONLY_B = 0 ] && [ $(left $T) -ge 120 ]; then
  committed_tests $D $R
fi
tar -C $R -czf $OUT/out.tar.gz .
echo "A done at $(at)"

# B. V.
if [ $(left $T) -ge 200 ]; then
  R=/tmp/resV
  export ATTNPLUG_CACHE_DIR=/tmp/cache-nx ATTNPLUG_DEVICE_CODE=nvrtc
  runs=('TestMLADecodeRandom'
        'TestSharedMemoryOfTheEntries|TestScheduleOnDevice'
        'TestInProcessBackendOnDevice|TestDecodeStepGraph|TestSparseAndFP8'
        'TestInProcessBackendOnDevice')
  pre=("" "" "compute-sanitizer --tool memcheck --error-exitcode 3" "compute-sanitizer --tool synccheck --error-exitcode 3")
  warm_n
  checks V $E/V/gpucheck-V.test $R/checks-V.log 170
  wait $wN
  rest=130; [ $ONLY_B = 1 ] && rest=45 # the seconds A2 wants, or the tail's
  ab_rounds V "$SEESAW_ROWS" $rest
  unset ATTNPLUG_DEVICE_CODE ATTNPLUG_CACHE_DIR
  echo "B done at $(at)"
fi
wait $genV; cat /tmp/genV.txt | tee /tmp/resV/gen.txt
tar -C /tmp/resV -czf $OUT/outV.tar.gz .

# A2. The committed build's other checks.
R=/tmp/res
if [ $ONLY_B = 1 ] || [ $(left $T) -lt 100 ]; then echo "A2 skipped, done at $(at)"; exit 0; fi
committed_checks $D $R
echo "done at $(at)"
