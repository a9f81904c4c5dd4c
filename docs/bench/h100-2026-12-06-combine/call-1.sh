#!/bin/bash
# Session 55, call 1: B, the combine kernels merging online (one trip to
# memory for the LSEs and partial outputs together). B's float64 checks
# (NVRTC, outputs poisoned), compute-sanitizer memcheck and racecheck over
# the dense decode checks, B's images (gen), then A (the committed plugins,
# da519e7) and B interleaved over the split decode rows, NVRTC builds both.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s55b.tar.xz || exit 1
E=/tmp/e/s55b
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 200 $E/gpucheck-B.test -test.v -test.count=1 -test.short \
  -test.run 'TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
  -test.timeout 195s > $OUT/checks-B.log 2>&1; echo "B checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-B.log | cut -c1-160 | head -12
grep -B2 -A14 -- "--- FAIL" $OUT/checks-B.log | cut -c1-300 | head -40
grep -q "^PASS" $OUT/checks-B.log || { echo "B failed its checks: no timing"; exit 0; }
mkdir -p /tmp/img-B && (timeout 300 $E/gen-B -set kernels -out /tmp/img-B > /tmp/gen-B.log 2>&1; echo "gen B rc=$?" > /tmp/gen.rc) &
GP=$!
for tool in memcheck racecheck; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 170 compute-sanitizer --tool $tool $E/gpucheck-B.test -test.v -test.count=1 -test.short \
    -test.run 'TestMLADecodeRandom' -test.timeout 165s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(( $(date +%s) - S0 ))s") &
done
wait $GP; cat /tmp/gen.rc; tail -2 /tmp/gen-B.log
cp /tmp/gen-B.log /tmp/img-B/GEN.log; tar -C /tmp/img-B -czf $OUT/images-B.tar.gz .
for tool in memcheck racecheck; do while pgrep -f "tool $tool" > /dev/null; do sleep 2; done; done
for tool in memcheck racecheck; do tail -3 /tmp/san-$tool.log; { echo "=== compute-sanitizer --tool $tool"; tail -30 /tmp/san-$tool.log; } >> $OUT/checks-B.log; done
mkdir -p /tmp/ab
ROWS="h16_b1_s4096,h16_b16_s4096,h16_b128_s4096,h16_ragged64,h128_b1_s4096,h128_b16_s4096,h128_b64_s4096,sparse bf16 h16 b16,sparse fp8 h128 b1,fp8 decode h16 b16"
for round in 1 2 3; do
  [ $(left 470) -gt 70 ] || break
  for v in A B; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 520) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
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
                    chk[(r["name"], v)] = (r.get("check") or "")[:60]
vs = ["A", "B"]
print("%-26s%26s%26s  B/A   B's check" % ("row", "A us", "B us"))
rat = []
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    rat.append(m["B"] / m["A"])
    print("%-26s" % n + "".join("%26s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + " %6.3f  %s" % (rat[-1], chk.get((n, "B"), "")))
r = [x for x in rat if x == x]
print("median B/A %.3f max %.3f min %.3f" % (statistics.median(r), max(r), min(r)) if r else "no rows")
PY
cat $OUT/ab.txt
echo "done at $(( $(date +%s) - S0 ))s"
