#!/bin/bash
# Call 4: python -m attnplug.bench --gpu, each DeepSeek path's plan launched
# from Python beside torch on the same tensors (test_bench first: every
# path's output within 2e-2 of torch's), then the full table at 16 and 128
# heads, batch 16, 4096 cached.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d4.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p bin && cp -r /tmp/d/bin/* bin/
cd python
export PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin
timeout 200 python3 -m unittest -v test_bench > $OUT/test_bench.log 2>&1; echo "test_bench rc=$? at $(( $(date +%s) - S ))s"
grep -E "^Ran|^OK|^FAILED" $OUT/test_bench.log; grep -A25 "^FAIL:\|^ERROR:" $OUT/test_bench.log | head -40
../bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false --plugin-dir ../bin/plugins > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 50); do [ -S /tmp/ap.sock ] && break; sleep 0.2; done
timeout 330 python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock --json > $OUT/paths.json 2> $OUT/paths.txt; echo "bench rc=$? at $(( $(date +%s) - S ))s"
cat $OUT/paths.txt | cut -c1-150
kill $SP
echo "call4 done at $(( $(date +%s) - S ))s"
