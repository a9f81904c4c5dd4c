#!/bin/bash
# The prefill rows of attnplug bench --gpu on the committed build (b3f747b:
# the persistent prefill, its images), with torch's SDPA and the floors in
# the same run.
set -u
mkdir -p /tmp/f && tar -C /tmp/f -xJf .device/s51fin.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1
timeout 150 /tmp/f/attnplug bench --gpu --json --only _prefill_ --plugin-dir /tmp/f/plugins > $OUT/bench.json 2> $OUT/bench.err
echo "bench rc=$?"; tail -3 $OUT/bench.err
python3 -c "
import json; j = json.load(open('$OUT/bench.json'))
print('floors', j.get('floors'))
for r in j['prefill']:
    print(r['name'], round(r['us'], 1), r.get('torch_sdpa_us') and round(r['torch_sdpa_us'], 1), r.get('speedup_vs_torch') and round(r['speedup_vs_torch'], 3), r.get('check'), r.get('plan'))
"
