#!/bin/bash
# The seesaw, second round: S2 = S1 (call-ab.sh) with the warpgroup read
# from lane 0 (ptxas serialised every wgmma of S1 behind a wait: C7520) and
# a wgmma fence before each batch; S3 = S2 with each tile's key rows looked
# up when its copies are issued, not a pair ahead (8 registers fewer).
# Each variant's ptxas figures and float64 checks (gpucheck in process,
# NVRTC, outputs poisoned); the 128-head dense rows of bench --gpu for H
# (committed, images), Hn (committed, NVRTC), S2, S3, interleaved, two
# rounds; one profiled launch of h128_b64_s4096 each; S2's images if S2
# wins (median S2/Hn <= 0.97, no row above 1.02).
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; } # never 0: timeout 0 waits forever
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s52ab2.tar.xz || exit 1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
for v in S2 S3; do
  src=devkernels/mla_decode_sm90.cu; [ $v = S3 ] && src=docs/bench/h100-2026-12-06-seesaw/ss-S3.cu # S2 with s3.patch applied
  (cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat ../$src; } > /tmp/m-$v.cu)
  (timeout 200 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m-$v.cubin /tmp/m-$v.cu > /tmp/ptxas-$v.log 2>&1; echo "nvcc $v rc=$?") &
done
ok=""
for v in S2 S3; do
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
wait
for v in S2 S3; do
  echo "=== $v" >> $OUT/ptxas.log
  grep -A4 -E "Compiling entry function '(mla_decode_ss64|mla_sparse_ss64)'" /tmp/ptxas-$v.log >> $OUT/ptxas.log
  grep -E "C75[0-9][0-9]|error" /tmp/ptxas-$v.log >> $OUT/ptxas.log
  cuobjdump -sass /tmp/m-$v.cubin 2>/dev/null | awk '/Function : mla_decode_ss64/{f=1} f&&/Function : /&&!/ss64/{f=0} f' > /tmp/ss-$v.sass
  echo "$v ss64 SASS lines $(wc -l < /tmp/ss-$v.sass), WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/ss-$v.sass), WARPGROUP.ARRIVE $(grep -c 'WARPGROUP.ARRIVE' /tmp/ss-$v.sass), HGMMA $(grep -c HGMMA /tmp/ss-$v.sass), local $(grep -cE 'STL|LDL' /tmp/ss-$v.sass)" >> $OUT/ptxas.log
done
cat $OUT/ptxas.log | cut -c1-220
echo "passed:$ok"
[ -n "$ok" ] || { echo "no variant passed its checks: no timing"; exit 0; }
mkdir -p /tmp/ab
for round in 1 2; do
  for v in H Hn $ok; do
    dir=$v; extra=""
    [ $v = Hn ] && { dir=H; extra="ATTNPLUG_DEVICE_CODE=nvrtc"; }
    for only in h128_b h128_ragged; do
      env $extra timeout $(left 420) /tmp/e/attnplug bench --gpu --json --python "" --only "$only" --plugin-dir /tmp/e/$dir \
        > /tmp/ab/ab-$v-$round-$only.json 2> /tmp/err-$v; echo "$v $round $only rc=$? at $(( $(date +%s) - S0 ))s"
      tail -2 /tmp/err-$v | cut -c1-300
    done
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
                    us[(r["name"], v)].append(r["us"])
vs = os.environ["VS"].split()
ps = [v for v in vs if v.startswith("S")]
print("%-24s" % "row" + "".join("%19s" % (v + " us") for v in vs) + "   Hn/H" + "".join("  %s/Hn" % p for p in ps))
rat = {p: [] for p in ps}
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    for p in ps:
        rat[p].append(m[p] / m["Hn"])
    print("%-24s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs)
          + " %6.3f" % (m["Hn"] / m["H"]) + "".join(" %7.3f" % (m[p] / m["Hn"]) for p in ps))
for p in ps:
    r = [x for x in rat[p] if x == x]
    print("median %s/Hn %.3f max %.3f min %.3f" % (p, statistics.median(r), max(r), min(r)) if r else "no rows of " + p)
PY
cat $OUT/ab.txt
for v in H $ok; do
  echo "=== $v" >> $OUT/ncu.txt
  timeout $(left 520) ncu --clock-control none --target-processes all -k regex:mla_decode_ --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    /tmp/e/attnplug bench --gpu --python "" --only h128_b64_s4096 --plugin-dir /tmp/e/$v >> $OUT/ncu.txt 2>&1
  echo "ncu $v rc=$? at $(( $(date +%s) - S0 ))s"
done
grep -E "^=== |Duration|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Issue Slots Busy" $OUT/ncu.txt | head -30
if python3 -c "
import re,sys; t=open('$OUT/ab.txt').read(); m=re.search(r'median S2/Hn ([0-9.]+) max ([0-9.]+)', t)
sys.exit(0 if m and float(m.group(1)) <= 0.97 and float(m.group(2)) <= 1.02 else 1)"; then
  mkdir -p /tmp/img && timeout $(left 595) /tmp/e/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S0 ))s"
  tail -3 $OUT/gen.log; tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
else
  echo "S2 did not win by the margin: no images"
fi
echo "done at $(( $(date +%s) - S0 ))s"
