#!/bin/bash
# Prepared for the next call, not run (2026-12-07: no device machine could be
# started). Two parts in one call, carrying .device/fl.tar.xz (bundle.sh,
# built CGO_ENABLED=0 at 22dd0d0: fl/fr the committed build, every plugin,
# the example vendor's plugin, gpucheck.test, cuda.test, cudaexec.test;
# fl/F gen with fold.diff; fl/L gen, the fa3 and dsa plugins and
# gpucheck-L.test with fold.diff and l.patch).
# A. The committed build (G2's images) whole, from its images (no NVRTC):
#    bench --gpu --json --plot, cudaexec, cuda, gpucheck, the 16-row body,
#    the graph step and sparse/FP8 under memcheck, the Python GPU suites,
#    each path through a real attnplug serve, an eager layer by parts, the
#    Python bench. The images of F and L are made beside its checks.
# B. F, the fold (the 16-row body's two consumers copy their queries
#    through one lambda: no machine code should change), and L (the 16-row
#    body's bf16 loader sends its first tile alone, the second once the
#    first has landed): L's checks through NVRTC (the 16-row body and the
#    graph step under memcheck), then interleaved rounds of bench --gpu, N
#    (the committed plugins) and L, both through NVRTC.
# call.sh [T]: T, the seconds the call may run (570). Under 150 s left of T
# after gpucheck, A stops there (F's and L's images made); under 240 s left
# after A, B is skipped.
# Outputs: bench.json, bench.svg, out.tar.gz (A); imagesF.tar.gz,
# imagesL.tar.gz; ab.txt, outL.tar.gz (B).
set -u
T=${1:-570}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/fl.tar.xz || exit 1
E=/tmp/e/fl D=/tmp/e/fl/fr B=/tmp/e/fl/fr/bin; cp $E/rev $R/rev
echo "unpacked at $(at)"

# A. The committed build, from its images.
export ATTNPLUG_REQUIRE_GPU=1
unset ATTNPLUG_DEVICE_CODE
mkdir -p bin && cp -r $B/* bin/
timeout 300 $B/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $B/plugins > $OUT/bench.json 2> $R/bench.err
echo "bench rc=$? at $(at)"
# The images of F and L (gen, NVRTC on the CPU), beside the untimed checks.
for v in F L; do
  rm -rf /tmp/img$v && mkdir -p /tmp/img$v
  (ATTNPLUG_CACHE_DIR=/tmp/cache-gen$v timeout 200 $E/$v/gen -set kernels -out /tmp/img$v > /tmp/gen$v.log 2>&1; echo "gen $v rc=$? at $(at)"
   cuobjdump -res-usage /tmp/img$v/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_(decode|sparse)_(fp8_)?(wg16|wg64|ss64)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
   tar -C /tmp/img$v -czf $OUT/images$v.tar.gz .) > /tmp/gen$v.txt 2>&1 &
  eval "gen$v=\$!"
done
export ATTNPLUG_FIRST_USE_PLUGINS=$B/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
(cd launch/cudaexec && timeout 40 $D/cudaexec.test -test.count=1 > $R/cudaexec.log 2>&1; echo "cudaexec rc=$?")
(cd cuda && timeout 40 $D/cuda.test -test.count=1 >> $R/cudaexec.log 2>&1; echo "cuda rc=$?")
(cd internal/gpucheck && timeout 150 $D/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestScheduleOnDevice|TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper|TestFirstUse|TestHostAcrossASwap' \
  -test.timeout 145s > $R/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(at)")
if [ $(left $T) -lt 150 ]; then
  wait $genF $genL; cat /tmp/genF.txt /tmp/genL.txt | tee $R/gen.txt
  grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)" $R/gpucheck.log $R/cudaexec.log | sort | uniq -c
  tar -C $R -czf $OUT/out.tar.gz .; echo "the rest skipped, done at $(at)"; exit 0
fi
(cd internal/gpucheck && timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $D/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestNarrowWGMMAOnHopper|TestDecodeStepGraph|TestSparseAndFP8' -test.timeout 145s > $R/memcheck.log 2>&1; echo "memcheck rc=$? at $(at)") &
MP=$!
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 200 python3 -m unittest -v \
  test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $R/python.log 2>&1; echo "python rc=$? at $(at)")
wait $MP $genF $genL
bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false 2> /tmp/serve.err &
SP=$!; sleep 3
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=. timeout 100 python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock > $R/paths.txt 2>&1; echo "paths rc=$? at $(at)")
kill $SP
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=.:testing timeout 80 python3 ../docs/bench/h100-2026-12-06-fp8-seesaw/eager_parts.py ../bin/attnplug > $R/eager_parts.txt 2>&1; echo "eager parts rc=$? at $(at)")
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout 240 python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $R/pybench.txt 2>&1; echo "pybench rc=$? at $(at)")
grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)|ERROR SUMMARY" $R/gpucheck.log $R/cudaexec.log $R/memcheck.log | sort | uniq -c
tail -4 $R/python.log
tar -C $R -czf $OUT/out.tar.gz .
echo "A done at $(at)"

# B. The fold and L (their images made above): L's checks and A/B only
# where at least 240 s are left of T.
R=/tmp/resL; rm -rf $R && mkdir -p $R
cat /tmp/genF.txt /tmp/genL.txt | tee $R/gen.txt
if [ $(left $T) -lt 240 ]; then tar -C $R -czf $OUT/outL.tar.gz .; echo "B skipped, done at $(at)"; exit 0; fi
export ATTNPLUG_CACHE_DIR=/tmp/cache-fl ATTNPLUG_DEVICE_CODE=nvrtc
runs=('TestScheduleOnDevice|TestMMASyncWideOnHopper' 'TestMLADecodeRandom'
      'TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks|TestInProcessBackendOnDevice|TestSparseAndFP8'
      'TestNarrowWGMMAOnHopper|TestDecodeStepGraph')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
part() { (cd internal/gpucheck && timeout 170 ${pre[$1]} $E/L/gpucheck-L.test -test.v -test.count=1 -test.short \
      -test.run "${runs[$1]}" -test.timeout 165s > /tmp/L-$1.log 2>&1; echo "L checks $1 rc=$? at $(at)"); }
part 0 & p0=$!; part 1 & p1=$!; part 2 & p2=$!; part 3 & p3=$!
wait $p0 $p1 $p2 $p3
for p in 0 1 2 3; do echo "== ${pre[$p]} gpucheck L ${runs[$p]}"
  grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/L-$p.log | cut -c1-300
  awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/L-$p.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done > $R/checks-L.log
grep -h -B3 -A20 -- "--- FAIL" /tmp/L-*.log | cut -c1-400 | head -60 >> $R/checks-L.log
cat $R/checks-L.log
mkdir -p /tmp/e/N/plugins && cp $B/plugins/attnplug-backend-fa3 $B/plugins/attnplug-backend-dsa /tmp/e/N/plugins/
ROWS="h16_b,h16_ragged64,sparse bf16 h16,h128_b16_s4096"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3 4; do
  for v in N L; do
    [ $(left $((T - 15))) -gt 25 ] || break 2
    dir=/tmp/e/$v/plugins; [ $v = L ] && dir=$E/L/plugins
    timeout $(left $((T - 10))) $B/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
cp -r /tmp/ab $R/ab
python3 docs/bench/h100-2026-12-06-producer/abtable.py N L > $OUT/ab.txt; cat $OUT/ab.txt
tar -C $R -czf $OUT/outL.tar.gz .
echo "done at $(at)"
