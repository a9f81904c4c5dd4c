#!/bin/bash
# The 64-row body with a producer warpgroup over the FP8 caches
# (mla_decode_fp8_pc64, mla_sparse_fp8_pc64: FlashMLA's sm90 sparse FP8
# decode's three warpgroups). B's float64 checks (NVRTC, outputs poisoned),
# compute-sanitizer memcheck and synccheck over the FP8 and sparse checks,
# ptxas figures and B's images (gen), then A (the committed plugins) and B
# interleaved over the 128-head FP8 rows and two other rows, NVRTC builds
# both. On an H200, then the committed build's final run (final.sh).
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s58b.tar.xz || exit 1
E=/tmp/e/s58b
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat mla_decode_sm90.cu; } > /tmp/m.cu)
(timeout 250 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m.cubin /tmp/m.cu > /tmp/ptxas.log 2>&1; echo "nvcc rc=$?") &
NP=$!
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 200 $E/gpucheck-B.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
  -test.timeout 195s > $OUT/checks-B.log 2>&1; echo "B checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-B.log | cut -c1-160 | head -8
grep -hE "fp8|sparse" $OUT/checks-B.log | cut -c1-200 | head -24
grep -B2 -A14 -- "--- FAIL" $OUT/checks-B.log | cut -c1-300 | head -40
ptx() { wait $NP; { grep -A4 -E "Compiling entry function '(mla_decode_fp8_ss64|mla_sparse_fp8_ss64|mla_decode_fp8_pc64|mla_sparse_fp8_pc64)'" /tmp/ptxas.log; grep -E "error|C75[0-9][0-9]" /tmp/ptxas.log | sort | uniq -c | sort -rn | head -8
  for f in mla_decode_fp8_ss64 mla_sparse_fp8_ss64 mla_decode_fp8_pc64 mla_sparse_fp8_pc64; do
  cuobjdump -sass -fun $f /tmp/m.cubin > /tmp/$f.sass 2>/dev/null
  echo "$f SASS lines $(wc -l < /tmp/$f.sass), WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/$f.sass), HGMMA $(grep -c HGMMA /tmp/$f.sass), local $(grep -cE 'STL|LDL' /tmp/$f.sass)"; done; } > $OUT/ptxas.log; cut -c1-200 $OUT/ptxas.log; }
if ! grep -q "^PASS" $OUT/checks-B.log; then
  ptx; echo "B failed its checks: no timing"
  case "$G" in *H200*) bash docs/bench/h100-2026-12-06-producer/final.sh ;; esac
  exit 0
fi
mkdir -p /tmp/img-B && (timeout 300 $E/gen-B -set kernels -out /tmp/img-B > /tmp/gen-B.log 2>&1; echo "gen B rc=$?" > /tmp/gen.rc) &
GP=$!
for tool in memcheck synccheck; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 170 compute-sanitizer --tool $tool $E/gpucheck-B.test -test.v -test.count=1 -test.short \
    -test.run 'TestSparseAndFP8' -test.timeout 165s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(( $(date +%s) - S0 ))s") &
done
ptx
for tool in memcheck synccheck; do while pgrep -f "tool $tool" > /dev/null; do sleep 2; done; done
for tool in memcheck synccheck; do tail -3 /tmp/san-$tool.log; { echo "=== compute-sanitizer --tool $tool"; tail -30 /tmp/san-$tool.log; } >> $OUT/checks-B.log; done
wait $GP; cat /tmp/gen.rc; tail -2 /tmp/gen-B.log
cp /tmp/gen-B.log /tmp/img-B/GEN.log; tar -C /tmp/img-B -czf $OUT/images-B.tar.gz .
mkdir -p /tmp/ab
ROWS="fp8 decode h128,sparse fp8 h128,sparse fp8 h16 b64,h128_b64_s4096"
for round in 1 2 3; do
  [ $(left 430) -gt 60 ] || break
  for v in A B; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 480) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(( $(date +%s) - S0 ))s"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py > $OUT/ab.txt; cat $OUT/ab.txt
echo "A/B done at $(( $(date +%s) - S0 ))s"
case "$G" in *H200*) [ $(left 590) -gt 200 ] && bash docs/bench/h100-2026-12-06-producer/final.sh ;; esac
ls -la $OUT
echo "done at $(( $(date +%s) - S0 ))s"
