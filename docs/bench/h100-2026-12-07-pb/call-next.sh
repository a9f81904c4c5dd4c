#!/bin/bash
# Prepared for the next session's first call, not run: the committed images
# of the bf16 partials (a62c26e) on the device, no NVRTC: every decode
# check gpucheck has, the mma.sync bodies on Hopper included
# (TestMMASyncWideOnHopper: the 64-row body other GPUs run;
# TestNarrowWGMMAOnHopper), compute-sanitizer memcheck of the graph step
# and the wide body; then, on an H200, the whole bench --gpu --json --plot
# (issue 39's figures), elsewhere a sweep of the full cost of an item now
# that the partials are half the bytes (S: fullcost-sweep.patch; the
# committed costs are 8 tiles for the 64-row bodies and 4 for the 16-row
# one), two interleaved rounds. .device/nx.tar.xz (bundle-next.sh).
# call-next.sh [T] (420 unless given).
set -u
T=${1:-420}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/nx && mkdir -p /tmp/nx && tar -C /tmp/nx -xJf .device/nx.tar.xz || exit 1
E=/tmp/nx/nx
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-nx
unset ATTNPLUG_DEVICE_CODE
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
rm -f /tmp/checks-*.log; pids=""
for part in 0 1 2 3; do
  (cd internal/gpucheck && timeout 200 ${pre[$part]} $E/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 190s > /tmp/checks-$part.log 2>&1; echo "checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
{ for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY|images|nvrtc|NVRTC" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B2 -A20 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ $(left $((T - 10))) -gt 150 ]; then
  timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $E/plugins > $OUT/bench.json 2> $OUT/bench.err
  echo "bench rc=$? at $(at)"
else
  ROWS="_ragged64,h128_b16_s4096,h16_b16_s4096,h128_b64_s4096,h16_b64_s4096,sparse fp8 h128 b16"
  rm -rf /tmp/ab && mkdir -p /tmp/ab
  for round in 1 2; do
    for c in "A 8 4" "C2 2 1" "C4 4 2" "C12 12 6" "C16 16 8"; do
      set -- $c
      [ $(left $((T - 10))) -gt 30 ] || break 2
      dir=S/plugins; [ $1 = A ] && dir=plugins
      ATTNPLUG_EXP_FULL_COST_64=$2 ATTNPLUG_EXP_FULL_COST_16=$3 timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --python "" \
        --only "$ROWS" --plugin-dir $E/$dir > /tmp/ab/ab-$1-$round.json 2> /tmp/err-$1; echo "$1 $round rc=$? at $(at)"
    done
  done
  tar -C /tmp/ab -czf $OUT/sweep-json.tar.gz .
  python3 docs/bench/h100-2026-12-06-producer/abtable.py A C2 C4 C12 C16 > $OUT/sweep.txt; cat $OUT/sweep.txt
fi
echo "done at $(at)"
