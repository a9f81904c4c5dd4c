#!/bin/bash
# Session 55, call 6: where call 1's racecheck hazards were. compute-sanitizer
# racecheck over the committed build (4b0fa8c, its images), one decode step
# in a graph and the FP8 and sparse checks, each in its own process; the
# kernels named in each hazard, counted.
set -u
S0=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/s55f.tar.xz || exit 1
export ATTNPLUG_REQUIRE_GPU=1
for t in TestDecodeStepGraph TestSparseAndFP8 TestInProcessBackendOnDevice; do
  (cd internal/gpucheck && timeout 200 compute-sanitizer --tool racecheck /tmp/d/s55f/gpucheck.test -test.count=1 -test.short \
    -test.run "^$t\$" -test.timeout 195s > $OUT/racecheck-$t.log 2>&1; echo "$t racecheck rc=$? at $(( $(date +%s) - S0 ))s") &
done
wait
for t in TestDecodeStepGraph TestSparseAndFP8 TestInProcessBackendOnDevice; do
  echo "== $t"; grep -E "RACECHECK SUMMARY|^(PASS|FAIL|ok)" $OUT/racecheck-$t.log
  grep -oE "in function [A-Za-z0-9_]+|(Error|Warning): Race reported between [A-Za-z]+ access" $OUT/racecheck-$t.log | sort | uniq -c | sort -rn | head -12
  grep -m3 -A12 "Race reported" $OUT/racecheck-$t.log | cut -c1-200
  head -c 200000 $OUT/racecheck-$t.log > /tmp/x && mv /tmp/x $OUT/racecheck-$t.log
done
echo "done at $(( $(date +%s) - S0 ))s"
