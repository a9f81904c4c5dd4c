# Sourced by the prepared device calls under docs/bench (after they set T,
# the call's seconds): its clock, and a variant's checks in parallel parts.
#   at        the seconds since the call began;
#   left N    the seconds until N into the call (at least 1);
#   lim N     at most N seconds, and none past 15 s before T.
S0=$(date +%s)
at() { echo "$(( $(date +%s) - S0 ))s"; }
left() { local x=$(( $1 - ($(date +%s) - S0) )); [ $x -lt 1 ] && x=1; echo $x; }
lim() { local x=$(left $((T - 15))); [ $x -gt $1 ] && x=$1; echo $x; }

# unpack N R: the archive bundle.sh built, .device/N.tar.xz, into /tmp/e,
# with E (/tmp/e/N), D (its committed build) and B (that build's bin/);
# the GPU's name, driver and clock in R/smi.txt and the archive's revision
# in R/rev (R made anew); ATTNPLUG_REQUIRE_GPU set. A broken archive ends
# the call.
unpack() {
  rm -rf $2 && mkdir -p $2
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $2/smi.txt
  rm -rf /tmp/e && mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/$1.tar.xz || exit 1
  E=/tmp/e/$1 D=/tmp/e/$1/fr B=/tmp/e/$1/fr/bin; cp $E/rev $2/rev
  echo "unpacked at $(at)"
  export ATTNPLUG_REQUIRE_GPU=1
}

# variant_images V: V's images built by its gen (nvcc; within lim 200)
# into /tmp/imgV and, with gen's log, as $OUT/imagesV.tar.gz; the
# registers and stack of its Hopper decode entries (cuobjdump) printed.
variant_images() {
  local v=$1
  rm -rf /tmp/img$v && mkdir -p /tmp/img$v
  ATTNPLUG_CACHE_DIR=/tmp/cache-gen$v timeout $(lim 200) $E/$v/gen -set kernels -out /tmp/img$v > /tmp/gen$v.log 2>&1; echo "gen $v rc=$? at $(at)"
  cuobjdump -res-usage /tmp/img$v/mla_decode_sm90.sm_90a.cubin 2>&1 | grep -A1 -E "Function mla_(decode|sparse)_(fp8_)?(wg16|wg64|ss64)\b" | grep -o "Function [a-z0-9_]*\|REG:[0-9]*\|STACK:[0-9]*" | paste - - -
  cp /tmp/gen$v.log /tmp/img$v/GEN.log; tar -C /tmp/img$v -czf $OUT/images$v.tar.gz .
}

# seesaw_ptxas V SRC: SRC, a mla_decode_sm90.cu, compiled by nvcc for
# sm_90a with the headers of the tree (within lim 150) into
# /tmp/m-V.cubin, ptxas's log in /tmp/ptxas-V.log; its registers and
# spills of the four seesaw entries and its count of C75xx warnings
# printed.
seesaw_ptxas() {
  local v=$1 src=$2 f
  (cd devkernels && { cat tile.cuh; echo; cat sm90.cuh; echo; cat mla_common.cuh; echo; cat $src; } > /tmp/m-$v.cu)
  timeout $(lim 150) nvcc -arch=sm_90a -cubin -std=c++17 -lineinfo -Xptxas -v -o /tmp/m-$v.cubin /tmp/m-$v.cu > /tmp/ptxas-$v.log 2>&1
  echo "== $v nvcc rc=$?"
  for f in mla_decode_ss64 mla_sparse_ss64 mla_decode_fp8_ss64 mla_sparse_fp8_ss64; do
    echo "$f: $(grep -A4 -E "Compiling entry function '$f'" /tmp/ptxas-$v.log | grep -E "spill|Used" | tr -s ' ' | tr '\n' ' ')"; done
  echo "C75xx warnings: $(grep -cE 'C75[0-9][0-9]' /tmp/ptxas-$v.log)"
}

# checks V BIN OUT LIMIT [EXTRA]: runs BIN, a gpucheck test binary, from
# internal/gpucheck once for each part, all at once: part i runs the tests
# ${runs[i]} under ${pre[i]} (nothing, or compute-sanitizer), -test.short,
# within lim LIMIT, its log /tmp/V-i.log. Then writes OUT: each part's
# results, its lines matching EXTRA, its largest rel_err, then the first
# failures with their context; and prints it.
checks() {
  local v=$1 bin=$2 out=$3 limit=$4 extra=${5:-} p pids=()
  for p in "${!runs[@]}"; do
    (cd internal/gpucheck && timeout $(lim $limit) ${pre[$p]} $bin -test.v -test.count=1 -test.short \
      -test.run "${runs[$p]}" -test.timeout $((limit - 5))s > /tmp/$v-$p.log 2>&1; echo "$v checks $p rc=$? at $(at)") &
    pids+=($!)
  done
  wait "${pids[@]}"
  for p in "${!runs[@]}"; do echo "== ${pre[$p]} gpucheck $v ${runs[$p]}"
    grep -hE "^(--- |FAIL|ok|PASS|panic)|ERROR SUMMARY" /tmp/$v-$p.log | cut -c1-300
    [ -z "$extra" ] || grep -hE "$extra" /tmp/$v-$p.log | cut -c1-300
    awk '{for(i=1;i<NF;i++) if($i=="rel_err") print $(i+1)}' /tmp/$v-$p.log | sort -g | tail -1 | sed 's/^/largest rel_err: /'
  done > $out
  grep -h -B3 -A20 -- "--- FAIL" /tmp/$v-*.log | cut -c1-400 | head -60 >> $out
  cat $out
}

