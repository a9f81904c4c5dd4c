#!/bin/bash
# Call 1: the whole-q fast path of the decode's query loader (D: the tree
# with it, through NVRTC) against the committed loader (H: cfe707f's
# images, and Hn: its sources through NVRTC) and the loader before
# query_split (O: 4d81bf8's images), by the batch-1 decode rows of attnplug
# bench --gpu, interleaved, twice each. Then where an eager decode layer's
# host time goes (eager_profile.py), with the tree's Python package and
# 39a03cf's (before the class's and the launcher's trims). Only if D wins
# (D/H <= 0.985 on the median row): D's images (gen) and D's kernel checks
# against float64 through NVRTC.
set -u
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/s49c1.tar.xz || exit 1
mkdir -p /tmp/pyold && cp -r /tmp/d/pyold /tmp/pyold/attnplug
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
mkdir -p /tmp/ab
for round in 1 2; do
  for v in O H Hn D; do
    dir=$v; extra=""
    [ $v = Hn ] && { dir=H; extra="ATTNPLUG_DEVICE_CODE=nvrtc"; }
    env $extra timeout $(left 280) /tmp/d/attnplug bench --gpu --json --python "" --only _b1_s --plugin-dir /tmp/d/$dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v round $round rc=$? at $(( $(date +%s) - S ))s"
    tail -2 /tmp/err-$v | cut -c1-300
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 - <<'PY' > $OUT/ab.txt
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
vs = ["O", "H", "Hn", "D"]
print("%-34s" % "row" + "".join("%19s" % (v + " us") for v in vs) + "   H/O    Hn/O    D/O    D/Hn   D/H")
dh = []
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    dh.append(m["D"] / m["H"])
    print("%-34s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs)
          + " %6.3f  %6.3f  %6.3f  %6.3f  %6.3f" % (m["H"] / m["O"], m["Hn"] / m["O"], m["D"] / m["O"], m["D"] / m["Hn"], m["D"] / m["H"]))
dh = [x for x in dh if x == x]
print("median D/H %.3f" % (statistics.median(dh) if dh else float("nan")))
PY
cat $OUT/ab.txt
cd python
for pkg in tree:. 39a03cf:/tmp/pyold; do
  ATTNPLUG_PLUGIN_DIR=/tmp/d/H PYTHONPATH=${pkg#*:}:testing timeout $(left 400) python3 \
    ../docs/bench/h100-2026-12-05-night/eager_profile.py --attnplug /tmp/d/attnplug --label ${pkg%%:*} >> $OUT/eager.txt 2>&1
  echo "eager ${pkg%%:*} rc=$? at $(( $(date +%s) - S ))s"
done
cd ..
grep "^\[" $OUT/eager.txt
if awk '/^median D\/H/ {exit !($3 <= 0.985)}' $OUT/ab.txt; then
  rm -rf /tmp/img && mkdir -p /tmp/img
  timeout $(left 480) /tmp/d/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"
  tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 585) /tmp/d/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
    -test.timeout 300s > $OUT/gpucheck-nvrtc.log 2>&1; echo "gpucheck (NVRTC) rc=$? at $(( $(date +%s) - S ))s")
  grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/gpucheck-nvrtc.log | cut -c1-120
  grep -B2 -A12 -- "--- FAIL" $OUT/gpucheck-nvrtc.log | head -30
else
  echo "D does not win: no images, no checks"
fi
echo "call1 done at $(( $(date +%s) - S ))s"
