#!/bin/bash
# Session 55, call 2: B2, the combine kernels merging online at most 64
# registers a thread (__launch_bounds__(256, 4)), and C (B2 with the columns
# of a batch of 129-256 rows cut in two). B2's float64 checks (NVRTC, outputs
# poisoned), compute-sanitizer memcheck over the dense decode checks and
# racecheck over the combine kernels, ptxas figures of the combines, B2's
# images (gen), then A (da519e7), B2 and C interleaved, NVRTC builds all.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s55c.tar.xz || exit 1
E=/tmp/e/s55c
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd devkernels && { cat tile.cuh; echo; cat mla_common.cuh; echo; cat mla_decode.cu; } > /tmp/m.cu)
(timeout 250 nvcc -arch=sm_90 -cubin -std=c++17 -Xptxas -v -o /tmp/m.cubin /tmp/m.cu > /tmp/ptxas.log 2>&1; echo "nvcc rc=$?") &
NP=$!
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 200 $E/gpucheck-B.test -test.v -test.count=1 -test.short \
  -test.run 'TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
  -test.timeout 195s > $OUT/checks-B.log 2>&1; echo "B2 checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-B.log | cut -c1-160 | head -12
grep -B2 -A14 -- "--- FAIL" $OUT/checks-B.log | cut -c1-300 | head -40
grep -q "^PASS" $OUT/checks-B.log || { echo "B2 failed its checks: no timing"; exit 0; }
mkdir -p /tmp/img-B && (timeout 300 $E/gen-B -set kernels -out /tmp/img-B > /tmp/gen-B.log 2>&1; echo "gen B2 rc=$?" > /tmp/gen.rc) &
GP=$!
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 170 compute-sanitizer --tool memcheck $E/gpucheck-B.test -test.count=1 -test.short \
    -test.run 'TestMLADecodeRandom' -test.timeout 165s > /tmp/san-memcheck.log 2>&1; echo "sanitizer memcheck rc=$? at $(( $(date +%s) - S0 ))s") &
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 170 compute-sanitizer --tool racecheck --kernel-name kns=mla_combine $E/gpucheck-B.test -test.count=1 -test.short \
    -test.run 'TestMLADecodeRandom' -test.timeout 165s > /tmp/san-racecheck.log 2>&1; echo "sanitizer racecheck (combines) rc=$? at $(( $(date +%s) - S0 ))s") &
wait $NP
{ grep -A2 -E "Compiling entry function 'mla_combine" /tmp/ptxas.log; grep -iE "error" /tmp/ptxas.log | head -5; } > $OUT/ptxas.log; cat $OUT/ptxas.log
wait $GP; cat /tmp/gen.rc; tail -1 /tmp/gen-B.log
cp /tmp/gen-B.log /tmp/img-B/GEN.log; tar -C /tmp/img-B -czf $OUT/images-B.tar.gz .
for tool in memcheck racecheck; do while pgrep -f "tool $tool" > /dev/null; do sleep 2; done; done
for tool in memcheck racecheck; do tail -3 /tmp/san-$tool.log; { echo "=== compute-sanitizer --tool $tool"; head -40 /tmp/san-$tool.log; echo ...; tail -20 /tmp/san-$tool.log; } >> $OUT/checks-B.log; done
mkdir -p /tmp/ab
ROWS="h16_b1_s4096,h16_b16_s4096,h16_b64_s4096,h16_b128_s4096,h16_ragged64,h128_b1_s4096,h128_b16_s4096,h128_b64_s4096,sparse bf16 h16 b16,sparse fp8 h128 b1,sparse fp8 h128 b16,fp8 decode h16 b16"
for round in 1 2 3; do
  [ $(left 440) -gt 80 ] || break
  for v in A B C; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 530) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(( $(date +%s) - S0 ))s"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 - <<'PY' > $OUT/ab.txt
import json, glob, collections, os, statistics
us = collections.defaultdict(list); chk = {}
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
                    chk[(r["name"], v)] = (r.get("check") or "")[:44]
vs = ["A", "B", "C"]
print("%-24s%26s%26s%26s   B/A   C/A  C's check" % ("row", "A us", "B2 us", "C us"))
rb, rc = [], []
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    rb.append(m["B"] / m["A"]); rc.append(m["C"] / m["A"])
    print("%-24s" % n + "".join("%26s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + " %6.3f %6.3f  %s" % (rb[-1], rc[-1], chk.get((n, "C"), "")))
for name, r in (("B2/A", rb), ("C/A", rc)):
    r = [x for x in r if x == x]
    print("median %s %.3f max %.3f min %.3f" % (name, statistics.median(r), max(r), min(r)) if r else "no rows")
PY
cat $OUT/ab.txt
echo "done at $(( $(date +%s) - S0 ))s"
