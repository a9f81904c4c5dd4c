#!/bin/bash
# G2: g.patch over a bf16 cache alone (g2.patch): the 16-row body's consumer
# issues a tile's S^T behind the last tile's O^T product, then frees that
# tile's stage once the product is done (wgmma.wait_group 1); over an FP8
# cache the body is as committed (G's early EMPTY cost the dense FP8 rows
# 1.2-1.8%, call1/). Carries .device/gy.tar.xz: N, the committed build
# (a1ca27a's host, fa3 and dsa plugins); G, the same with g2.patch: gen, fa3
# and dsa plugins, gpucheck-G.test. call2.sh [T]: T, the seconds the call may
# run (400).
# 1. gen of G2 (imagesG.tar.gz) and its registers;
# 2. G2's checks through NVRTC, four at once, the fourth the 16-row body and
#    the graph step under memcheck (no test twice at once), then the same
#    under synccheck;
# 3. interleaved rounds of bench --gpu, N and G2 both through NVRTC (ab.txt).
set -u
T=${1:-400}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/gy.tar.xz || exit 1
E=/tmp/e/gy
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-gy ATTNPLUG_DEVICE_CODE=nvrtc
rm -rf /tmp/imgG && mkdir -p /tmp/imgG
(timeout 200 $E/G/gen -set kernels -out /tmp/imgG > /tmp/genG.log 2>&1; echo "gen G rc=$? at $(at)"
 cuobjdump -res-usage /tmp/imgG/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_(decode|sparse)_(fp8_)?(wg16|wg64|ss64)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
 tar -C /tmp/imgG -czf $OUT/imagesG.tar.gz .) > $R/gen.txt 2>&1 &
gpid=$!
runs=('TestScheduleOnDevice|TestMMASyncWideOnHopper' 'TestMLADecodeRandom'
      'TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks|TestInProcessBackendOnDevice|TestSparseAndFP8'
      'TestNarrowWGMMAOnHopper|TestDecodeStepGraph' 'TestNarrowWGMMAOnHopper|TestDecodeStepGraph')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3" "compute-sanitizer --tool synccheck --error-exitcode 3")
part() { (cd internal/gpucheck && timeout 170 ${pre[$1]} $E/G/gpucheck-G.test -test.v -test.count=1 -test.short \
      -test.run "${runs[$1]}" -test.timeout 165s > /tmp/G-$1.log 2>&1; echo "G checks $1 rc=$? at $(at)"); }
part 0 & p0=$!; part 1 & p1=$!; part 2 & p2=$!; part 3 & p3=$!
wait $p0 $p1 $p2 $p3
part 4
for p in 0 1 2 3 4; do echo "== ${pre[$p]} gpucheck G ${runs[$p]}"
  grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/G-$p.log | cut -c1-300
  awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/G-$p.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done > $R/checks-G.log
grep -h -B3 -A20 -- "--- FAIL" /tmp/G-*.log | cut -c1-400 | head -60 >> $R/checks-G.log
cat $R/checks-G.log
wait $gpid; cat $R/gen.txt
ROWS="h16_b,h16_ragged64,sparse bf16 h16,fp8 decode h16 b16,h128_b16_s4096"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3 4; do
  for v in N G; do
    [ $(left $((T - 15))) -gt 20 ] || break 2
    dir=$E/$v/plugins
    timeout $(left $((T - 10))) $E/N/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
cp -r /tmp/ab $R/ab
python3 docs/bench/h100-2026-12-06-producer/abtable.py N G > $OUT/ab.txt; cat $OUT/ab.txt
tar -C $R -czf $OUT/out.tar.gz .
echo "done at $(at)"
