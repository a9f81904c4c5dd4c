#!/bin/bash
# Call 2: the partial outputs in bf16, every output row a whole 32-byte
# sector a store (P, the tree: quad_store16), against fp32 partials (A: the
# plugins of 0b42a11), both through NVRTC (the bundle also holds call 1's
# bf16 partials by half-sector stores, H, not run for lack of device time):
# before the A/P rounds, the tree's images (gen),
# gpucheck's schedule, graph, decode and sparse/FP8 checks through NVRTC on
# the tree's sources, and compute-sanitizer memcheck of the graph step;
# then three interleaved rounds of bench --gpu, each
# row checked against float64 by the bench.
# .device/pb2.tar.xz (bundle2.sh). call2.sh [T]: T, the seconds the call
# may run (330 unless given).
set -u
T=${1:-330}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/pb2.tar.xz || exit 1
E=/tmp/e/pb2
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
# The tree's images.
rm -rf /tmp/img && mkdir -p /tmp/img
timeout 120 $E/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(at)"
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
# The checks, four at once, through NVRTC on the tree's sources (the fourth under memcheck).
rm -f /tmp/checks-*.log
runs=('TestScheduleOnDevice|TestDecodeStepGraph' 'TestMLADecodeRandom' 'TestSparseAndFP8|TestSharedMemoryOfTheEntries' 'TestDecodeStepGraph')
bins=("" "" "" "timeout 110 compute-sanitizer --tool memcheck --error-exitcode 3")
pids=""
for part in 0 1 2 3; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 120))) ${bins[$part]} $E/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 300s > /tmp/checks-$part.log 2>&1; echo "checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
cat /tmp/checks-*.log > /tmp/checks.log
{ for part in 0 1 2 3; do echo "== ${bins[$part]} gpucheck ${runs[$part]}"; grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/checks-$part.log
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -hE "packed" /tmp/checks.log | cut -c1-260 | head -40
  grep -B2 -A20 -- "--- FAIL" /tmp/checks.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log | tail -14
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,fp8 decode h128,sparse fp8 h128 b16,sparse bf16 h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A P; do
    [ $(left $((T - 10))) -gt 40 ] || break 2
    dir=$v; extra="ATTNPLUG_DEVICE_CODE=nvrtc"
    env $extra timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$dir/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A P > $OUT/ab.txt
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
