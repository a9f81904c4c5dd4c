#!/bin/bash
# Call F: python -m attnplug_testing.bench --gpu, with each path beside torch.
set -u
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/devB2.tar.xz || exit 1
mkdir -p bin && cp -r /tmp/d/bin/* bin/
cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout 200 python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench.txt 2>&1; echo "pybench rc=$?"
cut -c1-160 $OUT/pybench.txt | tail -30
