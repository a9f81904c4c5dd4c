#!/bin/bash
# Session 55, call 7: racecheck over the seesaw's two hand-offs alone.
cd docs/bench/h100-2026-12-06-combine && nvcc -arch=sm_90a -lineinfo -o /tmp/patterns racecheck-patterns.cu 2>&1 | tail -3
/tmp/patterns
compute-sanitizer --tool racecheck /tmp/patterns > $OUT/racecheck-patterns.log 2>&1; echo "racecheck rc=$?"
grep -E "Race reported|RACECHECK SUMMARY|hazards\]" $OUT/racecheck-patterns.log | cut -c1-220 | head -20
compute-sanitizer --tool synccheck /tmp/patterns 2>&1 | tail -2
