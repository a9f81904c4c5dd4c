#!/bin/bash
# The 16-head FP8 loader with a third tile of rows in flight (WGN_RAW 1: by
# cp.async into shared memory, each thread's own chunks), against the
# committed plugins (A). R0 (WGN_RAW 0, the two register tiles as committed:
# a control) and R1 are B's binaries with the embedded #define rewritten
# (mkvariants.py). ptxas
# (nvcc) of each for registers and spills; NVRTC checks of each (float64,
# outputs poisoned); three interleaved rounds of the 16-head sparse and dense
# FP8 rows; the fastest then gets memcheck and synccheck, its images (gen)
# and ncu (sparse fp8 h16 b64).
set -u
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/rs.tar.xz || exit 1
E=/tmp/e/rs
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
VS="R0 R1"
python3 docs/bench/h200-2026-12-06-fp8-prefetch/mkvariants.py $E R0:WGN_RAW=0 R1:WGN_RAW=1 || exit 1
(cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat mla_decode_sm90.cu; } > /tmp/m.cu)
grep -c "^#define WGN_RAW 1 " /tmp/m.cu
for V in $VS; do
  sed "s/^#define WGN_RAW 1 /#define WGN_RAW ${V#R} /" /tmp/m.cu > /tmp/m-$V.cu
  (timeout 240 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m-$V.cubin /tmp/m-$V.cu > /tmp/ptxas-$V.log 2>&1
   echo "nvcc $V rc=$? at $(at)") &
done
# NVRTC caches of each build, warmed together (the times are not kept).
for v in A $VS; do
  (ATTNPLUG_DEVICE_CODE=nvrtc timeout 200 $E/attnplug bench --gpu --json --python "" --only "sparse fp8 h16 b1,fp8 decode h16 b16" \
    --plugin-dir $E/$v/plugins > /tmp/warm-$v.json 2> /tmp/warm-$v.err; echo "warm $v rc=$? at $(at)") &
done
for V in $VS; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 220 $E/$V/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestSparseAndFP8|TestDecodeStepGraph' \
    -test.timeout 215s > /tmp/checks-$V.log 2>&1; echo "$V checks (NVRTC) rc=$? at $(at)") &
done
wait
for V in $VS; do
  for f in mla_decode_fp8_wg16 mla_sparse_fp8_wg16; do
    echo "$V $f: $(grep -A3 "Compiling entry function '$f'" /tmp/ptxas-$V.log | grep -oE '[0-9]+ bytes (stack frame|spill stores)|Used [0-9]+ registers' | tr '\n' ' ')"
  done
done | tee $OUT/ptxas.log
ok=""
for V in $VS; do
  { echo "=== $V"; grep -hE "^(--- |FAIL|ok|PASS|panic)" /tmp/checks-$V.log | cut -c1-160 | head -8
    grep -hE "fp8" /tmp/checks-$V.log | cut -c1-200 | head -12
    grep -B2 -A14 -- "--- FAIL" /tmp/checks-$V.log | cut -c1-300 | head -30; } >> $OUT/checks.log
  grep -q "^PASS" /tmp/checks-$V.log && ok="$ok $V"
done
echo "passed:$ok"; grep -hE "^(--- FAIL|panic)" /tmp/checks-*.log | head
for v in A $VS; do tail -1 /tmp/warm-$v.err | cut -c1-160; done
[ -n "$ok" ] || { echo "no build passed its checks: no timing"; exit 0; }
mkdir -p /tmp/ab
ROWS="sparse fp8 h16 b16,sparse fp8 h16 b64,sparse fp8 h16 b128,fp8 decode h16"
for round in 1 2 3; do
  [ $(left 330) -gt 40 ] || break
  for v in A $ok; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 380) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A $ok > $OUT/ab.txt; cat $OUT/ab.txt
V=$(tail -1 $OUT/ab.txt | awk '/^fastest/ {print $2}'); V=${V:-${ok# }}; V=${V%% *}
echo "profiled: $V"
mkdir -p /tmp/img && (timeout $(left 560) $E/$V/gen -set kernels -out /tmp/img > /tmp/gen.log 2>&1; echo "gen $V rc=$?" > /tmp/gen.rc) &
GP=$!
for tool in memcheck synccheck; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 520) compute-sanitizer --tool $tool $E/$V/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSparseAndFP8' -test.timeout 170s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(at)") &
done
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 520) $E/$V/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestMLADecodeRandom|TestInProcessBackendOnDevice' -test.timeout 170s > /tmp/checks2-$V.log 2>&1; echo "$V decode checks rc=$? at $(at)"
 grep -hE "^(--- |FAIL|ok|PASS|panic)" /tmp/checks2-$V.log | head -4 >> $OUT/checks.log) &
for tool in memcheck synccheck; do while pgrep -f "tool $tool" > /dev/null; do sleep 2; done; done
for tool in memcheck synccheck; do tail -3 /tmp/san-$tool.log; { echo "=== $V: compute-sanitizer --tool $tool"; tail -30 /tmp/san-$tool.log; } >> $OUT/checks.log; done
if [ $(left 500) -gt 40 ]; then
  timeout $(left 540) ncu --clock-control none --target-processes all -k regex:mla_sparse_fp8_wg16 --launch-skip 20 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters --import-source yes -o /tmp/prof \
    env ATTNPLUG_DEVICE_CODE=nvrtc $E/attnplug bench --gpu --python "" --only "sparse fp8 h16 b64" --plugin-dir $E/$V/plugins > /tmp/ncu.log 2>&1
  echo "ncu rc=$? at $(at)"; tail -2 /tmp/ncu.log
  ncu -i /tmp/prof.ncu-rep --print-details all > $OUT/ncu-details.txt 2>&1
  ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > $OUT/sass.csv.gz
  grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued|Stall (Barrier|Long)" $OUT/ncu-details.txt | head -8
fi
wait; cat /tmp/gen.rc; tail -2 /tmp/gen.log
cp /tmp/gen.log /tmp/img/GEN.log; tar -C /tmp/img -czf $OUT/images-$V.tar.gz .
ls -la $OUT
echo "done at $(at)"
