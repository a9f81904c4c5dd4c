# The standalone check of the Hopper prefill (mha_prefill_tma, mha_prefill_wg) against a CPU
# float64 reference, timed beside mha_prefill, then memcheck and initcheck
# on small cases. Needs nvcc and an sm_90 GPU: bash devkernels/testdata/sm90/prefill.sh
set -e
cd "$(dirname "$0")"
export PATH=/usr/local/cuda/bin:$PATH
nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -lineinfo -Xptxas -v prefill.cu -o p -lcuda 2>&1 | grep -E "error|warning|Compiling entry|registers|spill" | head -20
./p 128 1 4096
./p 128 1 16384
./p 16 1 1024
./p 16 8 2000
./p 128 3 777
./p 16 2 300 0
./p 128 1 8192 1 0
compute-sanitizer --tool memcheck ./p 16 2 300 2>&1 | tail -3
compute-sanitizer --tool initcheck ./p 16 2 300 2>&1 | tail -3
