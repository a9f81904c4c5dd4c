#!/bin/bash
# Call 2: N's images as committed (C, e299359), then E1 through NVRTC.
# Carries .device/pf2.tar.xz (bundle2.sh) and .device/nx2.tar.xz (A:
# 7276944's plugins and images).
# 1. gpucheck from C's images, no NVRTC: the decode, sparse/FP8, prefill
#    and mma.sync checks, four at once, the fourth under memcheck
#    (checks-C.log); gen makes E1's images meanwhile (images-E1.tar.gz).
# 2. gpucheck on E1's sources through NVRTC (checks-E1.log).
# 3. Three interleaved rounds of bench --gpu over the decode rows: A and C
#    from their images, N (C's plugins) and E1 through NVRTC (ab.txt).
# call2.sh [T]: T, the seconds the call may run (420 unless given).
set -u
T=${1:-420}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e /tmp/img && mkdir -p /tmp/e /tmp/img && tar -C /tmp/e -xJf .device/pf2.tar.xz && tar -C /tmp/e -xJf .device/nx2.tar.xz || exit 1
E=/tmp/e/pf2 A=/tmp/e/nx2
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-pf2
unset ATTNPLUG_DEVICE_CODE
checks() { # checks NAME BINARY DEADLINE: four groups at once, the fourth under memcheck
  local name=$1 bin=$2 dl=$3 pids="" part
  rm -f /tmp/checks-*.log
  for part in 0 1 2 3; do
    (cd internal/gpucheck && timeout $(left $dl) ${pre[$part]} $bin -test.v -test.count=1 -test.short \
      -test.run "${runs[$part]}" -test.timeout 200s > /tmp/checks-$part.log 2>&1; echo "$name checks $part rc=$? at $(at)") &
    pids="$pids $!"
  done
  wait $pids
  { for part in 0 1 2 3; do echo "== ${pre[$part]} $name ${runs[$part]}"
      grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY|nvrtc|NVRTC" /tmp/checks-$part.log | cut -c1-260
      awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
    grep -h -B3 -A12 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -40; } > $OUT/checks-$name.log
  cat $OUT/checks-$name.log
}
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
(timeout 200 $E/gen -set kernels -out /tmp/img > /tmp/gen.log 2>&1; echo "gen rc=$? at $(at)") &
gpid=$!
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
checks C $E/gpucheck.test $((T - 200))
wait $gpid
tar -C /tmp/img -czf $OUT/images-E1.tar.gz . && ls -la $OUT/images-E1.tar.gz
grep -vi "warpgroup.arrive is injected" /tmp/gen.log | tail -4 > $OUT/gen.txt
runs=('TestScheduleOnDevice|TestDecodeStepGraph' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper' 'TestSparseAndFP8|TestMMASyncWideOnHopper' 'TestDecodeStepGraph')
ATTNPLUG_DEVICE_CODE=nvrtc checks E1 $E/gpucheck-E1.test $((T - 150))
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,sparse fp8 h128 b16,sparse bf16 h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A C N E1; do
    [ $(left $((T - 10))) -gt 15 ] || break 2
    dir=$E/$v/plugins nv=""; [ $v = A ] && dir=$A/plugins; [ $v = N ] && dir=$E/C/plugins
    { [ $v = N ] || [ $v = E1 ]; } && nv=nvrtc
    ATTNPLUG_DEVICE_CODE=$nv timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A C N E1 > $OUT/ab.txt; cat $OUT/ab.txt
echo "done at $(at)"
