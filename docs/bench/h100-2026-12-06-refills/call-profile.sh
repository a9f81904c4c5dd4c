#!/bin/bash
# Session 53, call 1: the committed build (32bfb91, the seesaw's masks only
# where needed) from its images: gpucheck's kernel checks, compute-sanitizer
# memcheck and synccheck on the in-process backend, then ncu's stall
# reasons of mla_decode_ss64 (h128_b64_s4096), per SASS instruction.
set -u
S=$(date +%s)
left() { local v=$(( $1 - ($(date +%s) - S) )); [ $v -lt 5 ] && v=5; echo $v; }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/s53a.tar.xz || exit 1
D=/tmp/d/s53a
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=$D/bin/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
(cd launch/cudaexec && timeout 60 $D/cudaexec.test -test.count=1 > $OUT/checks.log 2>&1; echo "cudaexec rc=$?")
(cd internal/gpucheck && timeout 170 $D/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestFirstUse|TestHostAcrossASwap' \
  -test.timeout 165s >> $OUT/checks.log 2>&1; echo "gpucheck rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- (FAIL|PASS|SKIP)|FAIL|ok|PASS|panic)|NVRTC" $OUT/checks.log | cut -c1-160
grep -hB2 -A12 -- "--- FAIL" $OUT/checks.log | head -30
for tool in memcheck synccheck; do
  (cd internal/gpucheck && timeout 150 compute-sanitizer --tool $tool --target-processes all $D/gpucheck.test -test.count=1 -test.short \
    -test.run TestInProcessBackendOnDevice -test.timeout 300s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(( $(date +%s) - S ))s")
  tail -3 /tmp/san-$tool.log; { echo "=== compute-sanitizer --tool $tool"; tail -40 /tmp/san-$tool.log; } >> $OUT/checks.log
done
timeout $(left 520) ncu --clock-control none --target-processes all -k regex:mla_decode_ --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --import-source yes -o /tmp/prof \
  $D/bin/attnplug bench --gpu --python "" --only h128_b64_s4096 --plugin-dir $D/bin/plugins > /tmp/ncu.log 2>&1
echo "ncu rc=$? at $(( $(date +%s) - S ))s"; tail -5 /tmp/ncu.log
ncu -i /tmp/prof.ncu-rep --print-details all --section WarpStateStats --section SpeedOfLight > $OUT/ncu-details.txt 2>&1
ncu -i /tmp/prof.ncu-rep --page raw --csv > /tmp/raw.csv 2>&1
python3 - <<'PY' > $OUT/ncu-stalls.txt
import csv
rows=list(csv.reader(open('/tmp/raw.csv')))
h,u,v=rows[0],rows[1],rows[2]
for i,n in enumerate(h):
    if 'stall' in n or 'pcsamp' in n or n.startswith('gpu__time') or 'inst_executed' in n:
        print(n, v[i], u[i])
PY
head -60 $OUT/ncu-stalls.txt
ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass > /tmp/sass.csv 2>&1; echo "sass rc=$? $(wc -l < /tmp/sass.csv) lines"
gzip -c /tmp/sass.csv > $OUT/sass.csv.gz
head -c 1500 /tmp/sass.csv
echo "call done at $(( $(date +%s) - S ))s"
