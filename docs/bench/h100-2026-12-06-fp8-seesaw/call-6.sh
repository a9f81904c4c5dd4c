#!/bin/bash
# Session 54, call 6: where the FP8 seesaw's warps wait. The committed build
# (call 5's bundle, from the images): ncu's speed of light, warp states and
# stall reasons per SASS instruction, of one launch of mla_sparse_fp8_ss64
# (sparse FP8, 128 heads, 64 tokens) and one of mla_decode_fp8_ss64 (dense
# FP8, 128 heads, batch 64 x 8192).
set -u
S=$(date +%s)
left() { local v=$(( $1 - ($(date +%s) - S) )); [ $v -lt 5 ] && v=5; echo $v; }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/s54f.tar.xz || exit 1
D=/tmp/d/s54f
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1
for x in "sparse:mla_sparse_fp8_ss64:sparse fp8 h128 b64" "dense:mla_decode_fp8_ss64:fp8 decode h128 b64"; do
  IFS=: read name kern row <<< "$x"
  timeout $(left 280) ncu --clock-control none --target-processes all -k regex:$kern --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --import-source yes -o /tmp/prof-$name \
    $D/bin/attnplug bench --gpu --python "" --only "$row" --plugin-dir $D/bin/plugins > /tmp/ncu-$name.log 2>&1
  echo "ncu $name rc=$? at $(( $(date +%s) - S ))s"; tail -3 /tmp/ncu-$name.log
  ncu -i /tmp/prof-$name.ncu-rep --print-details all --section WarpStateStats --section SpeedOfLight > $OUT/ncu-details-$name.txt 2>&1
  ncu -i /tmp/prof-$name.ncu-rep --page raw --csv > /tmp/raw.csv 2>&1
  python3 - <<'PY' > $OUT/ncu-stalls-$name.txt
import csv
rows=list(csv.reader(open('/tmp/raw.csv')))
h,u,v=rows[0],rows[1],rows[2]
for i,n in enumerate(h):
    if 'stall' in n or 'pcsamp' in n or n.startswith('gpu__time') or 'inst_executed' in n:
        print(n, v[i], u[i])
PY
  ncu -i /tmp/prof-$name.ncu-rep --page source --csv --print-source sass > /tmp/sass-$name.csv 2>&1; echo "sass $name rc=$? $(wc -l < /tmp/sass-$name.csv) lines"
  gzip -c /tmp/sass-$name.csv > $OUT/sass-$name.csv.gz
  grep -E "Duration|Throughput|Registers" $OUT/ncu-details-$name.txt | head -12
done
echo "call done at $(( $(date +%s) - S ))s"
