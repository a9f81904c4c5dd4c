#!/bin/bash
# Session 53, call 9: where the committed seesaw's warps wait now (11fd148,
# its images: ncu's stall sampling of h128_b64_s4096, one launch), then two
# more orders against it: F4, warpgroup 1 issuing its own P V before it
# writes sP1; F7, warpgroup 0's own P V in two groups of two k-steps (32 keys
# of K0's blocks 0-3 refilled as each retires). All NVRTC for the A/B, one
# host binary, three rounds; every timed shape checked against float64 by
# the bench first. ptxas figures of each.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s53i.tar.xz || exit 1
E=/tmp/e/s53i
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(for v in F4 F7; do
  (cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat $E/src/src-$v.cu; } > /tmp/m-$v.cu)
  timeout 200 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m-$v.cubin /tmp/m-$v.cu > /tmp/ptxas-$v.log 2>&1
  { echo "== $v nvcc rc=$?"; grep -A4 -E "Compiling entry function 'mla_decode_ss64'" /tmp/ptxas-$v.log | grep -E "spill|Used"; grep -E "C7510|C7520|error" /tmp/ptxas-$v.log | grep -c ss64
    cuobjdump -sass -fun mla_decode_ss64 /tmp/m-$v.cubin > /tmp/ss.sass 2>/dev/null
    echo "SASS lines $(wc -l < /tmp/ss.sass), DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/ss.sass), ARRIVE $(grep -c 'WARPGROUP.ARRIVE' /tmp/ss.sass), HGMMA $(grep -c HGMMA /tmp/ss.sass), local $(grep -cE 'STL|LDL' /tmp/ss.sass)"; } >> $OUT/ptxas.log
done) &
NP=$!
timeout 120 ncu --clock-control none --target-processes all -k regex:mla_decode_ --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters -o /tmp/prof \
  $E/attnplug bench --gpu --python "" --only h128_b64_s4096 --plugin-dir $E/A/plugins > /tmp/ncu.log 2>&1
echo "ncu rc=$? at $(( $(date +%s) - S0 ))s"; tail -2 /tmp/ncu.log
ncu -i /tmp/prof.ncu-rep --print-details all --section WarpStateStats --section SpeedOfLight > $OUT/ncu-details.txt 2>&1
ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass > /tmp/sass.csv 2>&1; gzip -c /tmp/sass.csv > $OUT/sass.csv.gz
ncu -i /tmp/prof.ncu-rep --page raw --csv > /tmp/raw.csv 2>&1
python3 - <<'PY' > $OUT/ncu-stall-reasons.txt
import csv
rows=list(csv.reader(open('/tmp/raw.csv')))
h,u,v=rows[0],rows[1],rows[2]
for i,n in enumerate(h):
    if ('stalled' in n and 'not_issued' not in n) or n.startswith('gpu__time_duration.sum'):
        print(n, v[i], u[i])
PY
mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A F4 F7; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 500) $E/attnplug bench --gpu --json --python "" --only h128_b16,h128_b64,h128_b128,h128_ragged,h16_extend_b16,h16_extend_b4 --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(( $(date +%s) - S0 ))s"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 - <<'PY' > $OUT/ab.txt
import json, glob, collections, os, statistics
us = collections.defaultdict(list); bad = []
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
vs = ["A", "F4", "F7"]
print("%-22s" % "row" + "".join("%26s" % (v + " us") for v in vs) + "".join("%7s" % (v + "/A") for v in vs[1:]))
rat = {v: [] for v in vs[1:]}
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    for v in vs[1:]: rat[v].append(m[v] / m["A"])
    print("%-22s" % n + "".join("%26s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + "".join(" %6.3f" % (m[v] / m["A"]) for v in vs[1:]))
for v in vs[1:]:
    r = [x for x in rat[v] if x == x]
    print("median %s/A %.3f max %.3f min %.3f" % (v, statistics.median(r), max(r), min(r)) if r else "no rows of " + v)
print("without a time:", bad)
PY
cat $OUT/ab.txt
wait $NP; cat $OUT/ptxas.log
grep -E 'stalled_(long_scoreboard|barrier|wait|gmma|lg_throttle)' $OUT/ncu-stall-reasons.txt
echo "done at $(( $(date +%s) - S0 ))s"
