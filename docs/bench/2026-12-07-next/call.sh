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
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
lim() { local x=$(left $((T - 15))); [ $x -gt $1 ] && x=$1; echo $x; } # at most $1 s, and 15 s before T
rm -rf /tmp/res /tmp/resV && mkdir -p /tmp/res /tmp/resV
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/res/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/nx.tar.xz || exit 1
E=/tmp/e/nx D=/tmp/e/nx/fr B=/tmp/e/nx/fr/bin; cp $E/rev /tmp/res/rev
echo "unpacked at $(at)"
export ATTNPLUG_REQUIRE_GPU=1
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
rm -rf /tmp/imgV && mkdir -p /tmp/imgV
(ATTNPLUG_CACHE_DIR=/tmp/cache-genV timeout $(lim 200) $E/V/gen -set kernels -out /tmp/imgV > /tmp/genV.log 2>&1; echo "gen V rc=$? at $(at)"
 cuobjdump -res-usage /tmp/imgV/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_(decode|sparse)_(fp8_)?(wg16|wg64|ss64)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
 cp /tmp/genV.log /tmp/imgV/GEN.log; tar -C /tmp/imgV -czf $OUT/imagesV.tar.gz .
 for v in V N; do src=$PWD/devkernels/mla_decode_sm90.cu; [ $v = V ] && src=$E/V/src.cu
   [ $(left $T) -gt 60 ] || break
   (cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat $src; } > /tmp/m-$v.cu)
   timeout $(lim 150) nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m-$v.cubin /tmp/m-$v.cu > /tmp/ptxas-$v.log 2>&1
   echo "== $v nvcc rc=$?"
   for f in mla_decode_ss64 mla_sparse_ss64 mla_decode_fp8_ss64 mla_sparse_fp8_ss64; do
     echo "$f: $(grep -A4 -E "Compiling entry function '$f'" /tmp/ptxas-$v.log | grep -E "spill|Used" | tr -s ' ' | tr '\n' ' ')"; done
   echo "C75xx warnings: $(grep -cE 'C75[0-9][0-9]' /tmp/ptxas-$v.log)"; grep -E 'C75[0-9][0-9]' /tmp/ptxas-$v.log | grep -o "(C75[0-9]*).*function '[a-z0-9_]*'" | sed 's/ in around line [0-9]*//' | sort | uniq -c
 done) > /tmp/genV.txt 2>&1 &
genV=$!
export ATTNPLUG_FIRST_USE_PLUGINS=$B/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
if [ $ONLY_B = 0 ] && [ $(left $T) -ge 120 ]; then
  (cd launch/cudaexec && timeout $(lim 40) $D/cudaexec.test -test.count=1 > $R/cudaexec.log 2>&1; echo "cudaexec rc=$?")
  (cd cuda && timeout $(lim 40) $D/cuda.test -test.count=1 >> $R/cudaexec.log 2>&1; echo "cuda rc=$?")
  (cd internal/gpucheck && timeout $(lim 150) $D/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestScheduleOnDevice|TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper|TestFirstUse|TestHostAcrossASwap' \
    -test.timeout 145s > $R/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(at)")
  grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)" $R/gpucheck.log $R/cudaexec.log | sort | uniq -c
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
  part() { (cd internal/gpucheck && timeout $(lim 170) ${pre[$1]} $E/V/gpucheck-V.test -test.v -test.count=1 -test.short \
        -test.run "${runs[$1]}" -test.timeout 165s > /tmp/V-$1.log 2>&1; echo "V checks $1 rc=$? at $(at)"); }
  mkdir -p /tmp/e/N/plugins && cp $B/plugins/attnplug-backend-fa3 $B/plugins/attnplug-backend-dsa /tmp/e/N/plugins/
  (timeout $(lim 150) $B/attnplug bench --gpu --python "" --only h128_b16_s4096 --plugin-dir /tmp/e/N/plugins > /tmp/warmN.log 2>&1; echo "N compiled rc=$? at $(at)") &
  wN=$!
  part 0 & p0=$!; part 1 & p1=$!; part 2 & p2=$!; part 3 & p3=$!
  wait $p0 $p1 $p2 $p3 $wN
  for p in 0 1 2 3; do echo "== ${pre[$p]} gpucheck V ${runs[$p]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|ERROR SUMMARY" /tmp/V-$p.log | cut -c1-300
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/V-$p.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done > $R/checks-V.log
  grep -h -B3 -A20 -- "--- FAIL" /tmp/V-*.log | cut -c1-400 | head -60 >> $R/checks-V.log
  cat $R/checks-V.log
  ROWS="h128_b16,h128_b64,h128_b128,h128_ragged64,h16_extend_b16,h16_extend_b4,sparse bf16 h128,sparse fp8 h128 b16,fp8 decode h128"
  rm -rf /tmp/ab && mkdir -p /tmp/ab
  rest=130; [ $ONLY_B = 1 ] && rest=45 # the seconds A2 wants, or the tail's
  for round in 1 2 3 4 5; do
    for v in N V; do
      [ $(left $T) -gt $rest ] || break 2
      dir=/tmp/e/$v/plugins; [ $v = V ] && dir=$E/V/plugins
      timeout $(lim 120) $B/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
        > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    done
  done
  cp -r /tmp/ab $R/ab
  python3 docs/bench/h100-2026-12-06-producer/abtable.py N V > $OUT/ab.txt; cat $OUT/ab.txt
  unset ATTNPLUG_DEVICE_CODE ATTNPLUG_CACHE_DIR
  echo "B done at $(at)"
fi
wait $genV; cat /tmp/genV.txt | tee /tmp/resV/gen.txt
tar -C /tmp/resV -czf $OUT/outV.tar.gz .

# A2. The committed build's other checks.
R=/tmp/res
if [ $ONLY_B = 1 ] || [ $(left $T) -lt 100 ]; then echo "A2 skipped, done at $(at)"; exit 0; fi
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
