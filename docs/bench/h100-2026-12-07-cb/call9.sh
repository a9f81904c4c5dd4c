#!/bin/bash
# Call 9: mla_combine_rows capped at 64 registers (V1) against the
# committed build (C), both through NVRTC, on the rows that run it (more
# than 1024 query rows) and two that do not; three interleaved rounds of
# bench --gpu, each row checked against float64 by the bench, and the
# combines' registers from NVRTC's cache (cuobjdump found no cubin there:
# regs.txt came back empty and is not kept).
# .device/cb9.tar.xz (bundle9.sh). call9.sh [T]: T, the seconds the call
# may run (200 unless given).
set -u
T=${1:-200}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/cb9.tar.xz || exit 1
E=/tmp/e/cb9
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-cb9 ATTNPLUG_DEVICE_CODE=nvrtc
ROWS="h128_b16_s4096,h128_b64_s4096,h128_ragged64,_extend_b16,sparse fp8 h128 b16,fp8 decode h128,h16_b16_s4096,h16_b1_s4096"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in C V1; do
    [ $(left $((T - 10))) -gt 20 ] || break 2
    timeout $(left $((T - 5))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
# abtable.py takes its baseline as A: as run, it was given C and failed;
# call9/ab.txt is its table from the JSON with C's files renamed A.
python3 docs/bench/h100-2026-12-06-producer/abtable.py C V1 > $OUT/ab.txt; cat $OUT/ab.txt
python3 - <<'PY' | tee -a $OUT/ab.txt
import glob, json, os, re
worst = {}
for f in glob.glob("/tmp/ab/ab-*.json"):
    v = os.path.basename(f).split("-")[1]
    for rows in json.load(open(f)).values():
        for r in rows if isinstance(rows, list) else []:
            m = re.search(r"rel_err ([0-9.e+-]+)", str(r.get("check", "")))
            if m:
                worst[v] = max(worst.get(v, 0.0), float(m.group(1)))
print("largest rel_err against float64:", worst)
PY
{ for f in $(find /tmp/cache-cb9 -type f 2>/dev/null); do
    timeout 10 cuobjdump -res-usage $f 2>/dev/null | grep -A1 "Function mla_combine" | sed "s|^|$(basename $f): |"; done; } | tee $OUT/regs.txt
echo "done at $(at)"
