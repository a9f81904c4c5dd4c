#!/bin/bash
# Call 1: the Go GPU tests (make test-gpu's packages), attnplug run --device cuda
# on FP8 lines through fa3 and acme, and what the Python tests need.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/dev.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
python3 -c 'import grpc, google.protobuf as p; print("grpc", grpc.__version__, "protobuf", p.__version__)' 2>&1 | tail -1
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_FIRST_USE_PLUGINS=/tmp/d/bin/plugins
R=$PWD
(cd launch/cudaexec && timeout 100 /tmp/d/cudaexec.test -test.v -test.count=1 > $OUT/cudaexec.log 2>&1; echo "cudaexec rc=$?")
(cd cuda && timeout 100 /tmp/d/cuda.test -test.v -test.count=1 > $OUT/cuda.log 2>&1; echo "cuda rc=$?")
(cd internal/gpucheck && timeout 330 /tmp/d/gpucheck.test -test.v -test.count=1 -test.timeout 320s > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$?")
echo "tests done at $(( $(date +%s) - S ))s"
grep -hE "^(--- (FAIL|PASS|SKIP)|FAIL|ok|PASS|panic)" $OUT/cudaexec.log $OUT/cuda.log $OUT/gpucheck.log | cut -c1-160
grep -hB2 -A12 -- "--- FAIL" $OUT/*.log | head -60
# attnplug run --device cuda: an FP8 decode line through fa3 (an FP8 kernel) and
# through acme (a bf16 catalog: no plan, never the bf16 kernel on an FP8 cache).
mkdir -p /tmp/d/all && cp /tmp/d/bin/plugins/* /tmp/d/acme/* /tmp/d/all/
cat > /tmp/lines.jsonl <<'L'
{"backend":"fa3","forward_mode":"DECODE","seq_lens":[1000,2000],"runtime":{"kv_cache_dtype":"fp8_e4m3"}}
{"backend":"fa3","forward_mode":"DECODE","seq_lens":[1000,2000]}
{"backend":"acme_mla","forward_mode":"DECODE","seq_lens":[1000,2000],"runtime":{"kv_cache_dtype":"fp8_e4m3"}}
{"backend":"acme_mla","forward_mode":"DECODE","seq_lens":[1000,2000]}
L
timeout 120 /tmp/d/bin/attnplug run --plugin-dir /tmp/d/all --device cuda --strict --random-tensors --heads 16 --kv-lora-rank 512 --qk-nope-head-dim 128 --qk-rope-head-dim 64 --v-head-dim 128 < /tmp/lines.jsonl > $OUT/run.jsonl 2> $OUT/run.err; echo "run rc=$?"
cut -c1-400 $OUT/run.jsonl; tail -5 $OUT/run.err
echo "call1 done at $(( $(date +%s) - S ))s"
