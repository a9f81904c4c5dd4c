// Standalone check of mla_decode_wg64 and mla_decode_wg16 against a CPU reference, timed
// beside the mma.sync bodies of the same rows. Build and run: run.sh.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
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

static unsigned short f2bf(float f) { unsigned u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return u >> 16; }
static float bf2f(unsigned short h) { unsigned u = (unsigned)h << 16; float f; memcpy(&f, &u, 4); return f; }

typedef void (*Kern)(const bf16*, const void*, const int*, const int*, bf16*, float*, const int*, const int*, const int*, const int*, float*, float*, int, int, float, int);

int main(int argc, char** argv) {
    int heads = atoi(argv[1]), batch = atoi(argv[2]), seq = atoi(argv[3]), qlen = argc > 4 ? atoi(argv[4]) : 1;
    int check = argc > 5 ? atoi(argv[5]) : 1;
    const int ps = 64, pshift = 6;
    int pages_per = (seq + ps - 1) / ps, npages = pages_per * batch;
    long long slots = (long long)npages * ps;
    std::vector<unsigned short> hq((size_t)batch * qlen * heads * 576), hkv((size_t)slots * 576);
    srand(1);
    for (auto& x : hq) x = f2bf((rand() / (float)RAND_MAX - 0.5f) * 2.f);
    for (auto& x : hkv) x = f2bf((rand() / (float)RAND_MAX - 0.5f) * 2.f);
    std::vector<int> perm(npages); for (int i = 0; i < npages; i++) perm[i] = i;
    std::random_shuffle(perm.begin(), perm.end());
    std::vector<int> indptr(batch + 1), indices(npages);
    for (int b = 0; b <= batch; b++) indptr[b] = b * pages_per;
    for (int i = 0; i < npages; i++) indices[i] = perm[i];
    int rows = qlen * heads;
    std::vector<int> sched(4 * batch), reqs(8 * batch), slotv(batch + 1);
    for (int b = 0; b < batch; b++) {
        sched[4*b] = b; sched[4*b+1] = 0; sched[4*b+2] = seq; sched[4*b+3] = 0;
        int* r = &reqs[8*b]; r[0] = b * qlen; r[1] = qlen; r[2] = seq; r[3] = 1; r[4] = 0; r[5] = r[6] = r[7] = 0;
        slotv[b] = b;
    }
    slotv[batch] = batch;
    int count = batch;
    bf16 *dq, *dout; void* dkv; int *dind, *dptr, *dsched, *dreqs, *dcnt, *dslots; float* dlse;
    CK(cudaMalloc(&dq, hq.size() * 2)); CK(cudaMalloc(&dkv, hkv.size() * 2));
    CK(cudaMalloc(&dout, (size_t)batch * rows * 512 * 2)); CK(cudaMalloc(&dlse, (size_t)batch * rows * 4));
    CK(cudaMalloc(&dind, npages * 4)); CK(cudaMalloc(&dptr, (batch + 1) * 4));
    CK(cudaMalloc(&dsched, sched.size() * 4)); CK(cudaMalloc(&dreqs, reqs.size() * 4)); CK(cudaMalloc(&dcnt, 4)); CK(cudaMalloc(&dslots, slotv.size() * 4));
    CK(cudaMemcpy(dq, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dkv, hkv.data(), hkv.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dind, indices.data(), npages * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dptr, indptr.data(), (batch + 1) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsched, sched.data(), sched.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dreqs, reqs.data(), reqs.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcnt, &count, 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dslots, slotv.data(), slotv.size() * 4, cudaMemcpyHostToDevice));
    float scale = 1.f / sqrtf(192.f), scale_log2 = scale * 1.4426950408889634f;

    struct K { const char* name; Kern f; int smem, rows; } all[4] = {
        {"wide_m64", (Kern)mla_decode_m64, 2 * (64 * 576 + 2 * 64 * 576 + 64 * 64) + 4 * (5 * 64), 64},
        {"wg64", (Kern)mla_decode_wg64, 1024 + WG_TILE * 3 + WG_BLOCK + 4 * 4 * 64 + 512, 64},
        {"m16", (Kern)mla_decode_m16, 2 * (16 * 584 + 2 * 32 * 584 + 16 * 40) + 512, 16},
        {"wg16", (Kern)mla_decode_wg16, 1024 + 9 * WN_QBLOCK + 2 * WG_TILE + WN_QBLOCK + 4 * (128 + 128) + 64, 16}, // + the stages' mbarriers
    };
    std::vector<K> ks;
    for (auto& k : all)
        if ((rows <= 16) == (k.rows == 16)) ks.push_back(k);
    std::vector<unsigned short> hout((size_t)batch * rows * 512);
    double flops = (double)batch * rows * seq * 2.0 * (576 + 512);
    double bytes = (double)batch * seq * 1152;
    for (auto& k : ks) {
        CK(cudaFuncSetAttribute(k.f, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem));
        CK(cudaMemset(dout, 0xff, hout.size() * 2));
        const int hbn = (rows + k.rows - 1) / k.rows;
        auto launch = [&]() { k.f<<<batch * hbn, 256, k.smem>>>(dq, dkv, dptr, dind, dout, dlse, dsched, dreqs, dcnt, dslots, nullptr, nullptr, heads, pshift, scale_log2, hbn); };
        launch();
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hout.data(), dout, hout.size() * 2, cudaMemcpyDeviceToHost));
        double maxerr = 0, maxref = 0; int nan = 0;
        if (check) {
            for (int b = 0; b < batch; b += std::max(1, batch / 3))
                for (int row = 0; row < rows; row += 7) {
                    int t = row / heads;
                    const unsigned short* qr = &hq[((size_t)(b * qlen) * heads + row) * 576];
                    int lim = seq - qlen + t;
                    std::vector<double> sc(lim + 1);
                    double mx = -1e300;
                    for (int j = 0; j <= lim; j++) {
                        long long slot = (long long)indices[indptr[b] + (j >> pshift)] * ps + (j & (ps - 1));
                        const unsigned short* kr = &hkv[slot * 576];
                        double d = 0; for (int c = 0; c < 576; c++) d += (double)bf2f(qr[c]) * bf2f(kr[c]);
                        sc[j] = d * scale; mx = std::max(mx, sc[j]);
                    }
                    double sum = 0; for (int j = 0; j <= lim; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
                    for (int c = 0; c < 512; c += 3) {
                        double acc = 0;
                        for (int j = 0; j <= lim; j++) {
                            long long slot = (long long)indices[indptr[b] + (j >> pshift)] * ps + (j & (ps - 1));
                            acc += sc[j] * bf2f(hkv[slot * 576 + c]);
                        }
                        acc /= sum;
                        float got = bf2f(hout[((size_t)(b * qlen) * heads + row) * 512 + c]);
                        if (std::isnan(got)) nan++;
                        maxerr = std::max(maxerr, fabs(got - acc)); maxref = std::max(maxref, fabs(acc));
                    }
                }
        }
        const float ms = time_ms(launch);
        printf("%-9s heads %3d batch %4d seq %6d qlen %d: rel_err %.2e nan %d  %.1f us  %.0f TFLOP/s  %.0f GB/s\n", k.name, heads, batch, seq, qlen,
               maxref > 0 ? maxerr / maxref : 0, nan, ms * 1e3, flops / ms / 1e9, bytes / ms / 1e6);
    }
    return 0;
}
