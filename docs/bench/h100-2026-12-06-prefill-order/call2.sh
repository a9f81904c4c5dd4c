#!/bin/bash
# Call 2: a prefill pass's blocks in head groups, longest first across a
# group's heads (G16: groups whose keys and values hold 16 MB; the tree's
# fa3 plugin, its prefill through NVRTC) against the committed
# plugin (H: its images, head by head; Hn: its sources through NVRTC), by
# the prefill rows of attnplug bench --gpu, interleaved, twice each. Only
# if a G wins (G/Hn <= 0.99 on the median row, no row above 1.01): the
# tree's images (gen) and the prefill checks against float64 through NVRTC
# on the tree's sources.
set -u
S=$(date +%s)
T=${1:-600} # the call's limit: each step's deadline is a share of it
left() { echo $(( $1 * T / 600 - ($(date +%s) - S) )); }
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s50c2.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
mkdir -p /tmp/ab
for round in 1 2; do
  for v in H Hn G16; do
    dir=$v; extra=""
    [ $v = Hn ] && { dir=H; extra="ATTNPLUG_DEVICE_CODE=nvrtc"; }
    env $extra timeout $(left 330) /tmp/e/attnplug bench --gpu --json --python "" --only _prefill_ --plugin-dir /tmp/e/$dir \
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
vs = ["H", "Hn", "G16"]
print("%-30s" % "row" + "".join("%19s" % (v + " us") for v in vs) + "   Hn/H  G16/Hn")
best = {"G16": []}
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    for g in best:
        best[g].append(m[g] / m["Hn"])
    print("%-30s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs)
          + " %6.3f  %6.3f" % (m["Hn"] / m["H"], m["G16"] / m["Hn"]))
for g, r in best.items():
    r = [x for x in r if x == x]
    print("median %s/Hn %.3f max %.3f" % (g, statistics.median(r), max(r)) if r else "no rows of " + g)
PY
cat $OUT/ab.txt
if awk '/^median G/ {if ($3 <= 0.99 && $5 <= 1.01) win=1} END {exit !win}' $OUT/ab.txt; then
  rm -rf /tmp/img && mkdir -p /tmp/img
  timeout $(left 440) /tmp/e/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"
  tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 590) /tmp/e/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' \
    -test.timeout 300s > $OUT/gpucheck-nvrtc.log 2>&1; echo "gpucheck (NVRTC) rc=$? at $(( $(date +%s) - S ))s")
  grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/gpucheck-nvrtc.log | cut -c1-120
  grep -B2 -A12 -- "--- FAIL" $OUT/gpucheck-nvrtc.log | head -30
else
  echo "no G wins: no images, no checks"
fi
echo "call2 done at $(( $(date +%s) - S ))s"
