#!/bin/bash
# The 64-row body with a producer warpgroup over the FP8 caches, next forms
# (producer-next.patch), in eight builds: N1-N4 issue tile t + 1's S behind
# tile t's P V (PC_AHEAD=1) with P from shared memory; F1-F4 keep FlashMLA's
# order in warpgroup 0 (S, softmax, P V, one group in flight, PC_AHEAD=0).
# ptxas (nvcc) of each first. Of the builds whose setmaxnreg ptxas honours
# (no C7507) and whose wgmmas are not serialised (serial.awk: at most an
# eighth of the HGMMAs with a wait before the next), the one with the fewest spilled
# bytes of each order is checked (float64, NVRTC, outputs poisoned) and
# timed against A (the committed plugins), interleaved, three rounds; the
# faster then gets compute-sanitizer memcheck and synccheck, its images
# (gen) and ncu's warp states and stall samples (sparse fp8 h128 b64).
set -u
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
NAME=pcs
mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/$NAME.tar.xz || exit 1
E=/tmp/e/$NAME
export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache
(cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat mla_decode_sm90.cu; } > /tmp/m.cu)
# r0 r1 r2 sunroll psmem ahead: as bundle.sh built them
declare -A CFG=([N1]="208 168 128 0 1 1" [N2]="216 160 128 0 1 1" [N3]="216 160 128 1 1 1" [N4]="200 168 136 0 1 1"
                [F1]="192 160 152 0 0 0" [F2]="192 160 152 1 0 0" [F3]="200 160 144 0 1 0" [F4]="208 160 136 1 0 0")
ALL="N1 N2 N3 N4 F1 F2 F3 F4"
# Each build's binaries: B's (bundle), its kernel source's PC_* defaults rewritten in place.
python3 docs/bench/h100-2026-12-06-producer/mkvariants.py $E $(for V in $ALL; do echo "$V:${CFG[$V]// //}"; done) || exit 1
for V in $ALL; do
  read a b c u ps ah <<< "${CFG[$V]}"
  (timeout 240 nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -DPC_REG0=$a -DPC_REG1=$b -DPC_REG2=$c \
    -DPC_SUNROLL=$u -DPC_PSMEM=$ps -DPC_AHEAD=$ah -o /tmp/m-$V.cubin /tmp/m.cu > /tmp/ptxas-$V.log 2>&1
   echo "nvcc $V rc=$? at $(at)") &
done
wait
declare -A SC
for V in $ALL; do
  c7507=$(grep -c C7507 /tmp/ptxas-$V.log)
  sp=$(grep -A2 -E "Compiling entry function 'mla_(decode|sparse)_fp8_pc64'" /tmp/ptxas-$V.log | grep -oE "[0-9]+ bytes spill stores" | awk '{s+=$1} END {print s+0}')
  cuobjdump -sass -fun mla_sparse_fp8_pc64 /tmp/m-$V.cubin > /tmp/$V.sass 2>/dev/null
  # HGMMAs a WARPGROUP.DEPBAR and then another HGMMA follow at once:
  # serialised (stop 58's builds 74 of 80, the committed seesaw 0 of 68)
  read hg ser <<< "$(awk -f docs/bench/h100-2026-12-06-producer/serial.awk /tmp/$V.sass)"
  echo "$V (${CFG[$V]}): C7507 $c7507, spill stores $sp, HGMMA $hg, serialised $ser, WARPGROUP.DEPBAR $(grep -c WARPGROUP.DEPBAR /tmp/$V.sass), local $(grep -cE 'STL|LDL' /tmp/$V.sass), C7511 $(grep -c 'C7511.*pc64' /tmp/ptxas-$V.log), C7514 $(grep -c 'C7514.*pc64' /tmp/ptxas-$V.log)" | tee -a $OUT/ptxas.log
  if [ "$c7507" = 0 ] && [ "$hg" -gt 0 ] && [ "$ser" -le $(( hg / 8 )) ]; then SC[$V]=$sp; fi
done
grep -hE "C75[0-9][0-9].*pc64" /tmp/ptxas-*.log | sed 's/around line [0-9]*//' | sort | uniq -c | sort -rn | head -8 | tee -a $OUT/ptxas.log
PICK=""
for order in N F; do
  best=""; for V in "${!SC[@]}"; do [ "${V:0:1}" = $order ] || continue; { [ -z "$best" ] || [ "${SC[$V]}" -lt "${SC[$best]}" ]; } && best=$V; done
  [ -n "$best" ] && PICK="$PICK $best"
