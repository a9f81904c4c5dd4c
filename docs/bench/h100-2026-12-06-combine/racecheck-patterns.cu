// The two hand-offs of mla_decode_ss that compute-sanitizer racecheck
// flags, alone: (1) a value written by one warpgroup and read by the other
// through named barriers that one warpgroup arrives at and the other syncs
// on (the seesaw's SS_SCALE0 / SS_SCALE1: the row scales), and the same
// shared words written again a round later; (2) a value written before an
// mbarrier arrival and read after a wait on its phase (the seesaw's badt
// and kvalid, beside a refill). Each kernel is race-free by the PTX memory
// model (bar.arrive orders its thread's earlier accesses before the
// barrier's completion; an mbarrier phase's completion orders the
// arrivals' earlier writes before the waiters' later reads). Build:
// nvcc -arch=sm_90a -lineinfo -o patterns racecheck-patterns.cu; run:
// compute-sanitizer --tool racecheck ./patterns.
#include <cstdio>

__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }

// (1) As the seesaw: warpgroup 0 writes s0, arrives at 1; warpgroup 1 syncs
// on 1, writes s1, reads s0, arrives at 2; warpgroup 0 syncs on 2, reads s1.
// ARRIVE 0 makes both sides sync (bar.sync) instead.
template <bool ARRIVE>
__global__ void named(float* out, int rounds) {
    __shared__ float s0[64], s1[64];
    const int wg = threadIdx.x >> 7, r = threadIdx.x & 63, first = (threadIdx.x & 127) < 64;
    float acc = 0.f;
    for (int i = 0; i < rounds; i++) {
        if (wg == 1) bar_sync(1, 256);
        if (first) (wg == 0 ? s0 : s1)[r] = float(i + wg);
        if (wg == 1) {
            acc += s0[r];
            if (ARRIVE) bar_arrive(2, 256); else bar_sync(2, 256);
        } else {
            if (ARRIVE) bar_arrive(1, 256); else bar_sync(1, 256);
            bar_sync(2, 256);
            acc += s1[r];
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__device__ __forceinline__ void mbar_init(unsigned a, int n) { asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(a), "r"(n)); }
__device__ __forceinline__ void mbar_arrive(unsigned a) { asm volatile("{\n.reg .b64 s;\nmbarrier.arrive.shared.b64 s, [%0];\n}" ::"r"(a) : "memory"); }
__device__ __forceinline__ void mbar_wait(unsigned a, int ph) {
    asm volatile("{\n.reg .pred p;\nW:\nmbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra W;\n}" ::"r"(a), "r"(ph) : "memory");
}

// (2) Warpgroup 0 writes v[b] and arrives at full[b]; warpgroup 1 waits on
// full[b]'s phase, reads v[b], and arrives at empty[b] for the next round's
// write (two buffers, as the seesaw's).
__global__ void mbar(float* out, int rounds) {
    __shared__ float v[2][64];
    __shared__ __align__(8) unsigned long long bars[4];
    const int wg = threadIdx.x >> 7, r = threadIdx.x & 63, first = (threadIdx.x & 127) < 64;
    const unsigned full = (unsigned)__cvta_generic_to_shared(&bars[0]), empty = full + 16;
    if (threadIdx.x == 0)
        for (int b = 0; b < 2; b++) {
            mbar_init(full + 8 * b, 128);
            mbar_init(empty + 8 * b, 128);
        }
    __syncthreads();
    float acc = 0.f;
    for (int i = 0; i < rounds; i++) {
        const int b = i & 1, ph = (i >> 1) & 1;
        if (wg == 0) {
            if (i >= 2) mbar_wait(empty + 8 * b, ph ^ 1);
            if (first) v[b][r] = float(i);
            mbar_arrive(full + 8 * b);
        } else {
            mbar_wait(full + 8 * b, ph);
            acc += v[b][r];
            mbar_arrive(empty + 8 * b);
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

int main() {
    float* out;
    cudaMalloc(&out, 4 * 256 * sizeof(float));
    named<true><<<4, 256>>>(out, 8);
    named<false><<<4, 256>>>(out, 8);
    mbar<<<4, 256>>>(out, 8);
    const cudaError_t e = cudaDeviceSynchronize();
    float h[256];
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    // warpgroup 1 sums 0..7 (s0 = i), warpgroup 0 sums 1..8 (s1 = i + 1)
    // in the last kernel: warpgroup 1 sums v = 0..7.
    printf("%s: warpgroup 1 thread 0 read %.0f (want 28)\n", cudaGetErrorString(e), h[128]);
    return e != cudaSuccess;
}
