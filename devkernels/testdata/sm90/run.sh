# The standalone check of the Hopper decode bodies (mla_decode_wg64, mla_decode_wg16)
# against a CPU reference, timed beside the mma.sync bodies, then memcheck and
# initcheck on small cases. Needs nvcc and an sm_90 GPU: bash devkernels/testdata/sm90/run.sh
set -e
cd "$(dirname "$0")"
export PATH=/usr/local/cuda/bin:$PATH
nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -lineinfo -Xptxas -v harness.cu -o h 2>&1 | grep -E "error|warning|Compiling entry|registers|spill" | head -40
./h 128 1 256 1
./h 64 3 1000 2
./h 16 2 777 1
./h 16 3 5000 1
./h 16 132 4096 1 0
./h 16 264 8192 1 0
./h 16 64 16384 1 0
./h 128 132 4096 1 0
./h 128 264 2048 1 0
./h 64 132 4096 2 0
./h 128 16 8192 1 0
# Out-of-bounds and uninitialised shared/global accesses on small cases.
compute-sanitizer --tool memcheck ./h 16 2 300 1 2>&1 | tail -3
compute-sanitizer --tool memcheck ./h 128 1 200 1 2>&1 | tail -3
compute-sanitizer --tool initcheck ./h 16 2 300 1 2>&1 | tail -3
