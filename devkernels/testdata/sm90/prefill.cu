// Standalone check of mha_prefill_tma and mha_prefill_wg
// (mha_prefill_sm90.cu: TMA loads and cp.async) against a CPU float64
// reference on sampled rows, timed beside mha_prefill (mma.sync) on the same
// batch. Outputs are poisoned (NaN) before each kernel's checked run. Build
// (with -lcuda, for the descriptors) and run: prefill.sh.
//
//   ./p heads requests len [causal=1] [check=1]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda.h>
#include "../../tile.cuh"
#include "../../sm90.cuh"
#include "../../mha_prefill.cu"
#ifndef PREFILL_SM90_SRC
#define PREFILL_SM90_SRC "../../mha_prefill_sm90.cu"
#endif
#include PREFILL_SM90_SRC

#include "timing.cuh"

static unsigned short f2bf(float f) { unsigned u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return u >> 16; }
static double bf2d(unsigned short b) { unsigned u = (unsigned)b << 16; float f; memcpy(&f, &u, 4); return f; }
static unsigned long long rng = 88172645463325252ull;
static double urand() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (double)(rng >> 11) / 9007199254740992.0; }

int main(int argc, char** argv) {
    const int heads = argc > 1 ? atoi(argv[1]) : 16, nreq = argc > 2 ? atoi(argv[2]) : 1, len = argc > 3 ? atoi(argv[3]) : 1024;
    const int causal = argc > 4 ? atoi(argv[4]) : 1, check = argc > 5 ? atoi(argv[5]) : 1;
    // Ragged lengths around len (the first request exactly len).
    std::vector<int> lens(nreq);
    for (int i = 0; i < nreq; i++) lens[i] = i == 0 ? len : std::max(1, (int)(len * (0.3 + 0.9 * urand())));
    std::vector<int> cu(nreq + 1, 0), kr(2 * nreq);
    for (int i = 0; i < nreq; i++) cu[i + 1] = cu[i] + lens[i], kr[2 * i] = cu[i], kr[2 * i + 1] = cu[i + 1];
    const long long T = cu[nreq];
    std::vector<unsigned short> hq(T * heads * 192), hk(T * heads * 192), hv(T * heads * 128);
    for (auto& x : hq) x = f2bf((float)(2 * urand() - 1));
    for (auto& x : hk) x = f2bf((float)(2 * urand() - 1));
    for (auto& x : hv) x = f2bf((float)(2 * urand() - 1));
    // Blocks of 128 queries, longest first (as the plan orders them).
    struct B { int req, q0; long long cost; };
    std::vector<B> bl;
    double pairs = 0;
    for (int i = 0; i < nreq; i++) {
        for (int q0 = 0; q0 < lens[i]; q0 += 128) bl.push_back({i, q0, std::min<long long>(q0 + 128, lens[i])});
        pairs += causal ? (double)lens[i] * (lens[i] + 1) / 2 : (double)lens[i] * lens[i];
    }
    std::stable_sort(bl.begin(), bl.end(), [](const B& a, const B& b) { return a.cost > b.cost; });
    std::vector<int> sched;
    for (auto& b : bl) sched.insert(sched.end(), {b.req, b.q0, 0, 0});
    const double flops = 2.0 * heads * pairs * (192 + 128);

    bf16 *dq, *dk, *dv, *dout;
    float* dlse;
    int *dcu, *dkr, *dsch;
    CK(cudaMalloc(&dq, hq.size() * 2));
    CK(cudaMalloc(&dk, hk.size() * 2));
    CK(cudaMalloc(&dv, hv.size() * 2));
    CK(cudaMalloc(&dout, T * heads * 128 * 2));
    CK(cudaMalloc(&dlse, T * heads * 4));
    CK(cudaMalloc(&dcu, cu.size() * 4));
    CK(cudaMalloc(&dkr, kr.size() * 4));
    CK(cudaMalloc(&dsch, sched.size() * 4));
    CK(cudaMemcpy(dq, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dkr, kr.data(), kr.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsch, sched.data(), sched.size() * 4, cudaMemcpyHostToDevice));
    const float scale = 1.f / sqrtf(192.f), scale_log2 = scale * 1.4426950408889634f;
    const int old_smem = 2 * (128 * 192 + 2 * 64 * 192 + 2 * 64 * 128), wg_smem = PW_SHARED;
    CK(cudaFuncSetAttribute(mha_prefill, cudaFuncAttributeMaxDynamicSharedMemorySize, old_smem));
    CK(cudaFuncSetAttribute(mha_prefill_wg, cudaFuncAttributeMaxDynamicSharedMemorySize, wg_smem));
    CK(cudaFuncSetAttribute(mha_prefill_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, wg_smem));
    dim3 grid((unsigned)bl.size(), heads);
    auto run_old = [&] { mha_prefill<<<grid, 256, old_smem>>>(dq, dk, dv, dout, dlse, dcu, dkr, dsch, heads, causal, scale_log2); };
    // TMA descriptors: q and k as [T, heads*192], v as [T, heads*128],
    // boxes of 128 rows x 64 columns, 128-byte swizzle.
    auto encode = [&](void* base, int cols) {
        CUtensorMap m;
        cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)T}, strides[1] = {(cuuint64_t)cols * 2};
        cuuint32_t box[2] = {64, 128}, elem[2] = {1, 1};
        CUresult rc = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, elem,
                                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (rc != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled: %d\n", (int)rc); exit(1); }
        TmaMap p;
        memcpy(&p, &m, sizeof p);
        return p;
    };
    const TmaMap qm = encode(dq, heads * 192), km = encode(dk, heads * 192), vm = encode(dv, heads * 128);
    // The Hopper entries' grid is persistent: a block an SM, each claiming
    // the blocks x heads work items in turn from two counters, zero before
    // the first launch (the kernels zero them as they end), as devkernels'
    // prefillGrid and the plan's work buffer.
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int nb = (int)bl.size();
    const unsigned pgrid = (unsigned)std::min((long long)nb * heads, (long long)sms);
    int* dwork;
    CK(cudaMalloc(&dwork, 2 * sizeof(int)));
    CK(cudaMemset(dwork, 0, 2 * sizeof(int)));
    auto run_wg = [&] { mha_prefill_wg<<<pgrid, PW_THREADS, wg_smem>>>(dq, dk, dv, dout, dlse, dcu, dkr, dsch, heads, causal, scale_log2, nb, dwork); };
    auto run_tma = [&] { mha_prefill_tma<<<pgrid, PW_THREADS, wg_smem>>>(dq, dk, dv, dout, dlse, dcu, dkr, dsch, heads, causal, scale_log2, nb, dwork, qm, km, vm); };

    // Sampled rows: the first and last of every request, then random ones.
    std::vector<std::pair<long long, int>> rows; // (token, head)
    for (int i = 0; i < nreq; i++) rows.push_back({cu[i], 0}), rows.push_back({cu[i + 1] - 1, heads - 1});
    for (int i = 0; i < 48; i++) rows.push_back({(long long)(urand() * T) % T, (int)(urand() * heads) % heads});
    auto verify = [&](const char* name, auto run) {
        CK(cudaMemset(dout, 0xff, T * heads * 128 * 2)); // NaN
        CK(cudaMemset(dlse, 0xff, T * heads * 4));
        run();
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        if (!check) return true;
        std::vector<unsigned short> ho(T * heads * 128);
        std::vector<float> hl(T * heads);
        CK(cudaMemcpy(ho.data(), dout, ho.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hl.data(), dlse, hl.size() * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0, lerr = 0;
        for (auto [tok, h] : rows) {
            int r = 0;
            while (cu[r + 1] <= tok) r++;
            const int qi = tok - cu[r], kn = lens[r], last = causal ? qi : kn - 1;
            std::vector<double> sc(last + 1);
            double mx = -1e300;
            for (int j = 0; j <= last; j++) {
                double d = 0;
                for (int c = 0; c < 192; c++) d += bf2d(hq[(tok * heads + h) * 192 + c]) * bf2d(hk[((long long)(cu[r] + j) * heads + h) * 192 + c]);
                sc[j] = d * scale;
                mx = std::max(mx, sc[j]);
            }
            double sum = 0;
            for (auto& x : sc) sum += (x = exp(x - mx));
            for (int c = 0; c < 128; c++) {
                double want = 0;
                for (int j = 0; j <= last; j++) want += sc[j] * bf2d(hv[((long long)(cu[r] + j) * heads + h) * 128 + c]);
                want /= sum;
                const double got = bf2d(ho[(tok * heads + h) * 128 + c]);
                num += (got - want) * (got - want);
                den += want * want;
            }
            lerr = std::max(lerr, fabs(hl[tok * heads + h] - (mx + log(sum))));
        }
        const double rel = sqrt(num / den);
        const bool ok = rel <= 1e-2 && lerr <= 1e-3; // NaN fails both
        printf("%-16s rows %zu: rel err %.2e, lse err %.2e %s\n", name, rows.size(), rel, lerr, ok ? "ok" : "FAIL");
        return ok;
    };
    bool ok = verify("mha_prefill", run_old);
    ok = verify("mha_prefill_wg", run_wg) && ok;
    ok = verify("mha_prefill_tma", run_tma) && ok;
    const float t_old = time_ms(run_old), t_wg = time_ms(run_wg), t_tma = time_ms(run_tma);
    CK(cudaGetLastError());
    auto tf = [&](float ms) { return flops / (ms * 1e-3) / 1e12; };
    printf("h%d x%d len %d causal %d: mha_prefill %.1f us (%.0f TFLOP/s), mha_prefill_wg %.1f us (%.0f TFLOP/s, %.2fx), "
           "mha_prefill_tma %.1f us (%.0f TFLOP/s, %.2fx)\n",
           heads, nreq, len, causal, t_old * 1e3, tf(t_old), t_wg * 1e3, tf(t_wg), t_old / t_wg, t_tma * 1e3, tf(t_tma), t_old / t_tma);
    return ok ? 0 : 1;
}