# committed_tests D R: the committed build's GPU test binaries in D
# (cudaexec, cuda, then gpucheck's tests of every body, -test.short), each
# within lim, their logs in R and the totals printed.
committed_tests() {
  local D=$1 R=$2
  (cd launch/cudaexec && timeout $(lim 40) $D/cudaexec.test -test.count=1 > $R/cudaexec.log 2>&1; echo "cudaexec rc=$?")
  (cd cuda && timeout $(lim 40) $D/cuda.test -test.count=1 >> $R/cudaexec.log 2>&1; echo "cuda rc=$?")
  (cd internal/gpucheck && timeout $(lim 150) $D/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestSharedMemoryOfTheEntries|TestInProcessBackendOnDevice|TestMLADecodeRandom|TestSparseAndFP8|TestPrefillMethods|TestPrefixChunks|TestDecodeStepGraph|TestScheduleOnDevice|TestMMASyncWideOnHopper|TestNarrowWGMMAOnHopper|TestFirstUse|TestHostAcrossASwap' \
    -test.timeout 145s > $R/gpucheck.log 2>&1; echo "gpucheck rc=$? at $(at)")
  grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)" $R/gpucheck.log $R/cudaexec.log | sort | uniq -c
}

# committed_checks D R: the committed build's other checks, bin/ holding
# its host and plugins and D its test binaries, each within lim: its 16-row
# body, graph step and sparse/FP8 under memcheck (beside the Python GPU
# suites), every path through a real attnplug serve, an eager layer by
# parts, the Python bench; their logs in R, the totals printed, then R as
# $OUT/out.tar.gz.
committed_checks() {
  local D=$1 R=$2 mp sp
  (cd internal/gpucheck && timeout $(lim 150) compute-sanitizer --tool memcheck --error-exitcode 3 $D/gpucheck.test -test.v -test.count=1 -test.short \
    -test.run 'TestNarrowWGMMAOnHopper|TestDecodeStepGraph|TestSparseAndFP8' -test.timeout 145s > $R/memcheck.log 2>&1; echo "memcheck rc=$? at $(at)") &
  mp=$!
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin timeout $(lim 200) python3 -m unittest -v \
    test_sglang_dsa test_sglang_backend.BackendGPUTest test_device test_device_tma test_bench test_vendor_sglang > $R/python.log 2>&1; echo "python rc=$? at $(at)")
  wait $mp
  bin/attnplug serve --listen unix:///tmp/ap.sock --metrics-listen "" --match-hardware=false 2> /tmp/serve.err &
  sp=$!; sleep 3
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=. timeout $(lim 100) python3 -m attnplug.bench --gpu --address unix:///tmp/ap.sock > $R/paths.txt 2>&1; echo "paths rc=$? at $(at)")
  kill $sp
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=.:testing timeout $(lim 80) python3 ../docs/bench/h100-2026-12-06-fp8-seesaw/eager_parts.py ../bin/attnplug > $R/eager_parts.txt 2>&1; echo "eager parts rc=$? at $(at)")
  (cd python && PYTHONUNBUFFERED=1 PYTHONPATH=testing timeout $(lim 240) python3 -m attnplug_testing.bench --gpu --attnplug ../bin/attnplug > $R/pybench.txt 2>&1; echo "pybench rc=$? at $(at)")
  grep -hE "^(--- FAIL|FAIL|ok|PASS|panic)|ERROR SUMMARY" $R/memcheck.log | sort | uniq -c
  tail -4 $R/python.log
  tar -C $R -czf $OUT/out.tar.gz .
}

# warm_n: N, the committed fa3 and dsa plugins ($B/plugins), copied to
# /tmp/e/N/plugins, and their code through NVRTC into the cache by an
# untimed bench row, in the background (its pid in wN), so that both sides
# of an A/B run NVRTC's code.
warm_n() {
  mkdir -p /tmp/e/N/plugins && cp $B/plugins/attnplug-backend-fa3 $B/plugins/attnplug-backend-dsa /tmp/e/N/plugins/
  (timeout $(lim 150) $B/attnplug bench --gpu --python "" --only h128_b16_s4096 --plugin-dir /tmp/e/N/plugins > /tmp/warmN.log 2>&1; echo "N compiled rc=$? at $(at)") &
  wN=$!
}

# ab_rounds V ROWS REST: up to five interleaved rounds of bench --gpu
# --json over ROWS, N (warm_n's plugins) then V ($E/V/plugins), while more
# than REST seconds are left; the rounds in $R/ab and their table
# (abtable.py N V) in $OUT/ab.txt, printed.
ab_rounds() {
  local v=$1 rows=$2 rest=$3 round w dir
  rm -rf /tmp/ab && mkdir -p /tmp/ab
  for round in 1 2 3 4 5; do
    for w in N $v; do
      [ $(left $T) -gt $rest ] || break 2
      dir=/tmp/e/N/plugins; [ $w = $v ] && dir=$E/$v/plugins
      timeout $(lim 120) $B/attnplug bench --gpu --json --python "" --only "$rows" --plugin-dir $dir \
        > /tmp/ab/ab-$w-$round.json 2> /tmp/err-$w; echo "$w $round rc=$? at $(at)"
    done
  done
  cp -r /tmp/ab $R/ab
  python3 docs/bench/h100-2026-12-06-producer/abtable.py N $v > $OUT/ab.txt; cat $OUT/ab.txt
}

# The seesaw's rows, which the A/Bs of its variants time.
SEESAW_ROWS="h128_b16,h128_b64,h128_b128,h128_ragged64,h16_extend_b16,h16_extend_b4,sparse bf16 h128,sparse fp8 h128 b16,fp8 decode h128"
