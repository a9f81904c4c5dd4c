#!/bin/bash
# Call D: attnplug bench --gpu --json of the tree (every row, the extends
# among them, judged against docs/bench/targets.json), twice.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/devB2.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for i in 1 2; do
  timeout 200 /tmp/d/bin/attnplug bench --gpu --json --plugin-dir /tmp/d/bin/plugins > $OUT/bench$i.json 2> $OUT/bench$i.err; echo "bench$i rc=$? at $(( $(date +%s) - S ))s"
done
python3 - <<'P'
import json, os
for i in (1, 2):
    try:
        r = json.load(open(os.environ["OUT"] + "/bench%d.json" % i))
    except Exception as e:
        print("no json", i, e); continue
    for g in r.get("goals", []):
        print(i, "met" if g["met"] else "MISSED by %.0f%%" % (100 * g.get("short_by", 0)), "%.3g..%.3g" % (g["min"], g["max"]), g["target"][:90])
P
tail -3 $OUT/bench1.err
