#!/bin/bash
# Prepared for the next session's first call, not run (call2.sh could not
# start: this session's device time was spent). Carries .device/nx3.tar.xz:
# - C: the committed build (835e42a, W with call 1's images): the host, the
#   fa3 and dsa plugins, gpucheck.test, cudaexec.test, cuda.test;
# - K: gen of comments.patch's sources (the late wait said in the comments);
# - Q: comments.patch and q.patch (load_queries steps its source pointers,
#   selects rather than branches, and skips the row test where its passes
#   cover the rows exactly): gen, fa3 and dsa plugins, gpucheck-Q.test.
# call-next.sh [T]: T, the seconds the call may run (560 unless given).
# 1. gen of K and Q (imagesK.tar.gz, imagesQ.tar.gz); K's cubins' SASS and
#    PTX without line information against the committed images (in out.tar.gz:
#    same.txt), which the tree carries;
# 2. C's checks from the committed images, no NVRTC, four at once, the
#    fourth under memcheck; cudaexec, cuda, first use through the real
#    plugin, a Host across a swap; then Q's checks through NVRTC the same way;
# 3. on an H200, the whole bench --gpu --json --plot of C (bench.json,
#    bench.svg): issue 39's run;
# 4. interleaved rounds of bench --gpu over the decode rows: C from its
#    images, N (C's sources) and Q through NVRTC (ab.txt).
set -u
T=${1:-560}
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
R=/tmp/res; rm -rf $R && mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/smi.txt
rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/nx3.tar.xz || exit 1
E=/tmp/e/nx3
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache-nx3 ATTNPLUG_FIRST_USE_PLUGINS=$E/C/plugins
unset ATTNPLUG_DEVICE_CODE
rm -rf /tmp/imgK /tmp/imgQ && mkdir -p /tmp/imgK /tmp/imgQ
(timeout 200 $E/K/gen -set kernels -out /tmp/imgK > /tmp/genK.log 2>&1; echo "gen K rc=$? at $(at)"
 timeout 200 $E/Q/gen -set kernels -out /tmp/imgQ > /tmp/genQ.log 2>&1; echo "gen Q rc=$? at $(at)"
 for f in devkernels/images/*.cubin; do b=$(basename $f)
   cmp -s <(cuobjdump -sass $f) <(cuobjdump -sass /tmp/imgK/$b) && echo "same SASS: $b" || echo "SASS DIFFERS: $b"; done
 for f in devkernels/images/*.ptx; do b=$(basename $f)
   cmp -s <(grep -vE '^\s*\.(loc|file)\b' $f) <(grep -vE '^\s*\.(loc|file)\b' /tmp/imgK/$b) && echo "same PTX but line information: $b" || echo "PTX DIFFERS: $b"; done
 cuobjdump -res-usage /tmp/imgQ/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_decode_(wg16|wg64|ss64|fp8_wg16)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
 tar -C /tmp/imgK -czf $OUT/imagesK.tar.gz . ; tar -C /tmp/imgQ -czf $OUT/imagesQ.tar.gz .) > $R/same.txt 2>&1 &
gpid=$!
runs=('TestScheduleOnDevice|TestDecodeStepGraph|TestMMASyncWideOnHopper' 'TestMLADecodeRandom|TestNarrowWGMMAOnHopper'
      'TestSparseAndFP8|TestSharedMemoryOfTheEntries|TestPrefillMethods|TestPrefixChunks' 'TestDecodeStepGraph|TestMMASyncWideOnHopper')
pre=("" "" "" "compute-sanitizer --tool memcheck --error-exitcode 3")
checks() { # checks NAME BINARY: four at once, then a summary in $R/checks-NAME.log
  local pids="" part
  for part in 0 1 2 3; do
    (cd internal/gpucheck && timeout 150 ${pre[$part]} $2 -test.v -test.count=1 -test.short \
      -test.run "${runs[$part]}" -test.timeout 140s > /tmp/$1-$part.log 2>&1; echo "$1 checks $part rc=$? at $(at)") &
    pids="$pids $!"
  done
  wait $pids
  for part in 0 1 2 3; do echo "== ${pre[$part]} gpucheck $1 ${runs[$part]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|of 60 batches|ERROR SUMMARY" /tmp/$1-$part.log | cut -c1-260
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/$1-$part.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'; done > $R/checks-$1.log
  grep -h -B3 -A20 -- "--- FAIL" /tmp/$1-*.log | cut -c1-400 | head -60 >> $R/checks-$1.log
}
checks C $E/gpucheck.test
(cd launch/cudaexec && timeout 60 $E/cudaexec.test -test.count=1 > /tmp/cudaexec.log 2>&1; echo "cudaexec rc=$? at $(at)")
(cd cuda && timeout 60 $E/cuda.test -test.count=1 >> /tmp/cudaexec.log 2>&1; echo "cuda rc=$? at $(at)")
(cd internal/gpucheck && timeout 100 $E/gpucheck.test -test.v -test.count=1 -test.short \
  -test.run 'TestFirstUse|TestHostAcrossASwap|TestInProcessBackendOnDevice' -test.timeout 95s > /tmp/C-4.log 2>&1; echo "C checks 4 rc=$? at $(at)")
{ grep -hE "^(--- |FAIL|ok|PASS|panic)" /tmp/cudaexec.log /tmp/C-4.log | sort | uniq -c; grep -h -B3 -A20 -- "--- FAIL" /tmp/C-4.log /tmp/cudaexec.log | head -40; } >> $R/checks-C.log
cat $R/checks-C.log
ATTNPLUG_DEVICE_CODE=nvrtc checks Q $E/gpucheck-Q.test
cat $R/checks-Q.log
wait $gpid; cat $R/same.txt
h200=0; grep -q H200 $R/smi.txt && h200=1
if [ $h200 = 1 ]; then
  timeout $(left $((T - 150))) $E/attnplug bench --gpu --json --plot $OUT/bench.svg --plugin-dir $E/C/plugins > $OUT/bench.json 2> /tmp/bench.err
  echo "bench rc=$? at $(at)"; tail -3 /tmp/bench.err
fi
ROWS="_ragged64,h16_b1_s,h128_b1_s,h16_b16_s4096,h16_b16_s16384,h16_b64_s4096,h128_b16_s4096,h128_b64_s4096,_extend_b16,fp8 decode h16 b16,sparse fp8 h128 b16,sparse bf16 h16 b16"
rm -rf /tmp/ab && mkdir -p /tmp/ab
for round in 1 2 3 4; do
  for v in C N Q; do
    [ $(left $((T - 15))) -gt 15 ] || break 2
    dir=$E/C/plugins nv=nvrtc; [ $v = Q ] && dir=$E/Q/plugins; [ $v = C ] && nv=""
    ATTNPLUG_DEVICE_CODE=$nv timeout $(left $((T - 10))) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $dir \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
  done
done
cp -r /tmp/ab $R/ab
python3 docs/bench/h100-2026-12-06-producer/abtable.py N Q C > $OUT/ab.txt; cat $OUT/ab.txt
tar -C $R -czf $OUT/out.tar.gz .
echo "done at $(at)"
