#!/bin/bash
# Session 55, call 3: mla_combine of B2 with two mla_combine_rows: D (the
# committed one, da519e7) and E (B's, merging online with four partial
# outputs in flight, no register bound). D's and E's float64 checks (NVRTC,
# outputs poisoned), compute-sanitizer memcheck and racecheck over the
# combine kernels, both images (gen), then A (da519e7), D and E interleaved
# over the rows that run mla_combine_rows, NVRTC builds all.
set -u
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s55d.tar.xz || exit 1
E=/tmp/e/s55d
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
for V in D E; do
  mkdir -p /tmp/img-$V && (timeout 300 $E/gen-$V -set kernels -out /tmp/img-$V > /tmp/gen-$V.log 2>&1; echo "gen $V rc=$?" > /tmp/gen-$V.rc) &
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc ATTNPLUG_CACHE_DIR=/tmp/cache-$V timeout 200 $E/gpucheck-$V.test -test.v -test.count=1 -test.short \
    -test.run 'TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
    -test.timeout 195s > $OUT/checks-$V.log 2>&1; echo "$V checks (NVRTC) rc=$? at $(( $(date +%s) - S0 ))s") &
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc ATTNPLUG_CACHE_DIR=/tmp/cache-s$V timeout 200 compute-sanitizer --tool memcheck --kernel-name kns=mla_combine $E/gpucheck-$V.test -test.count=1 -test.short \
    -test.run 'TestMLADecodeRandom' -test.timeout 195s > /tmp/san-memcheck-$V.log 2>&1; echo "$V memcheck (combines) rc=$? at $(( $(date +%s) - S0 ))s"
   ATTNPLUG_DEVICE_CODE=nvrtc ATTNPLUG_CACHE_DIR=/tmp/cache-s$V timeout 200 compute-sanitizer --tool racecheck --kernel-name kns=mla_combine $E/gpucheck-$V.test -test.count=1 -test.short \
    -test.run 'TestMLADecodeRandom' -test.timeout 195s > /tmp/san-racecheck-$V.log 2>&1; echo "$V racecheck (combines) rc=$? at $(( $(date +%s) - S0 ))s") &
done
wait
for V in D E; do
  grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/checks-$V.log | cut -c1-160 | head -8
  grep -B2 -A14 -- "--- FAIL" $OUT/checks-$V.log | cut -c1-300 | head -30
  cat /tmp/gen-$V.rc; tail -1 /tmp/gen-$V.log
  cp /tmp/gen-$V.log /tmp/img-$V/GEN.log
  for tool in memcheck racecheck; do tail -2 /tmp/san-$tool-$V.log; { echo "=== compute-sanitizer --tool $tool --kernel-name kns=mla_combine"; tail -12 /tmp/san-$tool-$V.log; } >> $OUT/checks-$V.log; done
done
tar -C /tmp -czf $OUT/images-DE.tar.gz img-D img-E
mkdir -p /tmp/ab
ROWS="h16_b1_s4096,h16_b128_s4096,h128_b1_s4096,h128_b16_s4096,h128_b64_s4096,sparse fp8 h128 b16,sparse fp8 h128 b128"
for round in 1 2 3; do
  [ $(left 400) -gt 60 ] || break
  for v in A D E; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 500) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
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
vs = ["A", "D", "E"]
print("%-24s%26s%26s%26s   D/A   E/A  E's check" % ("row", "A us", "D us", "E us"))
rd, re_ = [], []
for n in sorted({n for n, _ in us}):
    m = {v: min(us[(n, v)]) if us.get((n, v)) else float("nan") for v in vs}
    rd.append(m["D"] / m["A"]); re_.append(m["E"] / m["A"])
    print("%-24s" % n + "".join("%26s" % " ".join("%8.2f" % x for x in us.get((n, v), [])) for v in vs) + " %6.3f %6.3f  %s" % (rd[-1], re_[-1], chk.get((n, "E"), "")))
for name, r in (("D/A", rd), ("E/A", re_)):
    r = [x for x in r if x == x]
    print("median %s %.3f max %.3f min %.3f" % (name, statistics.median(r), max(r), min(r)) if r else "no rows")
PY
cat $OUT/ab.txt
echo "done at $(( $(date +%s) - S0 ))s"
