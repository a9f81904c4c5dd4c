#!/bin/bash
# Call 1: DeepSeek-V3.2's sparse attention through AttnplugDSABackend on the
# GPU (test_sglang_dsa: the fake-kernel suite on CUDA, then DSAGPUTest: the
# dsa plugin's kernels against float64, eager and from CUDA graphs of both
# protocols, bf16 and FP8 pools, at context 163840 over 32768 tokens), the
# dense suite again (BackendGPUTest), the sparse rows of the Python bench
# (through the class in a CUDA graph, beside torch on the same top-k) and
# attnplug bench --gpu's sparse rows (the kernel alone) in the same run.
set -u
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d1.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p bin && cp -r /tmp/d/bin/* bin/
cd python
export PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin
timeout $(left 240) python3 -m unittest -v test_sglang_dsa > $OUT/dsa.log 2>&1; echo "dsa rc=$? at $(( $(date +%s) - S ))s"
grep -E "^Ran|^OK|^FAILED|rel err" $OUT/dsa.log
grep -A30 "^FAIL:\|^ERROR:" $OUT/dsa.log | head -60
timeout $(left 330) python3 -c "
from attnplug_testing import bench
proc, tmp, addr = bench._start_server('../bin/attnplug')
try:
    bench.sparse_paths_main(addr)
finally:
    proc.terminate()
" > $OUT/pybench-sparse.txt 2>&1; echo "pybench rc=$? at $(( $(date +%s) - S ))s"
tail -8 $OUT/pybench-sparse.txt
timeout $(left 400) ../bin/attnplug bench --gpu --only sparse --plugin-dir ../bin/plugins > $OUT/bench-sparse.txt 2>&1; echo "bench rc=$? at $(( $(date +%s) - S ))s"
grep -E "sparse (bf16|fp8) h(16|128) b16" $OUT/bench-sparse.txt | cut -c1-150
timeout $(left 590) python3 -m unittest test_sglang_backend.BackendGPUTest > $OUT/dense.log 2>&1; echo "dense rc=$? at $(( $(date +%s) - S ))s"
grep -E "^Ran|^OK|^FAILED" $OUT/dense.log
grep -A20 "^FAIL:\|^ERROR:" $OUT/dense.log | head -30
echo "call1 done at $(( $(date +%s) - S ))s"