done
echo "picked:$PICK" | tee -a $OUT/ptxas.log
if [ -z "$PICK" ]; then
  echo "every build ignored setmaxnreg or serialised its wgmmas: no timing"
  for V in $ALL; do echo "=== $V"; grep -B3 -A1 "WARPGROUP.DEPBAR" /tmp/$V.sass | head -24; done > $OUT/depbar.txt
  exit 0
fi
ok=""
for V in $PICK; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout 150 $E/$V/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestDecodeStepGraph' \
    -test.timeout 145s > /tmp/checks-$V.log 2>&1; echo "$V checks (NVRTC) rc=$? at $(at)") &
done
wait
for V in $PICK; do
  { echo "=== $V"; grep -hE "^(--- |FAIL|ok|PASS|panic)" /tmp/checks-$V.log | cut -c1-160 | head -8
    grep -hE "fp8" /tmp/checks-$V.log | cut -c1-200 | head -16
    grep -B2 -A14 -- "--- FAIL" /tmp/checks-$V.log | cut -c1-300 | head -30; } | tee -a $OUT/checks.log
  grep -q "^PASS" /tmp/checks-$V.log && ok="$ok $V"
done
[ -n "$ok" ] || { echo "no build passed its checks: no timing"; exit 0; }
mkdir -p /tmp/ab
ROWS="fp8 decode h128,sparse fp8 h128,h128_b64_s4096"
for round in 1 2 3; do
  [ $(left 330) -gt 50 ] || break
  for v in A $ok; do
    ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 400) $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins \
      > /tmp/ab/ab-$v-$round.json 2> /tmp/err-$v; echo "$v $round rc=$? at $(at)"
    tail -1 /tmp/err-$v | cut -c1-200
  done
done
tar -C /tmp/ab -czf $OUT/ab-json.tar.gz .
python3 docs/bench/h100-2026-12-06-producer/abtable.py A $ok > $OUT/ab.txt; cat $OUT/ab.txt
V=$(tail -1 $OUT/ab.txt | awk '/^fastest/ {print $2}'); V=${V:-${ok# }}; V=${V%% *}
echo "profiled: $V"
mkdir -p /tmp/img && (timeout 300 $E/$V/gen -set kernels -out /tmp/img > /tmp/gen.log 2>&1; echo "gen $V rc=$?" > /tmp/gen.rc) &
GP=$!
for tool in memcheck synccheck; do
  (cd internal/gpucheck && ATTNPLUG_DEVICE_CODE=nvrtc timeout $(left 520) compute-sanitizer --tool $tool $E/$V/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSparseAndFP8' -test.timeout 170s > /tmp/san-$tool.log 2>&1; echo "sanitizer $tool rc=$? at $(at)") &
done
for tool in memcheck synccheck; do while pgrep -f "tool $tool" > /dev/null; do sleep 2; done; done
for tool in memcheck synccheck; do tail -3 /tmp/san-$tool.log; { echo "=== $V: compute-sanitizer --tool $tool"; tail -30 /tmp/san-$tool.log; } >> $OUT/checks.log; done
wait $GP; cat /tmp/gen.rc; tail -2 /tmp/gen.log
cp /tmp/gen.log /tmp/img/GEN.log; tar -C /tmp/img -czf $OUT/images-$V.tar.gz .
if [ $(left 540) -gt 60 ]; then
  timeout $(left 560) ncu --clock-control none --target-processes all -k regex:mla_sparse_fp8_pc64 --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --import-source yes -o /tmp/prof \
    env ATTNPLUG_DEVICE_CODE=nvrtc $E/attnplug bench --gpu --python "" --only "sparse fp8 h128 b64" --plugin-dir $E/$V/plugins > /tmp/ncu.log 2>&1
  echo "ncu rc=$? at $(at)"; tail -3 /tmp/ncu.log
  ncu -i /tmp/prof.ncu-rep --print-details all --section WarpStateStats --section SpeedOfLight > $OUT/ncu-details.txt 2>&1
  ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > $OUT/sass.csv.gz
  grep -E "Duration|Throughput|Warp Cycles|Stall" $OUT/ncu-details.txt | head -16
fi
ls -la $OUT
echo "done at $(at)"
