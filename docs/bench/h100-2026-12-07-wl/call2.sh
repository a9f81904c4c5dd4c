#!/bin/bash
# Call 2: W's images from call 1, ahead of time (no NVRTC). Carries
# .device/w2.tar.xz (the host, every plugin, gpucheck.test, cudaexec.test,
# cuda.test of the tree with those images) and .device/w3.tar.xz (gen of
# the committed sources: W with its comments reworded). (An A/B of C and W
# from their images was cut: the tree and the carried files must stay
# under 64 MiB.)
# - gen's images of the committed sources (images.tar.gz), their SASS and
#   their PTX without line information against call 1's images, which the
#   tree carries (same.txt);
# - cudaexec, cuda; gpucheck's kernel checks from the images, four at once,
#   the fourth under memcheck, then first use through the real plugins and
#   a Host across a swap (checks.log);
# - the Python GPU suites over W's plugins with the time left: the dense
#   and sparse sglang backends in graphs, the launcher, the Python bench's
#   checks (python.log).
# call2.sh [T]: T, the seconds the call may run (300 unless given).
set -u
T=${1:-300}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/w2.tar.xz && tar -C /tmp/e -xJf .device/w3.tar.xz || exit 1
W=/tmp/e/w2
mkdir -p bin && cp -r $W/bin/* bin/
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-w2 ATTNPLUG_FIRST_USE_PLUGINS=$PWD/bin/plugins
unset ATTNPLUG_DEVICE_CODE
(cd launch/cudaexec && timeout 60 $W/cudaexec.test -test.count=1 > /tmp/cudaexec.log 2>&1; echo "cudaexec rc=$? at $(at)")
(cd cuda && timeout 60 $W/cuda.test -test.count=1 >> /tmp/cudaexec.log 2>&1; echo "cuda rc=$? at $(at)")
rm -rf /tmp/img2 && mkdir -p /tmp/img2
(timeout 120 /tmp/e/w3/gen -set kernels -out /tmp/img2 > /tmp/gen.log 2>&1; echo "gen rc=$? at $(at)"
 for f in devkernels/images/*.cubin; do b=$(basename $f)
   cmp -s <(cuobjdump -sass $f) <(cuobjdump -sass /tmp/img2/$b) && echo "same SASS: $b" || echo "SASS DIFFERS: $b"; done
 for f in devkernels/images/*.ptx; do b=$(basename $f)
   cmp -s <(grep -vE '^\s*\.(loc|file)\b' $f) <(grep -vE '^\s*\.(loc|file)\b' /tmp/img2/$b) && echo "same PTX but line information: $b" || echo "PTX DIFFERS: $b"; done
 tar -C /tmp/img2 -czf $OUT/images.tar.gz .) > $OUT/same.txt 2>&1 &
gpid2=$!
rm -f /tmp/checks-*.log; pids=""
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
for part in 0 1 2 3; do
  (cd internal/gpucheck && timeout 150 ${pre[$part]} $W/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run "${runs[$part]}" -test.timeout 140s > /tmp/checks-$part.log 2>&1; echo "W checks $part rc=$? at $(at)") &
  pids="$pids $!"
done
wait $pids $gpid2
cat $OUT/same.txt
(cd internal/gpucheck && timeout 100 $W/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestFirstUse|TestHostAcrossASwap|TestInProcessBackendOnDevice' -test.timeout 95s > /tmp/checks-4.log 2>&1; echo "W checks 4 rc=$? at $(at)")
{ grep -hE "^(--- |FAIL|ok|PASS|panic)" /tmp/cudaexec.log | sort | uniq -c
  for part in 0 1 2 3 4; do echo "== ${pre[$part]:-} gpucheck (W's images) ${runs[$part]:-TestFirstUse|TestHostAcrossASwap|TestInProcessBackendOnDevice}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY|NVRTC|nvrtc" /tmp/checks-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/checks-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done
  grep -h -B3 -A20 -- "--- FAIL" /tmp/checks-*.log /tmp/cudaexec.log | cut -c1-400 | head -60; } > $OUT/checks.log
cat $OUT/checks.log
(cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout $(left $((T - 5))) python3 -m unittest -v \
  test_sglang_backend.BackendGPUTest test_sglang_dsa test_device test_bench > $OUT/python.log 2>&1; echo "python rc=$? at $(at)")
grep -E "^Ran|^OK|^FAILED" $OUT/python.log; grep -A25 "^FAIL:\|^ERROR:" $OUT/python.log | head -50
echo "done at $(at)"
