#!/bin/bash
# An item's cost in the decode's cut per body where the batch fills the
# slots (decodeVariant.fullCost, costOf; mla_schedule's full_cost):
# A/B of the committed plugins (A: fcb4377, through NVRTC) against the
# tree's (N, through NVRTC: its mla_decode.cu is new) on the ragged, batch
# 1 and some equal, extend, FP8 dense and sparse rows of bench --gpu,
# interleaved, each checked against float64 by the bench; before it, the
# tree's images (gen) and gpucheck's schedule, graph, decode and sparse/FP8
# checks through NVRTC on the tree's sources. .device/n6.tar.xz (bundle.sh).
# call.sh [T]: T, the seconds the call may run (300 unless given).
set -u
T=${1:-300}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/n6.tar.xz || exit 1
E=/tmp/e/n6
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
# The tree's images.
rm -rf /tmp/img && mkdir -p /tmp/img
timeout 120 $E/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(at)"
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
# The checks, three at once, through NVRTC on the tree's sources.
runs=('TestScheduleOnDevice|TestDecodeStepGraph' 'TestMLADecodeRandom' 'TestSparseAndFP8|TestSharedMemoryOfTheEntries')
pids=""
for part in 0 1 2; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 120))) $E/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 300s > /tmp/checks-$part.log 2>&1; echo "checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
cat /tmp/checks-*.log > /tmp/checks.log
{ grep -hE "^(--- |FAIL|ok|PASS|panic)|packed|of 60 batches" /tmp/checks.log | cut -c1-260 | head -40
  grep -B2 -A20 -- "--- FAIL" /tmp/checks.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log | tail -14
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,fp8 decode h128,sparse fp8 h128 b16,sparse bf16 h16 b16"
mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A N; do
    [ $(left $((T - 10))) -gt 40 ] || break 2
    dir=$v; extra="ATTNPLUG_DEVICE_CODE=nvrtc"
    env $extra timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$dir/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A N > $OUT/ab.txt; cat $OUT/ab.txt
echo "done at $(at)"
