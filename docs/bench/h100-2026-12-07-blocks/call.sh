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
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
lim() { local x=$(left $((T - 15))); [ $x -gt $1 ] && x=$1; echo $x; } # at most $1 s, and 15 s before T
rm -rf /tmp/res /tmp/resC && mkdir -p /tmp/res /tmp/resC
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/res/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/bl.tar.xz || exit 1
E=/tmp/e/bl D=/tmp/e/bl/fr B=/tmp/e/bl/fr/bin; cp $E/rev /tmp/res/rev
echo "unpacked at $(at)"
export ATTNPLUG_REQUIRE_GPU=1

# B. C's images (gen, NVRTC on the CPU) and ptxas's figures of the
# seesaw, committed (N) and C, beside C's checks.
R=/tmp/resC
rm -rf /tmp/imgC && mkdir -p /tmp/imgC
(ATTNPLUG_CACHE_DIR=/tmp/cache-genC timeout $(lim 200) $E/C/gen -set kernels -out /tmp/imgC > /tmp/genC.log 2>&1; echo "gen C rc=$? at $(at)"
 cuobjdump -res-usage /tmp/imgC/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_(decode|sparse)_(fp8_)?(wg16|wg64|ss64)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
 cp /tmp/genC.log /tmp/imgC/GEN.log; tar -C /tmp/imgC -czf $OUT/imagesC.tar.gz .
 for v in C N; do src=devkernels/mla_decode_sm90.cu; [ $v = C ] && src=$E/C/src.cu
   [ $(left $T) -gt 60 ] || break
   (cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat $src; } > /tmp/m-$v.cu)
   timeout $(lim 150) nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m-$v.cubin /tmp/m-$v.cu > /tmp/ptxas-$v.log 2>&1
   echo "== $v nvcc rc=$?"
   for f in mla_decode_ss64 mla_sparse_ss64 mla_decode_fp8_ss64 mla_sparse_fp8_ss64; do
     echo "$f: $(grep -A4 -E "Compiling entry function '$f'" /tmp/ptxas-$v.log | grep -E "spill|Used" | tr -s ' ' | tr '\n' ' ')"; done
   echo "C75xx warnings: $(grep -cE 'C75[0-9][0-9]' /tmp/ptxas-$v.log)"; grep -E 'C75[0-9][0-9]' /tmp/ptxas-$v.log | head -4
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
part() { (cd internal/gpucheck && timeout $(lim 170) ${pre[$1]} $E/C/gpucheck-C.test -test.v -test.count=1 -test.short \
      -test.run "${runs[$1]}" -test.timeout 165s > /tmp/C-$1.log 2>&1; echo "C checks $1 rc=$? at $(at)"); }
mkdir -p /tmp/e/N/plugins && cp $B/plugins/attnplug-backend-fa3 $B/plugins/attnplug-backend-dsa /tmp/e/N/plugins/
# N's code through NVRTC into the cache beside the checks (an untimed run).
(timeout $(lim 150) $B/attnplug bench --gpu --python "" --only h128_b16_s4096 --plugin-dir /tmp/e/N/plugins > /tmp/warmN.log 2>&1; echo "N compiled rc=$? at $(at)") &
wN=$!
part 0 & p0=$!; part 1 & p1=$!; part 2 & p2=$!; part 3 & p3=$!
wait $p0 $p1 $p2 $p3 $wN
for p in 0 1 2 3; do echo "== ${pre[$p]} gpucheck C ${runs[$p]}"
  grep -hE "^(--- |FAIL|ok|PASS|panic)|ERROR SUMMARY" /tmp/C-$p.log | cut -c1-300
  awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/C-$p.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done > $R/checks-C.log
grep -h -B3 -A20 -- "--- FAIL" /tmp/C-*.log | cut -c1-400 | head -60 >> $R/checks-C.log
cat $R/checks-C.log
ROWS="h128_b16,h128_b64,h128_b128,h128_ragged64,h16_extend_b16,h16_extend_b4,sparse bf16 h128,sparse fp8 h128 b16,fp8 decode h128"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3 4 5; do
  for v in N C; do
    [ $(left $T) -gt $U ] || break 2
    dir=/tmp/e/$v/plugins; [ $v = C ] && dir=$E/C/plugins
    timeout $(lim 120) $B/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
cp -r /tmp/ab $R/ab
wait $genC; cat /tmp/genC.txt | tee $R/gen.txt
python3 docs/bench/h100-2026-12-06-producer/abtable.py N C > $OUT/ab.txt; cat $OUT/ab.txt
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
  (cd launch/cudaexec && timeout $(lim 40) $D/cudaexec.test -test.count=1 > $R/cudaexec.log 2>&1; echo "cudaexec rc=$?")
  (cd cuda && timeout $(lim 40) $D/cuda.test -test.count=1 >> $R/cudaexec.log 2>&1; echo "cuda rc=$?")
  (cd internal/gpucheck && timeout $(lim 150) $D/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestScheduleOnDevice|TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper|TestFirstUse|TestHostAcrossASwap' \
    -test.timeout 145s > $R/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(at)")
  grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)" $R/gpucheck.log $R/cudaexec.log | sort | uniq -c
fi
tar -C $R -czf $OUT/out.tar.gz .

# A2. The committed build's other checks.
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
