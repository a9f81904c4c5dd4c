#!/bin/bash
# Call 2: the combine's loads, B2 (the tree) against main (A), call 1's B,
# and B3 (B2 with whole rows' loads held as floats), all through NVRTC.
# First the tree's images (gen), every gpucheck decode, sparse/FP8 and prefill check
# through NVRTC on the tree's sources (the mma.sync bodies on Hopper
# included), compute-sanitizer memcheck of the graph step and the wide
# body, and the combine kernels' registers from the tree's sm_90 image;
# then three interleaved rounds of bench --gpu over the decode rows, each
# row checked against float64 by the bench.
# .device/cb2.tar.xz (bundle2.sh). call2.sh [T]: T, the seconds the call may
# run (420 unless given).
set -u
T=${1:-420}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/cb2.tar.xz || exit 1
E=/tmp/e/cb2
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
rm -rf /tmp/img /tmp/img-R && mkdir -p /tmp/img /tmp/img-R
timeout 150 $E/gen -set kernels -out /tmp/img > /tmp/gen.log 2>&1; echo "gen rc=$? at $(at)"
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
{ grep -vi "warpgroup.arrive is injected" /tmp/gen.log | tail -20
  cuobjdump -res-usage /tmp/img/mla_decode.sm_90.cubin 2>&1 | grep -A1 -E "Function mla_combine" ; } > $OUT/gen.txt
cat $OUT/gen.txt
rm -f /tmp/checks-*.log
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
pids=""
for part in 0 1 2 3; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 240 ${pre[$part]} $E/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 230s > /tmp/checks-$part.log 2>&1; echo "checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
{ for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B2 -A20 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,fp8 decode h128,sparse fp8 h128 b16,sparse bf16 h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A B B2 B3; do
    [ $(left $((T - 10))) -gt 25 ] || break 2
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A B B2 B3 > $OUT/ab.txt
python3 - >> $OUT/ab.txt <<'PY'
import glob, json, os, re
worst = {}
for f in glob.glob("/tmp/ab/ab-*.json"):
    v = os.path.basename(f).split("-")[1]
    for rows in json.load(open(f)).values():
        for r in rows if isinstance(rows, list) else []:
            m = re.search(r"rel_err ([0-9.e+-]+)", str(r.get("check", "")))
            if m:
                worst[v] = max(worst.get(v, 0.0), float(m.group(1)))
print("largest rel_err against float64:", worst)
PY
cat $OUT/ab.txt
echo "done at $(at)"
