#!/bin/bash
# Prepared, not run. Q: the dense FP8 plans of flash_mla_with_kvcache in
# sglang's FlashMLA numerics (q.patch): the entry rounds the queries to e4m3
# as torch's cast does and applies no layer scale (sglang's descales are
# 1), where the plan binds flashmla_fp8 1; the verification layer's
# reference follows the kernel a plan runs. Checked where it was prepared:
# `make test` with Q's Go and Python changes (its sources aside, whose
# images are stale until this call builds them); Q's sources, and V's with
# Q's, with `make device-syntax` (clang 19's CUDA front end: their C++, not
# the PTX of their asm). Carries .device/nq.tar.xz (bundle.sh: nq/fr the
# committed build; nq/Q with q.patch; nq/VQ with ../2026-12-07-next/v.patch,
# then q.patch). Its parts, each where the seconds left of T allow (call.sh
# [T], T 480 by default), each stopped 15 s before T:
# 1. On the CPU, beside the rest: Q's and VQ's images (gen, nvcc) and
#    cuobjdump's registers and stack of the dense FP8 entries, N (the
#    committed images) and Q.
# 2. Q's checks through NVRTC: TestSparseAndFP8 (its four batches on
#    flashmla's plans, each plan checked to bind flashmla_fp8 1, the other
#    dense FP8 plans 0) with the entries' shared memory; the mma.sync and
#    16-row bodies on Hopper, the in-process backend and the graph step;
#    TestSparseAndFP8 under memcheck. Meanwhile N's code through NVRTC into
#    the cache (an untimed run), so that both sides of the A/B are NVRTC's.
# 3. At least 150 s left: the Python GPU suite's FP8 tests through a real
#    attnplug serve with Q's host and plugins: FlashMLA's numerics against
#    torch's own cast (a layer k_scale of 0.5 left unapplied), and FA3's
#    against float64 of the stored values; then the Python bench's paths
#    planned by flashmla (its fp8 row against torch in FlashMLA's numerics).
# 4. Rounds of bench --gpu over the dense FP8 rows while more than 30 s are
#    left: N and Q planned by flashmla (Q's rounding: its cost), NA and QA
#    by fa3 (unchanged but for the flag).
# Outputs: imagesQ.tar.gz, imagesVQ.tar.gz, abQ.txt, outQ.tar.gz.
set -u
T=${1:-480}
. "$(dirname "$0")/../call-lib.sh"
R=/tmp/resQ
unpack nq $R # E, B

# 1. Images, and the entries' registers.
(for v in Q VQ; do rm -rf /tmp/img$v && mkdir -p /tmp/img$v
   ATTNPLUG_CACHE_DIR=/tmp/cache-gen$v timeout $(lim 200) $E/$v/gen -set kernels -out /tmp/img$v > /tmp/gen$v.log 2>&1; echo "gen $v rc=$? at $(at)"
   cp /tmp/gen$v.log /tmp/img$v/GEN.log; tar -C /tmp/img$v -czf $OUT/images$v.tar.gz .; done
 for v in N Q; do img=devkernels/images; [ $v = Q ] && img=/tmp/imgQ
   for m in mla_decode_sm90.sm_90a mla_decode.sm_90; do echo "== $v $m"
     cuobjdump -res-usage $img/$m.cubin 2>&1 | grep -A1 -E "Function mla_decode_fp8_" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -; done; done) > $R/gen.txt 2>&1 &
genP=$!

# 2. Q's checks, and N compiled.
export ATTNPLUG_CACHE_DIR=/tmp/cache-q ATTNPLUG_DEVICE_CODE=nvrtc
runs=('TestSharedMemoryOfTheEntries|TestSparseAndFP8'
      'TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper|TestInProcessBackendOnDevice|TestDecodeStepGraph'
      'TestSparseAndFP8')
pre=("" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
(timeout $(lim 150) $B/attnplug bench --gpu --python "" --only "fp8 decode h128 b64" --dense-backend flashmla --plugin-dir $B/plugins > /tmp/warmN.log 2>&1; echo "N compiled rc=$? at $(at)") &
wN=$!
checks Q $E/Q/gpucheck-Q.test $R/checks-Q.log 220 "flashmla fp8|fp8 (16|128) heads"
wait $wN
cp /tmp/Q-*.log /tmp/warmN.log $R/

# 3. The Python FP8 tests, through Q's serve.
if [ $(left $T) -ge 150 ]; then
  rm -rf /tmp/binQ /tmp/pyQ && mkdir -p /tmp/binQ/plugins
  cp $B/plugins/* /tmp/binQ/plugins/ && cp $E/Q/plugins/* /tmp/binQ/plugins/ && cp $E/Q/attnplug /tmp/binQ/
  cp -r python /tmp/pyQ && cp -r $E/Q/tree/python/. /tmp/pyQ/
  (cd /tmp/pyQ && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=/tmp/binQ timeout $(lim 150) python3 -m unittest -v \
    test_sglang_backend.BackendGPUTest.test_fp8_pool_flashmla_rounds_the_queries test_sglang_backend.BackendGPUTest.test_fp8_pool_matches_the_reference \
    > $R/python.log 2>&1; echo "python Q rc=$? at $(at)")
  tail -12 $R/python.log
  /tmp/binQ/attnplug serve --listen unix:///tmp/apq.sock --metrics-listen "" --match-hardware=false 2> /tmp/serveQ.err &
  SP=$!; sleep 3
  (cd /tmp/pyQ && PYTHONUNBUFFERED=1 PYTHONPATH=. timeout $(lim 100) python3 -m attnplug.bench --gpu --address unix:///tmp/apq.sock \
    --backend flashmla > $R/pybench-flashmla.txt 2>&1; echo "pybench flashmla rc=$? at $(at)")
  kill $SP; grep -E "^fp8|^decode" $R/pybench-flashmla.txt
fi

# 4. N, Q (flashmla's plans) and NA, QA (fa3's), in rounds.
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3; do
  for v in N Q NA QA; do
    [ $(left $T) -gt 30 ] || break 2
    bin=$B/attnplug dir=$B/plugins be=flashmla
    case $v in Q) bin=$E/Q/attnplug dir=$E/Q/plugins;; NA) be=fa3;; QA) bin=$E/Q/attnplug dir=$E/Q/plugins be=fa3;; esac
    timeout $(lim 90) $bin bench --gpu --json --python "" --only "fp8 decode" --dense-backend $be --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/ab/err-$v-$round; echo "$v $round rc=$? at $(at)"
  done
done
cp -r /tmp/ab $R/ab
{ python3 docs/bench/h100-2026-12-06-producer/abtable.py N Q; python3 docs/bench/h100-2026-12-06-producer/abtable.py NA QA; } > $OUT/abQ.txt 2>&1
cat $OUT/abQ.txt
unset ATTNPLUG_DEVICE_CODE ATTNPLUG_CACHE_DIR
wait $genP; cat $R/gen.txt
tar -C $R -czf $OUT/outQ.tar.gz .
echo "done at $(at)"
