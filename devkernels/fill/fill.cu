// fill: the bf16 tensors of the verification layer's batches, and the
// decode step's advance of the lengths.
//
// fill_bf16 writes n hashed bf16 values of seed at p (hash.cuh), a
// grid-stride loop over blocks of 256 threads. advance_i32 adds one to
// each of the n int32 at p: a decode step's new token, on the device, so
// that a captured step graph advances seq_lens without a host copy.
extern "C" __global__ void fill_bf16(unsigned short* p, long long n, unsigned long long seed) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = hash_bf16(seed, i);
}
extern "C" __global__ void advance_i32(int* p, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}
