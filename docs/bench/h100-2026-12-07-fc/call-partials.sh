#!/bin/bash
# Prepared, not run: the split items' partial outputs in bf16 (P) against
# fp32 (A), both through NVRTC, interleaved, on the rows whose layers the
# partials weigh on (batch 1, batch 16, the ragged batches); each row
# checked against float64 by the bench, whose JSON gives its error.
# .device/pb.tar.xz (bundle-partials.sh). call-partials.sh [T] (240).
set -u
T=${1:-240}
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi-partials.txt
mkdir -p /tmp/pb && tar -C /tmp/pb -xJf .device/pb.tar.xz || exit 1
E=/tmp/pb/pb
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-pb ATTNPLUG_DEVICE_CODE=nvrtc
ROWS="h16_b1_s,h128_b1_s,h16_b16_s,h128_b16_s,_ragged64,fp8 decode h16 b16,sparse fp8 h128 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A P; do
    [ $(left $((T - 10))) -gt 30 ] || break 2
    timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(( $(date +%s) - S0 ))s"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/partials-ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A P > $OUT/partials-ab.txt; cat $OUT/partials-ab.txt
