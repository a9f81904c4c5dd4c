#!/bin/bash
# Call 8: attnplug bench --gpu --json --plot: every row, its JSON and its
# chart against the floors of the same run, on the binaries at the end of
# the session.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d8.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p bin && cp -r /tmp/d/bin/* bin/
timeout 400 bin/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir bin/plugins > $OUT/bench.json 2> $OUT/bench.err; echo "bench rc=$? at $(( $(date +%s) - S ))s"
tail -3 $OUT/bench.err; ls -la $OUT
echo "call8 done at $(( $(date +%s) - S ))s"
