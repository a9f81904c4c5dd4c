#!/bin/bash
# An item's fixed cost in the decode's cut (devkernels' itemCost, in key
# tiles; mla_schedule takes it as its item_cost), swept per body: the
# committed build (fcb4377) with itemcost.patch (ATTNPLUG_EXP_ITEM_COST_<rows> sets
# it for the bodies of that many rows), .device/ic.tar.xz. Variants
# interleaved, each row checked against float64 by the bench.
# call.sh [T]: T, the seconds the call may run (400 unless given).
set -u
T=${1:-400}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
mkdir -p /tmp/ic && tar -C /tmp/ic -xJf .device/ic.tar.xz; E=/tmp/ic/ic
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-ic
ROWS="h16_b1_s,h16_b16_s,h16_b64_s4096,h16_ragged64,h128_b1_s,h128_b16_s,h128_b64_s4096,h128_ragged64"
# variant: cost of the 16-row body, cost of the 64-row bodies
declare -A V=([A]="1 1" [B]="2 4" [C]="3 8" [D]="4 12" [E]="2 16" [F]="1 24")
mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A B C D E F; do
    [ $(left $T) -gt 25 ] || break 2
    set -- ${V[$v]}
    ATTNPLUG_EXP_ITEM_COST_16=$1 ATTNPLUG_EXP_ITEM_COST_64=$2 timeout 60 $E/attnplug bench --gpu --json --python "" --only "$ROWS" \
      --plugin-dir $E/plugins > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A B C D E F > $OUT/ab.txt; cat $OUT/ab.txt
echo "done at $(at)"
