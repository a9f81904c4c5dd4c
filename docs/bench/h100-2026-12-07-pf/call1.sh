#!/bin/bash
# Call 1: N (n.patch) through NVRTC. Carries .device/pf1.tar.xz
# (bundle1.sh) and .device/nx2.tar.xz (A: HEAD 7276944's plugins).
# - gen's images of N's sources, packed back (images.tar.gz, gen.txt);
# - gpucheck's checks on N's sources, NVRTC, four at once, the fourth
#   under compute-sanitizer memcheck (checks.log);
# - three interleaved rounds of bench --gpu over the decode rows: A, N and
#   V256 (N asking L2 for 256 keys), all NVRTC (ab.txt, ab-json.tar.gz);
# - the layer by parts and each block's timeline of N (tl.log).
# call1.sh [T]: T, the seconds the call may run (540 unless given).
set -u
T=${1:-540}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e /tmp/img && mkdir -p /tmp/e /tmp/img && tar -C /tmp/e -xJf .device/pf1.tar.xz && tar -C /tmp/e -xJf .device/nx2.tar.xz || exit 1
E=/tmp/e/pf1 A=/tmp/e/nx2
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-pf1 ATTNPLUG_DEVICE_CODE=nvrtc
(unset ATTNPLUG_DEVICE_CODE; timeout 240 $E/gen -set kernels -out /tmp/img > /tmp/gen.log 2>&1; echo "gen rc=$? at $(at)") &
gpid=$!
rm -f /tmp/checks-*.log; pids=""
runs=('TestScheduleOnDevice|TestDecodeStepGraph' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper' 'TestSparseAndFP8|TestMMASyncWideOnHopper' 'TestDecodeStepGraph|TestMLADecodeRandom')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
for part in 0 1 2 3; do
  (cd internal/gpucheck && timeout $(left $((T - 300))) ${pre[$part]} $E/gpucheck-N.test -test.v -test.count=1 \
    -test.short -test.run "${runs[$part]}" -test.timeout 230s > /tmp/checks-$part.log 2>&1; echo "N checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids $gpid
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
{ grep -vi "warpgroup.arrive is injected" /tmp/gen.log | tail -8
  cuobjdump -res-usage /tmp/img/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_decode_(wg16|wg64|ss64|fp8_wg16)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - - ; } | tee $OUT/gen.txt
{ for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck-N ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B2 -A20 -- "--- FAIL" /tmp/checks-*.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,fp8 decode h128,sparse fp8 h128 b16,sparse bf16 h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A N V256; do
    [ $(left $((T - 60))) -gt 15 ] || break 2
    dir=$E/$v/plugins; [ $v = A ] && dir=$A/plugins
    timeout $(left $((T - 50))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A N V256 > $OUT/ab.txt; cat $OUT/ab.txt
SH=h16_b1_s4096,h128_b1_s4096,h16_b16_s4096,h128_b16_s4096
(cd internal/gpucheck && EXP=1 EXP_TL=1 EXP_SHAPES=$SH timeout $(left $((T - 5))) $E/gpucheck-tl.test \
  -test.v -test.count=1 -test.run TestExpParts -test.timeout 300s > /tmp/tl.log 2>&1; echo "timeline rc=$? at $(at)")
grep -E "EXP|TL |FAIL|panic|^ok|^PASS|rror" /tmp/tl.log | sed 's/^ *//' | cut -c1-260 > $OUT/tl.log; cat $OUT/tl.log
echo "done at $(at)"
