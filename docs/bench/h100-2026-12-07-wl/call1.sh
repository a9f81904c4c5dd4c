#!/bin/bash
# Call 1: W (w.patch: a dense decode scheduled on the device waits late:
# its request, its key rows and its first tile's page-table entries are
# read before griddepcontrol.wait; the 16-row body's queries are the
# consumer's alone, so the loader's first copies go out first) through
# NVRTC. Carries .device/pf2.tar.xz (C: e299359's host, plugins and
# gpucheck.test) and .device/w1.tar.xz (W: gen, plugins, gpucheck-W.test).
# - gen's images of W's sources, packed back (images.tar.gz, gen.txt);
# - gpucheck on W's sources through NVRTC, four at once, the fourth under
#   compute-sanitizer memcheck (checks.log);
# - four interleaved rounds of bench --gpu over the decode rows: C from its
#   images, N (C's sources) and W through NVRTC (ab.txt, ab-json.tar.gz);
# - ncu of W's batch-1 decodes (ncu.tar.gz), with the time left.
# call1.sh [T]: T, the seconds the call may run (450 unless given).
set -u
T=${1:-450}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e /tmp/img && mkdir -p /tmp/e /tmp/img && tar -C /tmp/e -xJf .device/pf2.tar.xz && tar -C /tmp/e -xJf .device/w1.tar.xz || exit 1
E=/tmp/e/pf2 W=/tmp/e/w1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-wl ATTNPLUG_DEVICE_CODE=nvrtc
(unset ATTNPLUG_DEVICE_CODE; timeout 240 $W/gen -set kernels -out /tmp/img > /tmp/gen.log 2>&1; echo "gen rc=$? at $(at)") &
gpid=$!
rm -f /tmp/checks-*.log; pids=""
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
for part in 0 1 2 3; do
  (cd internal/gpucheck && timeout 200 ${pre[$part]} $W/gpucheck-W.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 190s > /tmp/checks-$part.log 2>&1; echo "W checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids $gpid
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
{ grep -vi "warpgroup.arrive is injected" /tmp/gen.log | tail -8
  cuobjdump -res-usage /tmp/img/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_decode_(wg16|wg64|ss64|fp8_wg16)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - - ; } | tee $OUT/gen.txt
{ for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck-W (NVRTC) ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B3 -A20 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,sparse fp8 h128 b16,sparse bf16 h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3 4; do
  for v in C N W; do
    [ $(left $((T - 40))) -gt 15 ] || break 2
    dir=$E/C/plugins nv=nvrtc; [ $v = W ] && dir=$W/W/plugins; [ $v = C ] && nv=""
    ATTNPLUG_DEVICE_CODE=$nv timeout $(left $((T - 35))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py N W C > $OUT/ab.txt; cat $OUT/ab.txt
for row in h16_b1_s4096 h128_b1_s4096; do
  [ $(left $((T - 5))) -gt 30 ] || break
  timeout $(left $((T - 5))) ncu --clock-control none --target-processes all -k regex:mla_decode --launch-skip 20 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section SourceCounters \
    -o /tmp/p-$row $E/attnplug bench --gpu --python "" --only "$row" --plugin-dir $W/W/plugins > /tmp/ncu-$row.log 2>&1
  echo "ncu $row rc=$? at $(at)"; tail -1 /tmp/ncu-$row.log
  ncu -i /tmp/p-$row.ncu-rep --print-details all > /tmp/ncu-$row.txt 2>&1
  ncu -i /tmp/p-$row.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > /tmp/sass-$row.csv.gz
done
tar -C /tmp -czf $OUT/ncu.tar.gz $(cd /tmp && ls ncu-*.txt sass-*.csv.gz 2>/dev/null)
echo "done at $(at)"
