#!/bin/bash
# Session 56, call 1: B, the decode merging its own split requests
# (mla_merge, no combine launch for batches of at most 128 rows). B's
# float64 checks (NVRTC, outputs poisoned) incl. the orphan paths,
# compute-sanitizer memcheck / racecheck (wg16) / synccheck, B's images
# (gen); then A (the committed plugins, 56302e7) and B interleaved, NVRTC
# builds both.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s56a.tar.xz || exit 1
E=/tmp/e/s56a
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 170 $E/gpucheck-B.test -test.v -test.count=1 -test.short \
  -test.run 'TestDecodeMergesOrphans|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph|TestNarrowWGMMAOnHopper|TestMMASyncWideOnHopper|TestScheduleOnDevice' \
  -test.timeout 165s > $OUT/checks-B.log 2>&1; echo "B checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)|merge_test|orphan" $OUT/checks-B.log | cut -c1-200 | head -24
grep -B2 -A14 -- "--- FAIL" $OUT/checks-B.log | cut -c1-300 | head -40
grep -q "^PASS" $OUT/checks-B.log || { echo "B failed its checks: no timing"; exit 0; }
mkdir -p /tmp/img-B && (timeout $(left 290) $E/gen-B -set kernels -out /tmp/img-B > /tmp/gen-B.log 2>&1; echo "gen B rc=$?" > /tmp/gen.rc) &
GP=$!
san() { # tool, filter args, tests
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 290) compute-sanitizer --tool $1 $2 $E/gpucheck-B.test -test.v -test.count=1 -test.short \
    -test.run "$3" -test.timeout 120s > /tmp/san-$1.log 2>&1; echo "sanitizer $1 rc=$? at $(( $(date +%s) - S0 ))s")
}
san memcheck "" 'TestDecodeMergesOrphans' &
san racecheck "--kernel-name kns=mla_decode_wg16" 'TestDecodeMergesOrphans' &
san synccheck "" 'TestDecodeMergesOrphans' &
wait
cat /tmp/gen.rc; tail -2 /tmp/gen-B.log
cp /tmp/gen-B.log /tmp/img-B/GEN.log; tar -C /tmp/img-B -czf $OUT/images-B.tar.gz .
for tool in memcheck racecheck synccheck; do echo "== $tool"; grep -E "ERROR SUMMARY|^(--- |PASS|FAIL|ok)" /tmp/san-$tool.log | head -8; { echo "=== compute-sanitizer --tool $tool"; tail -40 /tmp/san-$tool.log; } >> $OUT/checks-B.log; done
mkdir -p /tmp/ab
ROWS="h16_b1_,h128_b1_,sparse bf16 h16 b1,sparse bf16 h128 b1,sparse fp8 h16 b1,sparse fp8 h128 b1,h16_b16_s4096,h128_b16_s4096"
for round in 1 2 3; do
  [ $(left 370) -gt 45 ] || break
  for v in A B; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 385) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(( $(date +%s) - S0 ))s"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 .device/abtable.py /tmp/ab > $OUT/ab.txt
cat $OUT/ab.txt
# B through Python: the sglang backends (dense and sparse) and the launcher,
# against a real attnplug serve of B's plugins (NVRTC).
if [ $(left 385) -gt 60 ]; then
  mkdir -p bin/plugins && cp $E/attnplug bin/ && cp $E/B/plugins/* bin/plugins/
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 390) python3 -m unittest -v test_sglang_dsa test_sglang_backend.BackendGPUTest test_device > $OUT/python-B.log 2>&1; echo "python B rc=$? at $(( $(date +%s) - S0 ))s")
  grep -E "^Ran|^OK|^FAILED" $OUT/python-B.log; grep -A25 "^FAIL:\|^ERROR:" $OUT/python-B.log | head -40
fi
echo "done at $(( $(date +%s) - S0 ))s"
