#!/bin/bash
# The committed build on an H200, in four calls made back to back on one warm
# machine (20:51-20:53 UTC), each carrying .device/s57f.tar.xz (d972f1b's
# build: the kernels, their images and the Python of 5bf88bb; the Go since
# changes only engine/listen.go's log order). As run, one call a block.
set -u
mkdir -p /tmp/d && { [ -d /tmp/d/s57f ] || tar -C /tmp/d -xJf .device/s57f.tar.xz; }
D=/tmp/d/s57f B=$D/bin
export ATTNPLUG_REQUIRE_GPU=1
mkdir -p bin && cp -r $B/* bin/

# 1. attnplug bench --gpu --json --plot: every row, torch beside it, the goals.
timeout 370 $B/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $B/plugins > $OUT/bench.json 2> $OUT/bench.err  # bench.err came back empty

# 2. The Python bench: 61-layer steps through the class in a graph, eager layers, each path beside torch.
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout 290 python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $OUT/pybench.txt 2>&1)

# 3. The checks from the committed images (no NVRTC), and the Python GPU suites.
export ATTNPLUG_FIRST_USE_PLUGINS=$D/bin/plugins ATTNPLUG_ACME_BIN=$D/acme/attnplug-backend-acme_mla
(cd launch/cudaexec && timeout 40 $D/cudaexec.test -test.count=1 > $OUT/cudaexec.log 2>&1)
(cd cuda && timeout 40 $D/cuda.test -test.count=1 >> $OUT/cudaexec.log 2>&1)
(cd internal/gpucheck && timeout 150 $D/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestFirstUse|TestHostAcrossASwap' \
  -test.timeout 145s > $OUT/gpucheck.log 2>&1)
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout 240 python3 -m unittest -v \
  test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $OUT/python.log 2>&1)

# 4. Each path through a real attnplug serve, and an eager layer by parts.
bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false 2> /tmp/serve.err &
SP=$!; sleep 3
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=. timeout 120 python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock > $OUT/paths.txt 2>&1)
kill $SP
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=.:testing timeout 90 python3 ../docs/bench/h100-2026-12-06-fp8-seesaw/eager_parts.py ../bin/attnplug > $OUT/eager_parts.txt 2>&1)
