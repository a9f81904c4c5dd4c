#!/bin/bash
# Call 6: DeepSeek-V3.2's MTP draft steps on the plugin
# (AttnplugDSAMultiStepDraftBackend): test_sglang_dsa whole on the GPU, its
# DSAGPUTest checking the draft steps eager and from the draft's CUDA graph
# in both protocols (bf16 and FP8 pools) against float64, outputs poisoned;
# and the dense suite's draft test beside it.
set -u
S=$(date +%s)
mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/d4.tar.xz || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p bin && cp -r /tmp/d/bin/* bin/
cd python
export PYTHONUNBUFFERED=1 PYTHONPATH=testing:tests ATTNPLUG_BIN=$PWD/../bin
timeout 300 python3 -m unittest -v test_sglang_dsa test_sglang_backend.BackendGPUTest.test_draft_steps_match_the_reference > $OUT/dsa-drafts.log 2>&1; echo "python rc=$? at $(( $(date +%s) - S ))s"
grep -E "^Ran|^OK|^FAILED|rel err" $OUT/dsa-drafts.log
grep -A30 "^FAIL:\|^ERROR:" $OUT/dsa-drafts.log | head -50
echo "call6 done at $(( $(date +%s) - S ))s"
