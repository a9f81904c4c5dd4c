#!/bin/bash
# P3: the persistent prefill with items claimed, not assigned: a block an
# SM, each claiming its next (schedule block, head) item from a counter in
# the plan's metadata (work) as its producer frees, so items start in the
# order a grid of one block an item starts them, on the block that frees
# first; the next item's first loads under this one's last products (as
# P1). Its float64 checks first (gpucheck through NVRTC on its sources);
# then the prefill rows of attnplug bench --gpu against the committed plugin
# (H: its images; Hn: its sources through NVRTC) and P1 (call-p1p2.sh),
# interleaved, three times each; one launch of the 1k row at 128 heads
# profiled; the tree's images (gen) if P3 wins (P3/Hn <= 1.0 on the median
# row, no row above 1.05: the report decides).
set -u
S=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S) )); [ $x -lt 1 ] && x=1; echo $x; } # never 0: timeout 0 waits forever
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s51ab3.tar.xz || exit 1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 100 /tmp/e/gpucheck-P3.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' \
  -test.timeout 95s > $OUT/checks-P3.log 2>&1; echo "P3 checks (NVRTC) rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-P3.log | cut -c1-160 | head -12
grep -B2 -A12 -- "--- FAIL" $OUT/checks-P3.log | head -20
grep -q "^PASS" $OUT/checks-P3.log || { echo "P3 failed its checks: no timing"; exit 0; }
mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in H Hn P1 P3; do
    dir=$v; extra=""
    [ $v = Hn ] && { dir=H; extra="ATTNPLUG_DEVICE_CODE=nvrtc"; }
    env $extra timeout $(left 330) /tmp/e/attnplug bench --gpu --json --python "" --only _prefill_ --plugin-dir /tmp/e/$dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v round $round rc=$? at $(( $(date +%s) - S ))s"
    tail -2 /tmp/err-$v | cut -c1-300
  done
done
tar -C /tmp/ab -czf $OUT/ab-p3-json.tar.gz .
python3 - <<'PY' > $OUT/ab-p3.txt
import json, glob, collections, os, statistics
us = collections.defaultdict(list)
for f in sorted(glob.glob("/tmp/ab/ab-*.json")):
    v = os.path.basename(f).split("-")[1]
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, e); continue
    for sec, rows in j.items():
        if isinstance(rows, list):
            for r in rows:
                if isinstance(r, dict) and "us" in r and "name" in r:
                    us[(sec + "/" + r["name"], v)].append(r["us"])
vs, ps = ["H", "Hn", "P1", "P3"], ["P1", "P3"]
print("%-28s" % "row" + "".join("%28s" % (v + " us") for v in vs) + "   Hn/H" + "".join("  %s/Hn" % p for p in ps))
rat = {p: [] for p in ps}
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    for p in ps:
        rat[p].append(m[p] / m["Hn"])
    print("%-28s" % n + "".join("%28s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs)
          + " %6.3f" % (m["Hn"] / m["H"]) + "".join(" %7.3f" % (m[p] / m["Hn"]) for p in ps))
for p in ps:
    r = [x for x in rat[p] if x == x]
    print("median %s/Hn %.3f max %.3f" % (p, statistics.median(r), max(r)) if r else "no rows of " + p)
PY
cat $OUT/ab-p3.txt
timeout $(left 400) ncu --clock-control none --target-processes all -k regex:mha_prefill --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
  /tmp/e/attnplug bench --gpu --python "" --only h128_prefill_1k --plugin-dir /tmp/e/P3 > $OUT/ncu-p3.txt 2>&1
echo "ncu P3 rc=$? at $(( $(date +%s) - S ))s"
grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Hit|Warp Cycles Per Issued|Grid Size" $OUT/ncu-p3.txt | head
if awk '/^median P3/ {if ($3 <= 1.0 && $5 <= 1.05) win=1} END {exit !win}' $OUT/ab-p3.txt; then
  rm -rf /tmp/img && mkdir -p /tmp/img
  timeout $(left 560) /tmp/e/gen-P3 -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"
  tar -C /tmp/img -czf $OUT/images-p3.tar.gz . && ls -la $OUT/images-p3.tar.gz
else
  echo "P3 does not win: no images"
fi
echo "call done at $(( $(date +%s) - S ))s"
