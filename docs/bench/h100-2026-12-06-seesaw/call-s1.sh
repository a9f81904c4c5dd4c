#!/bin/bash
# The 64-row decode body as a seesaw (mla_decode_ss64, mla_sparse_ss64; the
# tree's sources, through NVRTC) beside the committed wg64 body.
# 1. ptxas's figures of the new entries (nvcc -Xptxas -v on the module's
#    source as Sources() composes it).
# 2. The variant's float64 checks, outputs poisoned (gpucheck in process,
#    NVRTC): every random decode, the sparse and FP8 cases, a decode step in
#    a graph, the entries' shared memory.
# 3. If they pass: the 128-head bf16 rows of attnplug bench --gpu (dense,
#    ragged, sparse) for H (committed plugins, their images), Hn (the same,
#    NVRTC) and S (the variant's plugins, NVRTC), interleaved, two rounds.
# 4. One launch of h128_b64_s4096 of H and S, profiled (ncu).
# 5. If S wins (median S/Hn <= 0.97, no row above 1.02): its images (gen).
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; } # never 0: timeout 0 waits forever
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s52ab.tar.xz || exit 1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
# 1. ptxas
(cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat mla_decode_sm90.cu; } > /tmp/m.cu)
(timeout 200 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m.cubin /tmp/m.cu > $OUT/ptxas.log 2>&1; echo "nvcc rc=$? at $(( $(date +%s) - S0 ))s") &
NV=$!
# 2. checks
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 150 /tmp/e/gpucheck-S.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice' -test.timeout 145s > $OUT/checks-S.log 2>&1
  echo "S first checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s"
  grep -q "^PASS" $OUT/checks-S.log && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 300) /tmp/e/gpucheck-S.test -test.v -test.count=1 -test.short \
  -test.run 'TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' -test.timeout 200s >> $OUT/checks-S.log 2>&1
  echo "S checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-S.log | cut -c1-160 | head -12
grep -B2 -A14 -- "--- FAIL" $OUT/checks-S.log | cut -c1-300 | head -40
wait $NV
grep -E "error|warning" $OUT/ptxas.log | head -20
grep -A4 -E "Compiling entry function '(mla_decode_ss64|mla_sparse_ss64|mla_decode_wg64)'" $OUT/ptxas.log | cut -c1-200 | head -20; grep -E "C75[0-9][0-9]" $OUT/ptxas.log | cut -c1-250 | head; grep -E "Used [0-9]+ registers" $OUT/ptxas.log | head -20
cuobjdump -sass /tmp/m.cubin 2>/dev/null | awk '/Function : mla_decode_ss64/{f=1} f&&/Function : /&&!/ss64/{f=0} f' > /tmp/ss.sass
echo "ss64 SASS lines $(wc -l < /tmp/ss.sass), WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/ss.sass), WARPGROUP.ARRIVE $(grep -c 'WARPGROUP.ARRIVE' /tmp/ss.sass), HGMMA $(grep -c HGMMA /tmp/ss.sass), local $(grep -cE 'STL|LDL' /tmp/ss.sass)"
[ "$(grep -c "^PASS" $OUT/checks-S.log)" = 2 ] || { echo "the variant failed its checks: no timing"; exit 0; }
# 3. A/B
mkdir -p /tmp/ab
for round in 1 2; do
  for v in H Hn S; do
    dir=$v; extra=""
    [ $v = Hn ] && { dir=H; extra="ATTNPLUG_DEVICE_CODE=nvrtc"; }
    for only in h128_b h128_ragged "bf16 h128"; do
      tag=$(echo "$only" | tr ' ' '_')
      env $extra timeout $(left 480) /tmp/e/attnplug bench --gpu --json --python "" --only "$only" --plugin-dir /tmp/e/$dir \
        > /tmp/ab/ab-$v-$round-$tag.json 2> /tmp/err-$v; echo "$v $round $only rc=$? at $(( $(date +%s) - S0 ))s"
      tail -2 /tmp/err-$v | cut -c1-300
    done
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
                    us[(r["name"], v)].append(r["us"]); plan[(r["name"], v)] = r.get("plan", "") + " | " + r.get("check", "")
vs = ["H", "Hn", "S"]
print("%-24s" % "row" + "".join("%19s" % (v + " us") for v in vs) + "   Hn/H    S/Hn")
rat = []
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    rat.append(m["S"] / m["Hn"])
    print("%-24s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs)
          + " %6.3f %7.3f" % (m["Hn"] / m["H"], m["S"] / m["Hn"]))
r = [x for x in rat if x == x]
print("median S/Hn %.3f max %.3f min %.3f" % (statistics.median(r), max(r), min(r)) if r else "no rows")
for n in sorted({n for n, _ in us}):
    print(n, "S:", plan.get((n, "S"), "")[:260])
PY
cat $OUT/ab.txt
# 4. profile
for v in H S; do
  echo "=== $v" >> $OUT/ncu.txt
  timeout $(left 540) ncu --clock-control none --target-processes all -k regex:mla_decode_ --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
    /tmp/e/attnplug bench --gpu --python "" --only h128_b64_s4096 --plugin-dir /tmp/e/$v >> $OUT/ncu.txt 2>&1
  echo "ncu $v rc=$? at $(( $(date +%s) - S0 ))s"
done
grep -E "^=== |Duration|Registers Per|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Issue Slots Busy" $OUT/ncu.txt | head -30
# 5. images
if python3 -c "
import re,sys; t=open('$OUT/ab.txt').read(); m=re.search(r'median S/Hn ([0-9.]+) max ([0-9.]+)', t)
sys.exit(0 if m and float(m.group(1)) <= 0.97 and float(m.group(2)) <= 1.02 else 1)"; then
  mkdir -p /tmp/img && timeout $(left 595) /tmp/e/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S0 ))s"
  tail -3 $OUT/gen.log; tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
else
  echo "S did not win by the margin: no images"
fi
echo "done at $(( $(date +%s) - S0 ))s"
