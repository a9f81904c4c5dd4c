#!/bin/bash
# The Hopper prefill on a persistent grid: a block an SM, each taking the
# pass's (schedule block, head) items in turn, block c the c-th item of each
# even round of P and the (P-1-c)-th of each odd one.
# P1: the next item's first keys and queries load under this item's last
#     products (the queries once its last S has read them).
# P2: P1, and the consumers' pipeline runs on across items: an item's first
#     S goes out with the last item's last P V, and the last item's output
#     is written while the first softmax runs.
# Each variant's float64 checks first (gpucheck through NVRTC on its
# sources); then the prefill rows of attnplug bench --gpu for those that
# passed, against the committed plugin (H: its images; Hn: its sources
# through NVRTC), interleaved, twice each; the tree's images (gen) for the
# variant that wins (P/Hn <= 0.99 on the median row, no row above 1.01).
# Between the two: one launch of the 1k row at 128 heads of each, profiled.
set -u
S=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S) )); [ $x -lt 1 ] && x=1; echo $x; } # never 0: timeout 0 waits forever
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s51ab2.tar.xz || exit 1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
ok=""
for v in P1 P2; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 100 /tmp/e/gpucheck-$v.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' \
    -test.timeout 95s > $OUT/checks-$v.log 2>&1; echo "$v checks (NVRTC) rc=$? at $(( $(date +%s) - S ))s")
  grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-$v.log | cut -c1-160 | head -12
  grep -B2 -A12 -- "--- FAIL" $OUT/checks-$v.log | head -20
  grep -q "^PASS" $OUT/checks-$v.log && ok="$ok $v"
done
echo "passed:$ok"
[ -n "$ok" ] || { echo "no variant passed its checks: no timing"; exit 0; }
mkdir -p /tmp/ab
for round in 1 2; do
  for v in H Hn $ok; do
    dir=$v; extra=""
    [ $v = Hn ] && { dir=H; extra="ATTNPLUG_DEVICE_CODE=nvrtc"; }
    env $extra timeout $(left 380) /tmp/e/attnplug bench --gpu --json --python "" --only _prefill_ --plugin-dir /tmp/e/$dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v round $round rc=$? at $(( $(date +%s) - S ))s"
    tail -2 /tmp/err-$v | cut -c1-300
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
VS="H Hn$ok" python3 - <<'PY' > $OUT/ab.txt
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
vs = os.environ["VS"].split()
ps = [v for v in vs if v.startswith("P")]
print("%-30s" % "row" + "".join("%19s" % (v + " us") for v in vs) + "   Hn/H" + "".join("  %s/Hn" % p for p in ps))
rat = {p: [] for p in ps}
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    for p in ps:
        rat[p].append(m[p] / m["Hn"])
    print("%-30s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs)
          + " %6.3f" % (m["Hn"] / m["H"]) + "".join(" %7.3f" % (m[p] / m["Hn"]) for p in ps))
for p in ps:
    r = [x for x in rat[p] if x == x]
    print("median %s/Hn %.3f max %.3f" % (p, statistics.median(r), max(r)) if r else "no rows of " + p)
PY
cat $OUT/ab.txt
# What limits the 1k row: one launch of each, profiled (ncu, the clocks left alone).
for v in H $ok; do
  echo "=== $v" >> $OUT/ncu.txt
  timeout $(left 420) ncu --clock-control none --target-processes all -k regex:mha_prefill --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
    /tmp/e/attnplug bench --gpu --python "" --only h128_prefill_1k --plugin-dir /tmp/e/$v >> $OUT/ncu.txt 2>&1
  echo "ncu $v rc=$? at $(( $(date +%s) - S ))s"
done
grep -E "^===|Duration|Compute \(SM\) Throughput|DRAM Throughput|Memory Throughput|L2 Hit|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size" $OUT/ncu.txt | head -60
win=$(awk '/^median P/ {if ($3 <= 0.99 && $5 <= 1.01 && (best == "" || $3 < bm)) {best = substr($2, 1, 2); bm = $3}} END {print best}' $OUT/ab.txt)
if [ -n "$win" ]; then
  echo "winner: $win"
  rm -rf /tmp/img && mkdir -p /tmp/img
  timeout $(left 560) /tmp/e/gen-$win -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"
  tar -C /tmp/img -czf $OUT/images-$win.tar.gz . && ls -la $OUT/images-$win.tar.gz
else
  echo "no P wins: no images"
fi
echo "call done at $(( $(date +%s) - S ))s"
