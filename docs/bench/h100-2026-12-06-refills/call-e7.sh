#!/bin/bash
# Session 53, call 6: E7, every refill of the seesaw issued 16 keys at a
# time as each k-step of the buffer's last product retires (E5 did it for
# K0's blocks 0-3 alone: 0.988x the committed build's time). E7's float64
# checks (NVRTC, outputs poisoned), compute-sanitizer memcheck and
# synccheck, ptxas figures, its images (gen, in the background) while the
# 128-head rows and two extends are timed, E5 and E7 interleaved, three
# rounds, one host binary.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s53f.tar.xz || exit 1
E=/tmp/e/s53f
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat mla_decode_sm90.cu; } > /tmp/m.cu)
(timeout 250 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m.cubin /tmp/m.cu > /tmp/ptxas.log 2>&1; echo "nvcc rc=$?") &
NP=$!
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 200 $E/gpucheck-E7.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
  -test.timeout 195s > $OUT/checks-E7.log 2>&1; echo "E7 checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-E7.log | cut -c1-160 | head -8
grep -B2 -A14 -- "--- FAIL" $OUT/checks-E7.log | cut -c1-300 | head -30
grep -q "^PASS" $OUT/checks-E7.log || { wait $NP; grep -E "error|C75" /tmp/ptxas.log | head; echo "E7 failed its checks: no timing"; exit 0; }
for tool in memcheck synccheck; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 150 compute-sanitizer --tool $tool $E/gpucheck-E7.test -test.v -test.count=1 -test.short \
    -test.run TestInProcessBackendOnDevice -test.timeout 140s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(( $(date +%s) - S0 ))s")
  tail -2 /tmp/san-$tool.log; { echo "=== compute-sanitizer --tool $tool"; tail -30 /tmp/san-$tool.log; } >> $OUT/checks-E7.log
done
wait $NP
{ grep -A4 -E "Compiling entry function '(mla_decode_ss64)'" /tmp/ptxas.log; grep -E "C75[0-9][0-9].*ss64|error" /tmp/ptxas.log | sort | uniq -c | sort -rn | head -8
  for f in mla_decode_ss64; do
  cuobjdump -sass -fun $f /tmp/m.cubin > /tmp/$f.sass 2>/dev/null
  echo "$f SASS lines $(wc -l < /tmp/$f.sass), WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/$f.sass), WARPGROUP.ARRIVE $(grep -c 'WARPGROUP.ARRIVE' /tmp/$f.sass), HGMMA $(grep -c HGMMA /tmp/$f.sass), LDGSTS $(grep -c LDGSTS /tmp/$f.sass), local $(grep -cE 'STL|LDL' /tmp/$f.sass)"; done; } > $OUT/ptxas.log
cut -c1-200 $OUT/ptxas.log
mkdir -p /tmp/img-E7 && (timeout 300 $E/gen-E7 -set kernels -out /tmp/img-E7 > /tmp/gen-E7.log 2>&1; echo "gen E7 rc=$?" > /tmp/gen.rc) &
GP=$!
mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in E5 E7; do
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
vs = ["E5", "E7"]
print("%-24s%19s%19s  E7/E5 %s" % ("row", "E5 us", "E7 us", "E7's plan"))
rat = []
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    rat.append(m["E7"] / m["E5"])
    print("%-24s" % n + "".join("%19s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + " %6.3f  %s" % (rat[-1], plan.get((n, "E7"), "")))
r = [x for x in rat if x == x]
print("median E7/E5 %.3f max %.3f min %.3f" % (statistics.median(r), max(r), min(r)) if r else "no rows")
PY
cat $OUT/ab.txt
wait $GP; cat /tmp/gen.rc; tail -2 /tmp/gen-E7.log
cp /tmp/gen-E7.log /tmp/img-E7/GEN.log; tar -C /tmp/img-E7 -czf $OUT/images-E7.tar.gz .
ls -la $OUT
echo "done at $(( $(date +%s) - S0 ))s"
