#!/bin/bash
# Call 6: the images of call 5 as the tree embeds them (C), no NVRTC:
# every gpucheck decode, sparse/FP8 and prefill check (the mma.sync bodies
# on Hopper included), compute-sanitizer memcheck of the graph step and
# the wide body; then three interleaved rounds of bench --gpu over the
# decode rows against main's images (A), each row checked against float64
# by the bench. .device/cb6.tar.xz (bundle6.sh). call6.sh [T]: T, the
# seconds the call may run (300 unless given).
set -u
T=${1:-300}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/cb6.tar.xz || exit 1
E=/tmp/e/cb6
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-cb6
unset ATTNPLUG_DEVICE_CODE
rm -f /tmp/checks-*.log
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
pids=""
for part in 0 1 2 3; do
  (cd internal/gpucheck && timeout 200 ${pre[$part]} $E/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 190s > /tmp/checks-$part.log 2>&1; echo "checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
{ for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY|nvrtc|NVRTC" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B2 -A20 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,fp8 decode h128,sparse fp8 h128 b16,sparse bf16 h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A C; do
    [ $(left $((T - 10))) -gt 20 ] || break 2
    timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A C > $OUT/ab.txt; cat $OUT/ab.txt
echo "done at $(at)"
