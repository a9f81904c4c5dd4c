#!/bin/bash
# Session 53, call 10: G, K0's rope block refilled with its blocks 0-3 by
# warpgroup 0 (early in the pair), K1's with its blocks 4-7 by warpgroup 1,
# so that warpgroup 0's next S does its rope k-steps before it waits for K0's
# late blocks 4-7. G's float64 checks (NVRTC, outputs poisoned),
# compute-sanitizer memcheck and synccheck, ptxas figures, its images (gen, in
# the background) while the 128-head rows and two extends are timed, A (the
# committed build, 11fd148, NVRTC) and G interleaved, three rounds.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s53j.tar.xz || exit 1
E=/tmp/e/s53j
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat mla_decode_sm90.cu; } > /tmp/m.cu)
(timeout 250 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m.cubin /tmp/m.cu > /tmp/ptxas.log 2>&1; echo "nvcc rc=$?") &
NP=$!
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 200 $E/gpucheck-G.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
  -test.timeout 195s > $OUT/checks-G.log 2>&1; echo "G checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-G.log | cut -c1-160 | head -8
grep -B2 -A14 -- "--- FAIL" $OUT/checks-G.log | cut -c1-300 | head -30
grep -q "^PASS" $OUT/checks-G.log || { wait $NP; grep -E "error|C75" /tmp/ptxas.log | head; echo "G failed its checks: no timing"; exit 0; }
for tool in memcheck synccheck; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 150 compute-sanitizer --tool $tool $E/gpucheck-G.test -test.v -test.count=1 -test.short \
    -test.run TestInProcessBackendOnDevice -test.timeout 140s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(( $(date +%s) - S0 ))s")
  tail -2 /tmp/san-$tool.log; { echo "=== compute-sanitizer --tool $tool"; tail -30 /tmp/san-$tool.log; } >> $OUT/checks-G.log
done
wait $NP
{ grep -A4 -E "Compiling entry function '(mla_decode_ss64)'" /tmp/ptxas.log; grep -E "C75[0-9][0-9].*ss64|error" /tmp/ptxas.log | sort | uniq -c | sort -rn | head -8
  for f in mla_decode_ss64; do
  cuobjdump -sass -fun $f /tmp/m.cubin > /tmp/$f.sass 2>/dev/null
  echo "$f SASS lines $(wc -l < /tmp/$f.sass), WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/$f.sass), WARPGROUP.ARRIVE $(grep -c 'WARPGROUP.ARRIVE' /tmp/$f.sass), HGMMA $(grep -c HGMMA /tmp/$f.sass), LDGSTS $(grep -c LDGSTS /tmp/$f.sass), local $(grep -cE 'STL|LDL' /tmp/$f.sass)"; done; } > $OUT/ptxas.log
cut -c1-200 $OUT/ptxas.log
mkdir -p /tmp/img-G && (timeout 300 $E/gen-G -set kernels -out /tmp/img-G > /tmp/gen-G.log 2>&1; echo "gen G rc=$?" > /tmp/gen.rc) &
GP=$!
mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in A G; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 540) $E/attnplug bench --gpu --json --python "" --only h128_b16,h128_b64,h128_b128,h128_ragged,h16_extend_b16,h16_extend_b4 --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(( $(date +%s) - S0 ))s"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 - <<'PY' > $OUT/ab.txt
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
                    us[(r["name"], v)].append(r["us"])
                    plan[(r["name"], v)] = r.get("note", r.get("plan", ""))[:90]
vs = ["A", "G"]
print("%-24s%19s%19s  G/A   %s" % ("row", "A us", "G us", "G's plan"))
rat = []
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    rat.append(m["G"] / m["A"])
    print("%-24s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + " %6.3f  %s" % (rat[-1], plan.get((n, "G"), "")))
r = [x for x in rat if x == x]
print("median G/A %.3f max %.3f min %.3f" % (statistics.median(r), max(r), min(r)) if r else "no rows")
PY
cat $OUT/ab.txt
wait $GP; cat /tmp/gen.rc; tail -2 /tmp/gen-G.log
cp /tmp/gen-G.log /tmp/img-G/GEN.log; tar -C /tmp/img-G -czf $OUT/images-G.tar.gz .
ls -la $OUT
echo "done at $(( $(date +%s) - S0 ))s"
