#!/bin/bash
# Session 56, call 2 (on call 1's machine, still warm, 30 s later): call 1's
# checks had passed but for the three-waves case of TestDecodeMergesOrphans,
# whose hand-cut plan was refused by the host (its metadata had no Schedule
# to check against: a fault of the test's cut, not of a kernel), so call 1
# stopped before its timing. B's images (gen), and A (the committed plugins,
# 56302e7) against B, two rounds interleaved, NVRTC builds both.
[ -d /tmp/e/s56a ] || { mkdir -p /tmp/e && tar -C /tmp/e -xJf .device/s56a.tar.xz; }; E=/tmp/e/s56a; export ATTNPLUG_REQUIRE_GPU=1 ATTNPLUG_CACHE_DIR=/tmp/cache; S0=$(date +%s); mkdir -p /tmp/img; (timeout 200 $E/gen-B -set kernels -out /tmp/img > /tmp/gen.log 2>&1; echo "gen rc=$? at $(( $(date +%s) - S0 ))s"; cp /tmp/gen.log /tmp/img/GEN.log; tar -C /tmp/img -czf $OUT/images-B.tar.gz .) & ROWS="h16_b1_,h128_b1_,sparse bf16 h16 b1,sparse bf16 h128 b1,sparse fp8 h16 b1,sparse fp8 h128 b1,h16_b16_s4096,h128_b16_s4096"; for r in 1 2; do for v in A B; do ATTNPLUG_DEVICE_CODE=nvrtc timeout 120 $E/attnplug bench --gpu --json --python "" --only "$ROWS" --plugin-dir $E/$v/plugins > $OUT/ab-$v-$r.json 2>/tmp/err; echo "$v $r rc=$? at $(( $(date +%s) - S0 ))s"; tail -1 /tmp/err | cut -c1-150; done; done; wait; python3 .device/abtable.py $OUT | tee $OUT/ab.txt
