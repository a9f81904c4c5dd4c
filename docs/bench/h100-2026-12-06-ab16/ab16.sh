#!/bin/bash
# The 16-head dense decode rows, the committed build (B: 0c074c0's host and
# plugins, from rs.tar.xz) against c126a39's (A: the build of the 2026-12-04
# 15:11 H200 run, its host's in-process kernels from its own images),
# interleaved, two rounds, on one machine. Carries .device/rs.tar.xz and
# .device/ab16.tar.xz (A's attnplug, CGO_ENABLED=0). Run after rs.sh (which
# unpacks rs.tar.xz into /tmp/e).
set -u
mkdir -p /tmp/d /tmp/ab16 && tar -C /tmp/d -xJf .device/ab16.tar.xz || exit 1
[ -x /tmp/e/rs/attnplug ] || { mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/rs.tar.xz || exit 1; }
A=/tmp/d/ab16/A B=/tmp/e/rs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1
unset ATTNPLUG_DEVICE_CODE
for r in 1 2; do
  timeout 60 $A/attnplug bench --gpu --json --python "" --only "h16_b" > /tmp/ab16/A-$r.json 2>> /tmp/ab16/err.txt; echo "A $r rc=$?"
  timeout 60 $B/attnplug bench --gpu --json --python "" --only "h16_b" --plugin-dir $B/A/plugins > /tmp/ab16/B-$r.json 2>> /tmp/ab16/err.txt; echo "B $r rc=$?"
done
tar -C /tmp/ab16 -czf $OUT/ab16.tar.gz .
python3 - <<'PY'
import json
t = {}
for v in "AB":
    for r in (1, 2):
        try:
            for x in json.load(open(f"/tmp/ab16/{v}-{r}.json"))["decode"]:
                t.setdefault(x["name"], {}).setdefault(v, []).append(x["us"])
        except Exception as e:
            print(v, r, e)
for n, d in t.items():
    if "A" in d and "B" in d:
        print("%-22s A %s B %s B/A %.3f" % (n, d["A"], d["B"], min(d["B"]) / min(d["A"])))
PY
