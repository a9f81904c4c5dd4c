#!/bin/bash
# Call 2: the Python GPU tests through a real serve (fa3, acme), then
# attnplug bench --gpu (fa3 and dsa plugins, torch beside).
set -u
S=$(date +%s)
[ -d /tmp/d ] || { mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/dev.tar.xz || exit 1; }
mkdir -p bin/plugins && cp /tmp/d/bin/attnplug bin/ && cp /tmp/d/bin/plugins/attnplug-backend-fa3 bin/plugins/
if python3 -c 'import grpc, google.protobuf' 2>/dev/null; then
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin ATTNPLUG_ACME_BIN=/tmp/d/acme/attnplug-backend-acme_mla \
    timeout 330 python3 -m unittest -v test_sglang_backend test_device test_device_tma test_vendor_sglang test_ranks > $OUT/python.log 2>&1; echo "python rc=$?")
  grep -E "(ok|FAIL|ERROR|skipped.*)$|^Ran|^OK|^FAILED|rel err|protocol:" $OUT/python.log | cut -c1-200 | head -70
  grep -A25 "^FAIL:\|^ERROR:" $OUT/python.log | head -60
else
  echo "no grpc/protobuf in python3 here: the Python GPU tests cannot run"
fi
echo "python done at $(( $(date +%s) - S ))s"
timeout $(( 560 - ($(date +%s) - S) )) /tmp/d/bin/attnplug bench --gpu --json --plugin-dir /tmp/d/bin/plugins > $OUT/bench.json 2> $OUT/bench.err; echo "bench rc=$?"
tail -3 $OUT/bench.err
python3 - <<'P'
import json, os
try:
    r = json.load(open(os.environ["OUT"] + "/bench.json"))
except Exception as e:
    print("no bench json:", e); raise SystemExit
print(r.get("floors"))
for sec in ("decode", "prefill", "sparse_fp8"):
    for row in r.get(sec) or []:
        print(sec, row.get("name"), "%.1fus" % row.get("us", 0), "copy %.2f" % (row.get("of_copy_bandwidth") or 0),
              "mm %.2f" % (row.get("of_matmul_peak") or 0), (row.get("check") or "")[:60])
P
echo "call2 done at $(( $(date +%s) - S ))s"
