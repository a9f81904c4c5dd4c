#!/bin/bash
# Session 53, call 3: the seesaw asking L2 for the keys of the pair one
# (E2a) or two (E2b) ahead (cp.async.bulk.prefetch.L2, the first thread,
# pages of 32 keys or more), against the committed fa3 plugin (A); all
# NVRTC, one host binary; every timed shape checked against float64 by
# the bench first (outputs poisoned). E2a's ptxas figures (the tree's
# source).
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s53c.tar.xz || exit 1
E=/tmp/e/s53c
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat mla_decode_sm90.cu; } > /tmp/m.cu)
(timeout 250 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m.cubin /tmp/m.cu > /tmp/ptxas.log 2>&1; echo "nvcc rc=$?"
 { grep -A4 -E "Compiling entry function '(mla_decode_ss64)'" /tmp/ptxas.log; grep -E "C75[0-9][0-9].*ss64|error" /tmp/ptxas.log | sort | uniq -c | sort -rn | head -8
  cuobjdump -sass -fun mla_decode_ss64 /tmp/m.cubin > /tmp/ss.sass 2>/dev/null
  echo "SASS lines $(wc -l < /tmp/ss.sass), DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/ss.sass), ARRIVE $(grep -c 'WARPGROUP.ARRIVE' /tmp/ss.sass), HGMMA $(grep -c HGMMA /tmp/ss.sass), prefetch $(grep -cE 'UBLKPF|BLKPF|CCTL' /tmp/ss.sass), local $(grep -cE 'STL|LDL' /tmp/ss.sass)"; } > $OUT/ptxas.log) &
NP=$!
mkdir -p /tmp/ab
for round in 1 2; do
  for v in A E2a E2b; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 500) $E/attnplug bench --gpu --json --python "" --only h128_b16,h128_b64,h128_b128,h128_ragged,h16_extend_b16,h16_extend_b4 --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(( $(date +%s) - S0 ))s"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 - <<'PY' > $OUT/ab.txt
import json, glob, collections, os, statistics
us = collections.defaultdict(list); plan = {}; bad = []
for f in sorted(glob.glob("/tmp/ab/ab-*.json")):
    v = os.path.basename(f).split("-")[1]
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, e); continue
    for sec, rows in j.items():
        if isinstance(rows, list):
            for r in rows:
                if isinstance(r, dict) and "name" in r:
                    if "us" in r: us[(r["name"], v)].append(r["us"])
                    else: bad.append((v, r["name"], r.get("check", "")))
vs = ["A", "E2a", "E2b"]
print("%-24s" % "row" + "".join("%19s" % (v + " us") for v in vs) + "  E2a/A  E2b/A")
rat = {v: [] for v in vs[1:]}
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    for v in vs[1:]: rat[v].append(m[v] / m["A"])
    print("%-24s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + "".join(" %6.3f" % (m[v] / m["A"]) for v in vs[1:]))
for v in vs[1:]:
    r = [x for x in rat[v] if x == x]
    print("median %s/A %.3f max %.3f min %.3f" % (v, statistics.median(r), max(r), min(r)) if r else "no rows of " + v)
print("without a time:", bad)
PY
cat $OUT/ab.txt
wait $NP; cut -c1-200 $OUT/ptxas.log
echo "done at $(( $(date +%s) - S0 ))s"
