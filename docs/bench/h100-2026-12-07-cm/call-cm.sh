#!/bin/bash
# The cluster merge (h100-2026-12-07-cm.md): the parts report's
# call-cm.sh from .device/h4.tar.xz, then, on an
# H200 only, the committed build's `bench --gpu --json --plot` on every row
# (.device/p5.tar.xz: host and plugins of fcb4377, committed images).
# call.sh [T]: T, the seconds the call may run (420 unless given).
set -u
T=${1:-420}
S0=$(date +%s)
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
bash docs/bench/h100-2026-12-07-parts/call-cm.sh 200
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "after cm: $(( $(date +%s) - S0 ))s on $NAME"
case "$NAME" in *H200*) ;; *) exit 0;; esac
mkdir -p /tmp/p5 && tar -C /tmp/p5 -xJf .device/p5.tar.xz; P=/tmp/p5/p5
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache5
unset ATTNPLUG_DEVICE_CODE
timeout $(left $((T - 10))) $P/attnplug bench --gpu --json --plot $OUT/run.svg --plugin-dir $P/plugins > $OUT/run.json 2> /tmp/bench.err
echo "bench rc=$? at $(( $(date +%s) - S0 ))s"; tail -5 /tmp/bench.err | cut -c1-300
