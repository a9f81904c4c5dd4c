# Times the 16-row FP8 decode body (mla_decode_fp8_wg16) beside the bf16 one
# over the same keys (one item a block, one block a multiprocessor), then
# runs it small under compute-sanitizer (memcheck, synccheck: the named
# barriers between its loader and consumer warpgroups). Needs nvcc and an
# sm_90 GPU: bash devkernels/testdata/sm90/fp8time.sh
set -e
cd "$(dirname "$0")"
export PATH=/usr/local/cuda/bin:$PATH
nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -lineinfo fp8time.cu -o /tmp/fp8time 2>&1 | grep -E "error" | head
/tmp/fp8time 132 4096
/tmp/fp8time 132 2048
compute-sanitizer --tool memcheck /tmp/fp8time 3 640 2>&1 | tail -2
compute-sanitizer --tool synccheck /tmp/fp8time 3 640 2>&1 | tail -2
