#!/bin/bash
# G3: G2 (committed, 2e55ebc) frees the last tile's stage before it waits for
# the next tile where that tile has not landed, and queues the next S^T behind
# the last O^T product only where it has (g3.patch: the sparse bf16 batch of
# 128 lost 1.2% to G2, its consumer holding the stage while it waited).
# Carries .device/gz.tar.xz: N, the committed build (fr's host, 2e55ebc's fa3
# and dsa plugins and gpucheck.test, with G2's images); G, the same with
# g3.patch: gen, fa3 and dsa plugins, gpucheck-G.test. call3.sh [T]: T, the
# seconds the call may run (300).
# 1. G2's committed images checked (no NVRTC), the 16-row body and the graph
#    step under memcheck; gen of G3;
# 2. G3's checks through NVRTC, the 16-row body and the graph step under
#    memcheck and synccheck;
# 3. interleaved rounds of bench --gpu, N and G3 both through NVRTC (ab.txt).
set -u
T=${1:-300}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/gz.tar.xz || exit 1
E=/tmp/e/gz
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-gz
unset ATTNPLUG_DEVICE_CODE
rm -rf /tmp/imgG && mkdir -p /tmp/imgG
(timeout 200 $E/G/gen -set kernels -out /tmp/imgG > /tmp/genG.log 2>&1; echo "gen G3 rc=$? at $(at)"
 cuobjdump -res-usage /tmp/imgG/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_(decode|sparse)_(fp8_)?(wg16)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
 tar -C /tmp/imgG -czf $OUT/imagesG.tar.gz .) > $R/gen.txt 2>&1 &
gpid=$!
# The committed images (no NVRTC) and G3 (NVRTC), no test twice at once.
(cd internal/gpucheck && timeout 150 $E/N/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestScheduleOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMMASyncWideOnHopper' \
  -test.timeout 145s > $R/N-images.log 2>&1; echo "N images rc=$? at $(at)"
 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 $E/N/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestNarrowWGMMAOnHopper|TestDecodeStepGraph' -test.timeout 95s >> $R/N-images.log 2>&1; echo "N images memcheck rc=$? at $(at)") &
nid=$!
runs=('TestNarrowWGMMAOnHopper|TestDecodeStepGraph' 'TestNarrowWGMMAOnHopper|TestDecodeStepGraph' 'TestNarrowWGMMAOnHopper|TestDecodeStepGraph'
      'TestScheduleOnDevice|TestMLADecodeRandom|TestSparseAndFP8')
pre=("" "compute-sanitizer --tool memcheck --error-exitcode 3" "compute-sanitizer --tool synccheck --error-exitcode 3" "")
part() { (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 170 ${pre[$1]} $E/G/gpucheck-G.test -test.v -test.count=1 -test.short \
      -test.run "${runs[$1]}" -test.timeout 165s > /tmp/G-$1.log 2>&1; echo "G3 checks $1 rc=$? at $(at)"); }
part 0; wait $nid; part 1 & p1=$!; part 3 & p3=$!; wait $p1; part 2; wait $p3
grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" $R/N-images.log | cut -c1-300
awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' $R/N-images.log | sort -g | tail -1 | sed 's/^/N images largest rel_err: /'
for p in 0 1 2 3; do echo "== ${pre[$p]} gpucheck G3 ${runs[$p]}"
  grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/G-$p.log | cut -c1-300
  awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/G-$p.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done > $R/checks-G.log
grep -h -B3 -A20 -- "--- FAIL" /tmp/G-*.log $R/N-images.log | cut -c1-400 | head -60 >> $R/checks-G.log
cat $R/checks-G.log
wait $gpid; cat $R/gen.txt
ROWS="h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h16_b128_s4096,sparse bf16 h16,fp8 decode h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3 4; do
  for v in N G; do
    [ $(left $((T - 15))) -gt 20 ] || break 2
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left $((T - 10))) $E/N/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
cp -r /tmp/ab $R/ab
python3 docs/bench/h100-2026-12-06-producer/abtable.py N G > $OUT/ab.txt; cat $OUT/ab.txt
tar -C $R -czf $OUT/out.tar.gz .
echo "done at $(at)"
