#!/bin/bash
# The packed cut (B: ragged batches packed into slots, a block running its
# slot's items one after the other) against the committed
# plugins (A), both compiled by NVRTC from their embedded sources, on one
# machine: B's images (gen, in the background from the start); B's checks
# (float64, outputs poisoned), three at once: the device's schedule against
# the host's and a decode step in a graph, the decode forms with packed
# cases, sparse and FP8 with packed cases; up to three interleaved rounds of
# the ragged rows and of controls (each row checked against float64 by the
# bench itself); compute-sanitizer memcheck and synccheck of the FP8 checks
# where time is left.
# call.sh [T]: T, the seconds the call may run (580 unless given).
set -u
T=${1:-580}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/pk.tar.xz || exit 1
E=/tmp/e/pk
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
mkdir -p /tmp/img && (timeout $((T - 30)) $E/B/gen -set kernels -j 8 -out /tmp/img > /tmp/gen.log 2>&1; echo "gen rc=$? at $(at)" > /tmp/gen.rc) &
# A's NVRTC cache, warmed beside B's checks (which warm B's).
(ATTNPLUG_DEVICE_CODE=nvrtc timeout 200 $E/attnplug bench --gpu --json --python "" --only "h16_b1_s4096,h128_b1_s4096" \
  --plugin-dir $E/A/plugins > /tmp/warm-A.json 2> /tmp/warm-A.err; echo "warm A rc=$? at $(at)") &
pids="$!"
runs=('TestScheduleOnDevice|TestDecodeStepGraph' 'TestMLADecodeRandom' 'TestSparseAndFP8|TestSharedMemoryOfTheEntries')
for part in 0 1 2; do
  run=${runs[$part]}
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $((T * 45 / 100)) $E/B/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "$run" -test.timeout $((T * 45 / 100))s > /tmp/checks-$part.log 2>&1; echo "B checks $part (NVRTC) rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
tail -2 /tmp/warm-A.err | cut -c1-300
cat /tmp/checks-0.log /tmp/checks-1.log /tmp/checks-2.log > /tmp/checks.log
{ grep -hE "^(--- |FAIL|ok|PASS|panic)|packed|of 60 batches" /tmp/checks.log | cut -c1-260 | head -40
  grep -B2 -A20 -- "--- FAIL" /tmp/checks.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log
[ $(grep -c "^PASS" /tmp/checks.log) = 3 ] || { echo "B failed its checks (timed all the same: each row checks itself)"; tail -30 /tmp/checks.log; }
mkdir -p /tmp/ab
ROWS="h16_ragged64,h128_ragged64,h16_b1_s4096,h128_b16_s4096,h16_b64_s4096,h128_b64_s4096"
for round in 1 2 3; do
  [ $(left $((T - 90))) -gt 60 ] || break
  for v in A B; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 45))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A B > $OUT/ab.txt; cat $OUT/ab.txt
for tool in memcheck synccheck; do
  [ $(left $((T - 40))) -gt 60 ] || break
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 20))) compute-sanitizer --tool $tool $E/B/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSparseAndFP8' -test.timeout 170s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(at)")
  { echo "=== compute-sanitizer --tool $tool"; grep -hE "^(--- |FAIL|ok|PASS)|ERROR SUMMARY|packed" /tmp/san-$tool.log | head -12; tail -4 /tmp/san-$tool.log; } >> $OUT/checks.log
done
while [ ! -s /tmp/gen.rc ] && [ $(left $T) -gt 2 ]; do sleep 2; done
cat /tmp/gen.rc; tail -3 /tmp/gen.log
cp /tmp/gen.log /tmp/img/GEN.log; tar -C /tmp/img -czf $OUT/images-B.tar.gz .
ls -la $OUT
echo "done at $(at)"
