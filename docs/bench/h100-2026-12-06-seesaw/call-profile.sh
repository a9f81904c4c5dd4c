#!/bin/bash
# Where the seesaw's time goes (h128_b64_s4096, one launch each, ncu with
# the clocks left alone). F: the committed build (its images); X1: F
# without the copies of the loop (every pair reuses the prologue's two
# tiles: wrong numbers, no waits on memory); X2: F without the masks (the
# keys' validity and the causal limits). X1 and X2 fail their checks by
# design, so each is timed on its first launch (the check's), beside F's.
# Then F's first launch and a steady one, in full: the warps' stall
# reasons and where in the source they stall.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s52p.tar.xz || exit 1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
for round in 1 2; do
  for v in F X1 X2; do
    extra=""; [ $v != F ] && extra="ATTNPLUG_DEVICE_CODE=nvrtc"
    echo "=== $v round $round" >> $OUT/ncu-ab.txt
    env $extra timeout $(left 300) ncu --clock-control none --target-processes all -k regex:mla_decode_ --launch-skip 0 --launch-count 1 \
      --section SpeedOfLight /tmp/e/attnplug bench --gpu --python "" --only h128_b64_s4096 --plugin-dir /tmp/e/$v >> $OUT/ncu-ab.txt 2>&1
    echo "ncu $v $round rc=$? at $(( $(date +%s) - S0 ))s"
  done
done
grep -E "^=== |Duration|Compute \(SM\) Throughput|Memory Throughput  " $OUT/ncu-ab.txt
timeout $(left 560) ncu --clock-control none --target-processes all -k regex:mla_decode_ --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section InstructionStats --section Occupancy --section LaunchStats \
  /tmp/e/attnplug bench --gpu --python "" --only h128_b64_s4096 --plugin-dir /tmp/e/F > $OUT/ncu-F.txt 2>&1
echo "ncu F full rc=$? at $(( $(date +%s) - S0 ))s"
grep -E "Duration|Stall|Warp Cycles Per Issued|Issue Slots Busy|Tensor|Pipe|Shared Memory|L2 Hit|DRAM Throughput" $OUT/ncu-F.txt | head -40
echo "done at $(( $(date +%s) - S0 ))s"
