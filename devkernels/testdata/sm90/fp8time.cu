// The 16-row FP8 decode (mla_decode_fp8_wg16) timed beside the bf16 body
// (mla_decode_wg16) over the same keys: one item per block, one block per
// multiprocessor, the time a 64-key tile takes. Timing only: the GPU tests
// check the numerics. Run by fp8time.sh.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "../../tile.cuh"
#include "../../mla_common.cuh"
#include "../../mla_decode.cu"
#include "../../sm90.cuh"
#ifndef SM90_SRC
#define SM90_SRC "../../mla_decode_sm90.cu"
#endif
#include SM90_SRC

#include "timing.cuh"

int main(int argc, char** argv) {
    const int heads = 16, batch = argc > 1 ? atoi(argv[1]) : 132, seq = argc > 2 ? atoi(argv[2]) : 8192;
    const int ps = 64, pshift = 6, pages_per = seq / ps, npages = pages_per * batch;
    const long long slots = (long long)npages * ps;
    std::vector<unsigned char> h8(slots * 576);
    std::vector<unsigned short> h16(slots * 576), hq((size_t)batch * heads * 576);
    unsigned long long st = 1;
    auto rnd = [&]() { st = st * 6364136223846793005ull + 1442695040888963407ull; return (unsigned)(st >> 33); };
    for (auto& x : h8) x = (unsigned char)(rnd() & 0x77); // finite e4m3
    for (auto& x : h16) x = (unsigned short)((0x3c00 + (rnd() & 0x3ff)) ^ ((rnd() & 1) << 15));
    for (auto& x : hq) x = (unsigned short)((0x3c00 + (rnd() & 0x3ff)) ^ ((rnd() & 1) << 15));
    std::vector<int> perm(npages), indptr(batch + 1);
    for (int i = 0; i < npages; i++) perm[i] = i;
    for (int i = npages - 1; i > 0; i--) std::swap(perm[i], perm[rnd() % (i + 1)]);
    for (int b = 0; b <= batch; b++) indptr[b] = b * pages_per;
    std::vector<int> sched(4 * batch), reqs(8 * batch), slotv(batch + 1);
    for (int b = 0; b < batch; b++) {
        sched[4 * b] = b; sched[4 * b + 1] = 0; sched[4 * b + 2] = seq; sched[4 * b + 3] = 0;
        int* r = &reqs[8 * b]; r[0] = b; r[1] = 1; r[2] = seq; r[3] = 1; r[4] = r[5] = r[6] = r[7] = 0;
        slotv[b] = b;
    }
    slotv[batch] = batch;
    int count = batch;
    float one = 0.01f;
    void *dq, *d8, *d16, *dout; float *dlse, *dscale; int *dind, *dptr, *dsched, *dreqs, *dcnt, *dslots;
    CK(cudaMalloc(&dq, hq.size() * 2)); CK(cudaMalloc(&d8, h8.size())); CK(cudaMalloc(&d16, h16.size() * 2));
    CK(cudaMalloc(&dout, (size_t)batch * heads * 512 * 2)); CK(cudaMalloc(&dlse, (size_t)batch * heads * 4));
    CK(cudaMalloc(&dscale, 4)); CK(cudaMalloc(&dind, npages * 4)); CK(cudaMalloc(&dptr, (batch + 1) * 4));
    CK(cudaMalloc(&dsched, sched.size() * 4)); CK(cudaMalloc(&dreqs, reqs.size() * 4)); CK(cudaMalloc(&dcnt, 4));
    CK(cudaMalloc(&dslots, slotv.size() * 4));
    CK(cudaMemcpy(dq, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d8, h8.data(), h8.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d16, h16.data(), h16.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dscale, &one, 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dind, perm.data(), npages * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dptr, indptr.data(), (batch + 1) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsched, sched.data(), sched.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dreqs, reqs.data(), reqs.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcnt, &count, 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dslots, slotv.data(), slotv.size() * 4, cudaMemcpyHostToDevice));
    const float scale_log2 = 1.f / sqrtf(192.f) * 1.4426950408889634f;
    const int smem = argc > 3 ? atoi(argv[3]) : 212 * 1024;
    CK(cudaFuncSetAttribute(mla_decode_fp8_wg16, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(mla_decode_wg16, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int tiles = seq / 64;
    for (int fp8 = 0; fp8 < 2; fp8++) {
        auto launch = [&]() {
            if (fp8)
                mla_decode_fp8_wg16<<<batch, 256, smem>>>((const bf16*)dq, d8, dptr, dind, dscale, (bf16*)dout, dlse, dsched, dreqs, dcnt, dslots, nullptr, nullptr, heads, pshift, scale_log2, 1);
            else
                mla_decode_wg16<<<batch, 256, smem>>>((const bf16*)dq, d16, dptr, dind, (bf16*)dout, dlse, dsched, dreqs, dcnt, dslots, nullptr, nullptr, heads, pshift, scale_log2, 1);
        };
        launch();
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        const float ms = time_ms(launch);
        const double bytes = (double)batch * seq * (fp8 ? 576 : 1152);
        printf("%-6s batch %d seq %d: %.1f us, %.0f GB/s, %.3f us a tile\n", fp8 ? "fp8" : "bf16", batch, seq, ms * 1e3, bytes / ms / 1e6, ms * 1e3 / tiles);
    }
    return 0;
}
