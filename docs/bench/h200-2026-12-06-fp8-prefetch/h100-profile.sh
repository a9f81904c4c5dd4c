#!/bin/bash
# Profile of the 16-head FP8 rows that miss their goals, on the committed
# kernels (s57f: no kernel changed since; carry .device/s57f.tar.xz):
# sparse fp8 h16 b16 / b64 (goal 70% of copy: 36% / 71% on 2026-12-06) and
# fp8 decode h16 b16 (goal 1.6x bf16: 1.49x). Their limited_by says
# "not profiled since DeepSeek-V3.2's rows moved into the loader's
# registers". Each row: bench --gpu --json alone (its time and the run's
# floors), then ncu of two consecutive launches of the row's step (the
# decode and its combine) with speed of light, warp states, launch and
# memory sections, and the decode's per-instruction samples at b64.
set -u
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/s57f.tar.xz || exit 1
B=/tmp/d/s57f/bin
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
ROWS="sparse fp8 h16 b16,sparse fp8 h16 b64,fp8 decode h16 b16,h16_b16_s4096"
timeout 200 $B/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $B/plugins > $OUT/bench.json 2> /tmp/bench.err
echo "bench rc=$? at $(at)"; tail -2 /tmp/bench.err
for row in "sparse fp8 h16 b16" "sparse fp8 h16 b64" "fp8 decode h16 b16"; do
  f=$(echo "$row" | tr ' ' _)
  src=""; [ "$row" = "sparse fp8 h16 b64" ] && src="--section SourceCounters --import-source yes"
  timeout 150 ncu --clock-control none --target-processes all -k regex:mla_ --launch-skip 20 --launch-count 2 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis $src \
    -o /tmp/p-$f $B/attnplug bench --gpu --python "" --only "$row" --plugin-dir $B/plugins > /tmp/ncu-$f.log 2>&1
  echo "ncu $row rc=$? at $(at)"; tail -2 /tmp/ncu-$f.log
  ncu -i /tmp/p-$f.ncu-rep --print-details all > /tmp/ncu-$f.txt 2>&1
  grep -E "^  [a-z_0-9]+|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Stall" /tmp/ncu-$f.txt | head -30
done
tar -C /tmp -czf $OUT/ncu-details.tar.gz $(cd /tmp && ls ncu-*.txt)
ncu -i /tmp/p-sparse_fp8_h16_b64.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > $OUT/sass-sparse-h16-b64.csv.gz
ls -la $OUT
echo "done at $(at)"
