#!/bin/bash
# R: the 64-row bodies' output stores as one function (wg_store) for both
# (no change meant); R7: R with the seesaw's masks only on the tiles that
# need them (an item's last ones, those past a row's causal limit, those
# with a key that is not a row; the ablation put every tile's masks at 5%
# of a launch). Each one's float64 checks (NVRTC, outputs poisoned); both
# their images (gen) while the 128-head rows and an extend are timed, Hn
# (committed plugins, NVRTC), R, R7 interleaved, two rounds.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s52r.tar.xz || exit 1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(for v in R R7; do mkdir -p /tmp/img-$v && timeout 200 /tmp/e/gen-$v -set kernels -out /tmp/img-$v > /tmp/gen-$v.log 2>&1; echo "gen $v rc=$?" >> /tmp/gen.rc; done) &
GP=$!
ok=""
for v in R R7; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 120 /tmp/e/gpucheck-$v.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
    -test.timeout 115s > $OUT/checks-$v.log 2>&1; echo "$v checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
  grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-$v.log | cut -c1-160 | head -8
  grep -B2 -A14 -- "--- FAIL" $OUT/checks-$v.log | cut -c1-300 | head -30
  grep -q "^PASS" $OUT/checks-$v.log && ok="$ok $v"
done
echo "passed:$ok"
mkdir -p /tmp/ab
for round in 1 2; do
  for v in Hn $ok; do
    dir=$v; [ $v = Hn ] && dir=H
    for only in h128_b h128_ragged h16_extend_b16; do
      ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 300) /tmp/e/attnplug bench --gpu --json --python "" --only "$only" --plugin-dir /tmp/e/$dir \
        > /tmp/ab/ab-$v-$round-$only.json 2> /tmp/err-$v; echo "$v $round $only rc=$? at $(( $(date +%s) - S0 ))s"
      tail -1 /tmp/err-$v | cut -c1-200
    done
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
VS="Hn$ok" python3 - <<'PY' > $OUT/ab.txt
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
                    us[(r["name"], v)].append(r["us"])
vs = os.environ["VS"].split()
ps = [v for v in vs if v != "Hn"]
print("%-24s" % "row" + "".join("%19s" % (v + " us") for v in vs) + "".join("  %s/Hn" % p for p in ps))
rat = {p: [] for p in ps}
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    for p in ps:
        rat[p].append(m[p] / m["Hn"])
    print("%-24s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + "".join(" %7.3f" % (m[p] / m["Hn"]) for p in ps))
for p in ps:
    r = [x for x in rat[p] if x == x]
    print("median %s/Hn %.3f max %.3f min %.3f" % (p, statistics.median(r), max(r), min(r)) if r else "no rows of " + p)
PY
cat $OUT/ab.txt
wait $GP; cat /tmp/gen.rc
for v in R R7; do tail -2 /tmp/gen-$v.log; cp /tmp/gen-$v.log /tmp/img-$v/GEN.log; tar -C /tmp/img-$v -czf $OUT/images-$v.tar.gz .; done
ls -la $OUT
echo "done at $(( $(date +%s) - S0 ))s"
