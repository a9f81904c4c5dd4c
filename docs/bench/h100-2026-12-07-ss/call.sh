#!/bin/bash
# S: the seesaw (mla_decode_ss) reads its first two tiles' key rows before
# its wait, as the other bodies do where the block waits late (ss.patch).
# Carries .device/sx.tar.xz: N, the committed build (280b339's host, fa3 and
# dsa plugins); S, the same with ss.patch: gen, fa3 and dsa plugins,
# gpucheck-S.test. call.sh [T]: T, the seconds the call may run (400).
# 1. gen of S (imagesS.tar.gz) and its registers;
# 2. S's checks through NVRTC, four at once, the fourth under memcheck, then
#    the graph step under synccheck;
# 3. interleaved rounds of bench --gpu, N and S both through NVRTC (ab.txt).
set -u
T=${1:-400}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/sx.tar.xz || exit 1
E=/tmp/e/sx
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-sx ATTNPLUG_DEVICE_CODE=nvrtc
rm -rf /tmp/imgS && mkdir -p /tmp/imgS
(timeout 200 $E/S/gen -set kernels -out /tmp/imgS > /tmp/genS.log 2>&1; echo "gen S rc=$? at $(at)"
 cuobjdump -res-usage /tmp/imgS/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_(decode|sparse)_(fp8_)?(wg16|wg64|ss64)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
 tar -C /tmp/imgS -czf $OUT/imagesS.tar.gz .) > $R/gen.txt 2>&1 &
gpid=$!
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper'
      'TestDecodeStepGraph')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3" "compute-sanitizer --tool synccheck --error-exitcode 3")
part() { (cd internal/gpucheck && timeout 150 ${pre[$1]} $E/S/gpucheck-S.test -test.v -test.count=1 -test.short \
      -test.run "${runs[$1]}" -test.timeout 140s > /tmp/S-$1.log 2>&1; echo "S checks $1 rc=$? at $(at)"); }
part 0 & p0=$!; part 1 & p1=$!; part 2 & p2=$!; part 3 & p3=$!
wait $p0 $p1 $p2 $p3
part 4
for p in 0 1 2 3 4; do echo "== ${pre[$p]} gpucheck S ${runs[$p]}"
  grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/S-$p.log | cut -c1-260
  awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/S-$p.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done > $R/checks-S.log
grep -h -B3 -A20 -- "--- FAIL" /tmp/S-*.log | cut -c1-400 | head -60 >> $R/checks-S.log
cat $R/checks-S.log
wait $gpid; cat $R/gen.txt
ROWS="h128_b16,h128_b64,h128_b1_s4096,h128_ragged64,fp8 decode h128,sparse fp8 h128 b16,h16_b16_s4096,h16_b1_s4096"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3 4; do
  for v in N S; do
    [ $(left $((T - 15))) -gt 15 ] || break 2
    timeout $(left $((T - 10))) $E/N/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
cp -r /tmp/ab $R/ab
python3 docs/bench/h100-2026-12-06-producer/abtable.py N S > $OUT/ab.txt; cat $OUT/ab.txt
tar -C $R -czf $OUT/out.tar.gz .
echo "done at $(at)"
