#!/bin/bash
# Prepared for the next session's first call, not run: this session's
# device time ran out before call2.sh could start. Carries
# .device/pf2.tar.xz (bundle2.sh: C, the committed e299359 with its images,
# and E1) and .device/nx2.tar.xz (A: 7276944's plugins and images).
# call-next.sh [T]: T, the seconds the call may run (560 unless given).
# 1. gpucheck from C's images, no NVRTC (checks-C.log): they have not run on
#    a device; N's sources passed the same checks through NVRTC (call 1).
# 2. On an H200: the whole bench --gpu --json --plot of C, issue 39's run
#    (bench.json, bench.svg).
# 3. Interleaved rounds of bench --gpu over the decode rows: A and C from
#    their images, N (C's plugins) and E1 through NVRTC (ab.txt).
# 4. Elsewhere, with the time left: ncu of the batch-1 decodes of C (16 and
#    128 heads; warp states and per-instruction samples): what the 3.5-3.7
#    us from a block's wait to its first tile are spent on.
set -u
T=${1:-560}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/pf2.tar.xz && tar -C /tmp/e -xJf .device/nx2.tar.xz || exit 1
E=/tmp/e/pf2 A=/tmp/e/nx2
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-pf2
unset ATTNPLUG_DEVICE_CODE
rm -f /tmp/checks-*.log; pids=""
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
for part in 0 1 2 3; do
  (cd internal/gpucheck && timeout 150 ${pre[$part]} $E/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 140s > /tmp/checks-$part.log 2>&1; echo "C checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
{ for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck (C's images) ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY|nvrtc|NVRTC" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B3 -A12 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -40; } > $OUT/checks-C.log
cat $OUT/checks-C.log
h200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && h200=1
if [ $h200 = 1 ]; then
  timeout $(left $((T - 150))) $E/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $E/C/plugins > $OUT/bench.json 2> /tmp/bench.err
  echo "bench rc=$? at $(at)"; tail -3 /tmp/bench.err
fi
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,sparse fp8 h128 b16,sparse bf16 h16 b16"
stop=$((T - 130)); [ $h200 = 1 ] && stop=$((T - 10))
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A C N E1; do
    [ $(left $stop) -gt 15 ] || break 2
    dir=$E/$v/plugins nv=""; [ $v = A ] && dir=$A/plugins; [ $v = N ] && dir=$E/C/plugins
    { [ $v = N ] || [ $v = E1 ]; } && nv=nvrtc
    ATTNPLUG_DEVICE_CODE=$nv timeout $(left $((stop + 5))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A C N E1 > $OUT/ab.txt; cat $OUT/ab.txt
[ $h200 = 1 ] && { echo "done at $(at)"; exit 0; }
for row in h16_b1_s4096 h128_b1_s4096; do
  [ $(left $((T - 10))) -gt 40 ] || break
  timeout $(left $((T - 10))) ncu --clock-control none --target-processes all -k regex:mla_decode --launch-skip 20 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section SourceCounters --import-source yes \
    -o /tmp/p-$row $E/attnplug bench --gpu --python "" --only "$row" --plugin-dir $E/C/plugins > /tmp/ncu-$row.log 2>&1
  echo "ncu $row rc=$? at $(at)"; tail -2 /tmp/ncu-$row.log
  ncu -i /tmp/p-$row.ncu-rep --print-details all > /tmp/ncu-$row.txt 2>&1
  ncu -i /tmp/p-$row.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > /tmp/sass-$row.csv.gz
done
tar -C /tmp -czf $OUT/ncu.tar.gz $(cd /tmp && ls ncu-*.txt sass-*.csv.gz 2>/dev/null)
echo "done at $(at)"
