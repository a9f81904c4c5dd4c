#!/bin/bash
# Session 54, call 9: the eager table as it now times the class (the layer
# and the pool's write in turn, the median of the rounds' differences),
# through the Python bench on the committed build (call 8's binaries, this
# tree's Python).
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/s54g.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export ATTNPLUG_REQUIRE_GPU=1
mkdir -p bin && cp -r /tmp/d/s54g/bin/* bin/
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout 200 python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench.txt 2>&1; echo "pybench rc=$? at $(( $(date +%s) - S ))s")
sed -n '/eager decode layers/,/^$/p' $OUT/pybench.txt
echo "call done at $(( $(date +%s) - S ))s"
