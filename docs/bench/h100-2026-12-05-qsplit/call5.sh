#!/bin/bash
# Call 5: the decode's query loader, A/B/C in one run on the same card (the
# batch-1 and batch-16 rows of attnplug bench --gpu, interleaved, twice
# each): A, the whole-q loader before query_split (4d81bf8); B, QView with a
# division per 16-byte chunk (94199dd, its images); C, one division a
# block, the rows of one token a thread's fixed column stepped by a fixed
# stride (two loops: q nope, q rope), a float quotient for rows over
# several tokens (the tree; its plugins' images are stale, so NVRTC builds
# it here). Then C's images (gen), C's kernel checks against float64
# through NVRTC (whole and split queries), and the Python GPU suites and
# bench over C's plugins.
set -u
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d5.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1
for round in 1 2; do
  for v in A B C; do
    for only in _b1_ b16_s4096; do
      timeout $(left 200) /tmp/d/attnplug bench --gpu --json --python "" --only $only --plugin-dir /tmp/d/$v \
        > $OUT/ab-$v-$round-$only.json 2> /tmp/err-$v; echo "$v round $round $only rc=$? at $(( $(date +%s) - S ))s"
      tail -2 /tmp/err-$v
    done
  done
done
python3 - <<'PY' > $OUT/ab.txt
import json, glob, os, collections
us = collections.defaultdict(list)
for f in sorted(glob.glob(os.environ["OUT"] + "/ab-*.json")):
    v = os.path.basename(f).split("-")[1]
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, e); continue
    for sec in ("decode", "sparse_fp8"):
        for r in j.get(sec) or []:
            us[(r["name"], v)].append(r["us"])
names = sorted({n for n, _ in us})
print("%-26s %18s %18s %18s %7s %7s" % ("row", "A us", "B us", "C us", "B/A", "C/A"))
for n in names:
    a, b, c = (us.get((n, v), []) for v in "ABC")
    fmt = lambda x: " ".join("%8.2f" % y for y in x)
    ra = min(a) if a else float("nan")
    print("%-26s %18s %18s %18s %7.3f %7.3f" % (n, fmt(a), fmt(b), fmt(c), (min(b) if b else float("nan")) / ra, (min(c) if c else float("nan")) / ra))
PY
cat $OUT/ab.txt
tar -C $OUT -czf /tmp/ab.tar.gz $(cd $OUT && ls ab-*.json) && rm -f $OUT/ab-*.json && mv /tmp/ab.tar.gz $OUT/
rm -rf /tmp/img && mkdir -p /tmp/img
/tmp/d/gen -set kernels -out /tmp/img > $OUT/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S ))s"
tar -C /tmp/img -czf $OUT/images.tar.gz . && ls -la $OUT/images.tar.gz
(cd internal/gpucheck && timeout 120 /tmp/d/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
  -test.timeout 115s > $OUT/gpucheck-nvrtc.log 2>&1; echo "gpucheck (NVRTC) rc=$? at $(( $(date +%s) - S ))s")
grep -hE "^(--- |FAIL|ok|PASS|panic)" $OUT/gpucheck-nvrtc.log | cut -c1-120
grep -B2 -A12 -- "--- FAIL" $OUT/gpucheck-nvrtc.log | head -30
export ATTNPLUG_ACME_BIN=/tmp/d/acme
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=/tmp/d/binC timeout $(left 480) python3 -m unittest -v test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $OUT/python.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s")
grep -E "^Ran|^OK|^FAILED" $OUT/python.log; grep -A25 "^FAIL:\|^ERROR:" $OUT/python.log | head -40
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout $(left 585) python3 -m attnplug_testing.bench --gpu --attnplug /tmp/d/binC/attnplug > $OUT/pybench.txt 2>&1; echo "pybench rc=$? at $(( $(date +%s) - S ))s")
cut -c1-150 $OUT/pybench.txt | head -24
echo "call5 done at $(( $(date +%s) - S ))s"
