#!/bin/bash
# The first call (an H200 was asked for, an H100 came: .device/h2.tar.xz,
# bundle.sh; run as call.sh 540, 80 s): the committed images'
# checks (float64, outputs poisoned); three interleaved rounds of B (HEAD,
# the packed cut), A (cc3818b, one item a block) and C (c126a39, the
# 2026-12-04 build) on the ragged rows, the 16-head dense rows and two
# 128-head controls; a decode layer by parts over lengths (exp_parts_test.go:
# the whole plan, no programmatic launches, the combine alone, the decode
# alone); each block's timeline from an instrumented build (timeline.patch,
# NVRTC). Steps 3 and 4 stopped at the combine-only variant, which the
# plan check refuses (no launch binds q); the test without it ran as
# calls.txt says.
# call.sh [T]: T, the seconds the call may run (540 unless given).
set -u
T=${1:-540}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/smi.txt
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/h2.tar.xz || exit 1
E=/tmp/e/h2
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache

# 1. The committed images' checks, three at once.
runs=('TestScheduleOnDevice|TestDecodeStepGraph' 'TestMLADecodeRandom' 'TestSparseAndFP8|TestSharedMemoryOfTheEntries')
pids=""
for part in 0 1 2; do
  (cd internal/gpucheck && timeout 150 $E/gpucheck.test -test.v -test.count=1 -test.short -test.run "${runs[$part]}" \
    -test.timeout 150s > /tmp/checks-$part.log 2>&1; echo "checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids
cat /tmp/checks-*.log > /tmp/checks.log
{ grep -hE "^(--- |FAIL|ok|PASS|panic)|packed|of 60 batches" /tmp/checks.log | cut -c1-260 | head -40
  grep -B2 -A20 -- "--- FAIL" /tmp/checks.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log | tail -12

# 2. A, B, C interleaved, three rounds (each row checked against float64 by the bench).
mkdir -p /tmp/ab
ROWS="h16_ragged64,h128_ragged64,h16_b1_s4096,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h16_b128_s4096,h128_b16_s4096,h128_b64_s4096"
for round in 1 2 3; do
  [ $(left $((T - 200))) -gt 40 ] || break
  for v in B A C; do
    timeout 60 $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py B A C > $OUT/ab.txt; cat $OUT/ab.txt

# 3. A decode layer by parts (the committed images).
(cd internal/gpucheck && EXP=1 EXP_SHAPES=h16_b16_s1024,h16_b16_s2048,h16_b16_s4096,h16_b16_s8192,h16_b16_s16384,h16_b64_s4096,h16_b1_s4096,h128_b16_s4096,h128_b16_s16384,h128_b1_s4096 \
  timeout $(left $((T - 110))) $E/gpucheck.test -test.v -test.count=1 -test.run TestExpParts -test.timeout 200s > /tmp/exp.log 2>&1; echo "parts rc=$? at $(at)")
grep -E "EXP|FAIL|panic|^ok|^PASS" /tmp/exp.log | sed 's/^ *//' | cut -c1-220 > $OUT/exp.log; cat $OUT/exp.log

# 4. Each block's timeline (the instrumented source, NVRTC).
(cd internal/gpucheck && EXP=1 EXP_TL=1 EXP_SHAPES=h16_b16_s4096,h16_b16_s16384,h16_b1_s4096,h128_b16_s4096,h128_b1_s4096 ATTNPLUG_DEVICE_CODE=nvrtc \
  timeout $(left $((T - 10))) $E/gpucheck-tl.test -test.v -test.count=1 -test.run TestExpParts -test.timeout 300s > /tmp/tl.log 2>&1; echo "timeline rc=$? at $(at)")
grep -E "EXP|TL |FAIL|panic|^ok|^PASS|rror" /tmp/tl.log | sed 's/^ *//' | cut -c1-260 > $OUT/tl.log; cat $OUT/tl.log
echo "done at $(at)"
