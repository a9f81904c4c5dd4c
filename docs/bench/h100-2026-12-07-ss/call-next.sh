#!/bin/bash
# Prepared for the next session's first call, not run. Carries
# .device/nx4.tar.xz:
# - C: the committed build (ba90c9d): the host, every plugin, the example
#   vendor's plugin, cuda.test, cudaexec.test, and gpucheck.test built with
#   t.patch (dense FP8 batches scheduled on the device, where the decode
#   waits late: the 16-row body, the seesaw, the 64-row wgmma body);
# - F: t.patch and f.patch (the 16-row body over an FP8 cache: the loader
#   looks up its first keys before its wait and loads its first rows while
#   the consumer alone copies the queries and makes them f16): gen, fa3 and
#   dsa plugins, gpucheck-F.test.
# call-next.sh [T]: T, the seconds the call may run (560 unless given).
# 1. gen of F (imagesF.tar.gz) and its registers;
# 2. C's TestSparseAndFP8 from the committed images (t.patch's cases on the
#    committed kernels); F's checks through NVRTC, four at once (the fourth
#    TestSparseAndFP8 under memcheck), then TestSparseAndFP8 under synccheck;
# 3. on an H200, C's whole run: bench --gpu --json --plot (bench.json,
#    bench.svg), the checks from the images, the Python GPU suites, each path
#    through a real serve, the Python bench (out.tar.gz);
# 4. interleaved rounds of bench --gpu, N (C's sources) and F, both through
#    NVRTC, over the FP8 rows and bf16 controls (ab.txt).
set -u
T=${1:-560}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/nx4.tar.xz || exit 1
E=/tmp/e/nx4 C=/tmp/e/nx4/C
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-nx4 ATTNPLUG_FIRST_USE_PLUGINS=$C/bin/plugins
export ATTNPLUG_ACME_BIN=$C/acme/attnplug-backend-acme_mla
unset ATTNPLUG_DEVICE_CODE
rm -rf /tmp/imgF && mkdir -p /tmp/imgF
(timeout 200 $E/F/gen -set kernels -out /tmp/imgF > /tmp/genF.log 2>&1; echo "gen F rc=$? at $(at)"
 cuobjdump -res-usage /tmp/imgF/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_(decode|sparse)_(fp8_)?(wg16|wg64|ss64)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
 tar -C /tmp/imgF -czf $OUT/imagesF.tar.gz .) > $R/gen.txt 2>&1 &
gpid=$!
(cd internal/gpucheck && timeout 100 $C/gpucheck.test -test.v -test.count=1 -test.short -test.run 'TestSparseAndFP8' \
  -test.timeout 95s > $R/C-sparse.log 2>&1; echo "C TestSparseAndFP8 rc=$? at $(at)")
grep -hE "^(--- |FAIL|ok|PASS|panic)|on the device" $R/C-sparse.log | cut -c1-300
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks|TestInProcessBackendOnDevice' 'TestSparseAndFP8' 'TestSparseAndFP8')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3" "compute-sanitizer --tool synccheck --error-exitcode 3")
part() { (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 170 ${pre[$1]} $E/F/gpucheck-F.test -test.v -test.count=1 -test.short \
      -test.run "${runs[$1]}" -test.timeout 165s > /tmp/F-$1.log 2>&1; echo "F checks $1 rc=$? at $(at)"); }
part 0 & p0=$!; part 1 & p1=$!; part 2 & p2=$!; part 3 & p3=$!
wait $p0 $p1 $p2 $p3
part 4
for p in 0 1 2 3 4; do echo "== ${pre[$p]} gpucheck F ${runs[$p]}"
  grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY|on the device" /tmp/F-$p.log | cut -c1-300
  awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/F-$p.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done > $R/checks-F.log
grep -h -B3 -A20 -- "--- FAIL" /tmp/F-*.log | cut -c1-400 | head -60 >> $R/checks-F.log
cat $R/checks-F.log
wait $gpid; cat $R/gen.txt
if grep -q H200 $R/smi.txt; then
  mkdir -p bin && cp -r $C/bin/* bin/
  timeout 300 $C/bin/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $C/bin/plugins > $OUT/bench.json 2> $R/bench.err
  echo "bench rc=$? at $(at)"
  (cd launch/cudaexec && timeout 40 $C/cudaexec.test -test.count=1 > $R/cudaexec.log 2>&1; echo "cudaexec rc=$?")
  (cd cuda && timeout 40 $C/cuda.test -test.count=1 >> $R/cudaexec.log 2>&1; echo "cuda rc=$?")
  (cd internal/gpucheck && timeout 150 $C/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestScheduleOnDevice|TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper|TestFirstUse|TestHostAcrossASwap' \
    -test.timeout 145s > $R/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(at)")
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 100 python3 -m unittest -v \
    test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $R/python.log 2>&1; echo "python rc=$? at $(at)")
  bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false 2> /tmp/serve.err &
  SP=$!; sleep 3
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=. timeout 100 python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock > $R/paths.txt 2>&1; echo "paths rc=$? at $(at)")
  kill $SP; sleep 1
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=.:testing timeout 80 python3 ../docs/bench/h100-2026-12-06-fp8-seesaw/eager_parts.py ../bin/attnplug > $R/eager_parts.txt 2>&1; echo "eager parts rc=$? at $(at)")
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout 120 python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $R/pybench.txt 2>&1; echo "pybench rc=$? at $(at)")
  grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)" $R/gpucheck.log $R/cudaexec.log | sort | uniq -c; tail -3 $R/python.log
fi
ROWS="fp8 decode h16,sparse fp8 h16,sparse fp8 h128 b16,fp8 decode h128,sparse bf16 h16 b16,h16_b16_s4096,h16_b1_s4096"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3 4; do
  for v in N F; do
    [ $(left $((T - 15))) -gt 15 ] || break 2
    dir=$C/bin/plugins; [ $v = F ] && dir=$E/F/plugins
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 10))) $C/bin/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
cp -r /tmp/ab $R/ab
python3 docs/bench/h100-2026-12-06-producer/abtable.py N F > $OUT/ab.txt; cat $OUT/ab.txt
tar -C $R -czf $OUT/out.tar.gz .
echo "done at $(at)"
