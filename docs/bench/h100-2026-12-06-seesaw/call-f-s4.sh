#!/bin/bash
# The seesaw, third round. F = S2 of call-ab2.sh (the body as it will be
# committed) with the planner's rule: batches of two requests or more.
# S4 = F with warpgroup 0 asking L2 for the next pair's rows once it issues
# its first copies of them (prefetch.global.L2: the rest of the even tile,
# all of the odd one), so that the other copies hit L2.
# Each variant's float64 checks (NVRTC, outputs poisoned); the 128-head
# dense rows and the extends of bench --gpu, H (committed, images), Hn
# (committed, NVRTC), F, S4 interleaved, two rounds; the images (gen) of
# S4 if it beats F (median S4/F <= 0.97, no row above 1.02), else F's.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; } # never 0: timeout 0 waits forever
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s52f.tar.xz || exit 1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
ok=""
for v in F S4; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 150 /tmp/e/gpucheck-$v.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice' -test.timeout 145s > $OUT/checks-$v.log 2>&1
    echo "$v first checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s"
    grep -q "^PASS" $OUT/checks-$v.log && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 300) /tmp/e/gpucheck-$v.test -test.v -test.count=1 -test.short \
    -test.run 'TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' -test.timeout 200s >> $OUT/checks-$v.log 2>&1
    echo "$v checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
  grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-$v.log | cut -c1-160 | head -12
  grep -B2 -A14 -- "--- FAIL" $OUT/checks-$v.log | cut -c1-300 | head -30
  [ "$(grep -c "^PASS" $OUT/checks-$v.log)" = 2 ] && ok="$ok $v"
done
echo "passed:$ok"
case "$ok" in *F*) ;; *) echo "F failed its checks: no timing, no images"; exit 0;; esac
mkdir -p /tmp/ab
for round in 1 2; do
  for v in H Hn $ok; do
    dir=$v; extra=""
    [ $v = Hn ] && { dir=H; extra="ATTNPLUG_DEVICE_CODE=nvrtc"; }
    for only in h128_b h128_ragged _extend_; do
      [ $v = S4 ] && [ $only = _extend_ ] && continue
      env $extra timeout $(left 400) /tmp/e/attnplug bench --gpu --json --python "" --only "$only" --plugin-dir /tmp/e/$dir \
        > /tmp/ab/ab-$v-$round-$only.json 2> /tmp/err-$v; echo "$v $round $only rc=$? at $(( $(date +%s) - S0 ))s"
      tail -2 /tmp/err-$v | cut -c1-300
    done
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
VS="H Hn$ok" python3 - <<'PY' > $OUT/ab.txt
import json, glob, collections, os, statistics
us = collections.defaultdict(list); plan = {}
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
                    us[(r["name"], v)].append(r["us"]); plan[(r["name"], v)] = r.get("plan", "")[:150] + " | " + r.get("check", "")
vs = os.environ["VS"].split()
print("%-24s" % "row" + "".join("%19s" % (v + " us") for v in vs) + "   Hn/H    F/Hn   S4/F")
rat = collections.defaultdict(list)
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs + ["S4"]}
    rat["F/Hn"].append(m["F"] / m["Hn"]); rat["S4/F"].append(m["S4"] / m["F"])
    print("%-24s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs)
          + " %6.3f %7.3f %6.3f" % (m["Hn"] / m["H"], m["F"] / m["Hn"], m["S4"] / m["F"]))
for k, r in rat.items():
    r = [x for x in r if x == x]
    print("median %s %.3f max %.3f min %.3f" % (k, statistics.median(r), max(r), min(r)) if r else "no rows of " + k)
for n in sorted({n for n, _ in us}):
    print(n, "F:", plan.get((n, "F"), ""))
PY
cat $OUT/ab.txt
use=F
if python3 -c "
import re,sys; t=open('$OUT/ab.txt').read(); m=re.search(r'median S4/F ([0-9.]+) max ([0-9.]+)', t)
sys.exit(0 if m and float(m.group(1)) <= 0.97 and float(m.group(2)) <= 1.02 else 1)"; then use=S4; fi
g=/tmp/e/gen; [ $use = S4 ] && g=/tmp/e/gen-S4
echo "images of $use"
mkdir -p /tmp/img && timeout $(left 595) $g -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen ($use) rc=$? at $(( $(date +%s) - S0 ))s"
tail -3 $OUT/gen.log; echo "$use" > /tmp/img/VARIANT; tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
echo "done at $(( $(date +%s) - S0 ))s"
