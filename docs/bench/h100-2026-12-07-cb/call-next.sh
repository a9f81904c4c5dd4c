#!/bin/bash
# Prepared for the next session's first call, not run. .device/nx2.tar.xz
# (bundle-next.sh). call-next.sh [T [exp]] (T 560 unless given).
# - On an H200: the whole bench --gpu --json --plot (issue 39's figures,
#   against floors and torch of the same run), and nothing else; a second
#   call with exp runs the rest there.
# - Elsewhere, or with exp:
#   0. P (prefetch.patch): each dense decode block reads its slot's first
#      item before its wait and asks L2 for that item's first 128 keys, so
#      that at a short step the keys stream in while the last layer's
#      combine ends; the schedule no longer lets the decode start before it
#      ends, which makes the early reads safe. gpucheck's checks through
#      NVRTC on P's sources (memcheck of the graph step), then three
#      interleaved rounds of bench --gpu, A (committed, NVRTC), P and R2
#      (rows-out.patch: the bodies' one helper for where their rows go, as
#      this report's R but computed where main computes it; R ran 0.98x
#      the 128-head batch 1 and 1.006x the 16-head batch of 16).
#   1. A sweep of the 16-row body's item cost in the cut (S:
#      itemcost-sweep.patch). At 0 a 16-head batch 1 of 4096 keys is cut
#      into 128 items of 32 keys, a block each, not 64 of 64 (half the
#      GPU idle), now that the combine merges 128 chunks in one trip. A
#      (committed, 1), I0 and I2; three interleaved rounds over the short
#      16-head rows and some others the cost also moves.
#   2. The layer by parts (decode alone, no programmatic launches) and
#      each block's timeline (NVRTC, timeline.patch) of the batch-1 and
#      batch-16 rows at 16 and 128 heads, with the bf16 partials and this
#      report's combine: where the short layers' time goes now.
set -u
T=${1:-560} MODE=${2:-auto}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/nx2 && mkdir -p /tmp/nx2 && tar -C /tmp/nx2 -xJf .device/nx2.tar.xz || exit 1
E=/tmp/nx2/nx2
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-nx2
unset ATTNPLUG_DEVICE_CODE
if [ "$MODE" != exp ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $E/plugins > $OUT/bench.json 2> $OUT/bench.err
  echo "bench rc=$? at $(at)"; exit 0
fi
# 0. P: checks, four at once, through NVRTC on its sources (the fourth under memcheck).
rm -f /tmp/checks-*.log; pids=""
runs=('TestScheduleOnDevice|TestDecodeStepGraph' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper' 'TestSparseAndFP8|TestMMASyncWideOnHopper' 'TestDecodeStepGraph')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
for part in 0 1 2 3; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 300))) ${pre[$part]} $E/gpucheck-P.test -test.v -test.count=1 \
    -test.short -test.run "${runs[$part]}" -test.timeout 230s > /tmp/checks-$part.log 2>&1; echo "P checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
{ for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck-P ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B2 -A20 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -60; } > $OUT/checks-P.log
cat $OUT/checks-P.log
PROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,fp8 decode h128,sparse fp8 h128 b16,sparse bf16 h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A P R2; do
    [ $(left $((T - 230))) -gt 15 ] || break 2
    dir=$v/plugins; [ $v = A ] && dir=plugins
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 220))) $E/attnplug bench --gpu --json --python "" --only "$PROWS" \
      --plugin-dir $E/$dir > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
tar -C /tmp/ab -czf $OUT/prefetch-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A P R2 > $OUT/prefetch.txt; cat $OUT/prefetch.txt
# 1. The item cost.
ROWS="h16_b1_s,h16_b16_s4096,h16_b64_s4096,h16_ragged64,h16_extend,sparse bf16 h16 b16,fp8 decode h16 b16,h128_b1_s4096"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for c in "A 1" "I0 0" "I2 2"; do
    set -- $c
    [ $(left $((T - 120))) -gt 15 ] || break 2
    dir=S/plugins; [ $1 = A ] && dir=plugins
    ATTNPLUG_EXP_ITEM_COST_16=$2 timeout $(left $((T - 100))) $E/attnplug bench --gpu --json --python "" \
      --only "$ROWS" --plugin-dir $E/$dir > /tmp/ab/ab-$1-$round.json 2> /tmp/err-$1; echo "$1 $round rc=$? at $(at)"
  done
done
tar -C /tmp/ab -czf $OUT/sweep-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A I0 I2 > $OUT/sweep.txt; cat $OUT/sweep.txt
# 2. The layer by parts (the committed images), then each block's timeline.
SH=h16_b1_s4096,h128_b1_s4096,h16_b16_s4096,h128_b16_s4096
(cd internal/gpucheck && EXP=1 EXP_SHAPES=$SH timeout $(left $((T - 60))) $E/gpucheck-exp.test -test.v -test.count=1 \
  -test.run TestExpParts -test.timeout 200s > /tmp/exp.log 2>&1; echo "parts rc=$? at $(at)")
grep -E "EXP|FAIL|panic|^ok|^PASS" /tmp/exp.log | sed 's/^ *//' | cut -c1-220 > $OUT/exp.log; cat $OUT/exp.log
(cd internal/gpucheck && EXP=1 EXP_TL=1 EXP_SHAPES=$SH ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 5))) $E/gpucheck-tl.test \
  -test.v -test.count=1 -test.run TestExpParts -test.timeout 300s > /tmp/tl.log 2>&1; echo "timeline rc=$? at $(at)")
grep -E "EXP|TL |FAIL|panic|^ok|^PASS|rror" /tmp/tl.log | sed 's/^ *//' | cut -c1-260 > $OUT/tl.log; cat $OUT/tl.log
echo "done at $(at)"
