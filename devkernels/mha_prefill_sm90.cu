// Varlen flash attention for DeepSeek prefill on Hopper's own data path
// (sm_90a): mha_prefill.cu's mha_prefill (q/k head dim 192, v 128, bf16)
// with the same parameters, schedule and outputs, on wgmma, in two entries
// that differ in their copies: mha_prefill_tma (TMA loads over the host's
// descriptors of q, k and v, three more parameters) and mha_prefill_wg
// (cp.async, for passes of fewer than 128 query or key rows, which a
// descriptor's box would overrun). The plan runs them on a GPU of compute
// capability 9.0 (prefill.go); mha_prefill runs everywhere else, and
// merge_state stays in mha_prefill.cu. wgmma's primitives: sm90.cuh.
//
// Design (after FlashAttention 3). A block runs 128 query rows of one
// request and one head: two consumer warpgroups of 64 rows each, and a
// producer warpgroup that issues every copy and gives the consumers its
// registers (setmaxnreg: 40 a thread against their 232). Shared memory
// holds the queries (48 KB), two stages of 128 keys (48 KB each) and two
// of their values (32 KB each), 208 KB, all in wgmma's 128-byte-swizzled
// layout: 64-column blocks of 128 rows x 128 bytes, each 16-byte chunk
// XOR-swizzled by its row (as a TMA box of 128 rows x 64 columns lands
// with the 128-byte swizzle). S = Q K^T is 12 k-steps of wgmma.m64n128k16
// with both operands in shared memory (K-major); the accumulators of S
// are, once exponentiated and rounded to bf16, the register A operand of
// O += P V (8 k-steps of m64n128k16, V read MN-major through the
// transposed-B form), so P never touches shared memory. Each warp owns 16
// whole rows of S and O, so the softmax needs no exchange between warps.
//
// The pipeline. The producer's loads land on mbarriers (FULL, one per
// stage of keys and of values, and one for the queries): with TMA one
// thread issues a tile's five boxes and arms the stage's barrier with
// their bytes (mbarrier.arrive.expect_tx); with cp.async the four warps
// issue 5120 copies, a warp's copy reading 128 contiguous bytes of each of
// four rows, completed by cp.async.mbarrier.arrive. The consumers release
// a stage (EMPTY) once the products that read it are done, and the
// producer refills it. So the consumers never issue a copy, and the two
// warpgroups are coupled only through the stages, not by a barrier a tile.
// A consumer queues S_t, then the previous tile's P V, waits for S_t alone
// and runs the softmax of tile t while P V of tile t-1 still runs, then
// waits for it, rescales O and packs P_t, whose product runs with the next
// tile. Rows past a request's keys or queries are the next request's (TMA)
// or zeros (cp.async): masked keys score minus infinity, and their values,
// finite either way, are multiplied by P = 0. Causal blocks stop at the
// diagonal.

#define PW_BM 128                 /* query rows a block: 64 a warpgroup */
#define PW_BN 128                 /* keys a tile */
#define PW_DQK 192
#define PW_DV 128
#define PW_CB 16384               /* one 64-column block: 128 rows x 128 bytes */
#define PW_QT (3 * PW_CB)         /* 128 rows x 192 columns: the queries, or a key tile */
#define PW_VT (2 * PW_CB)         /* 128 keys x 128 columns: a value tile */
#define PW_THREADS 384            /* two consumer warpgroups, then the producer's */
#define PW_BARS (3 * PW_QT + 2 * PW_VT) /* 9 mbarriers: FULL keys, FULL values, EMPTY keys, EMPTY values (x2 stages), FULL queries */
#define PW_SHARED (PW_BARS + 128 + 1024) /* and 1024 bytes to align the swizzle atoms */

// Both entries' dynamic shared memory, exported beside them (as
// mla_common.cuh's MLA_SHARED does the decode's): the one figure of it,
// which the planner reads from the images' manifest.
extern "C" {
__constant__ int mha_prefill_wg_shared = PW_SHARED;
__constant__ int mha_prefill_tma_shared = PW_SHARED;
}

// The values' descriptor: MN-major (transposed B), the next 64 columns one
// column block on, 8-key groups 1024 bytes apart; a k-step of 16 keys
// moves the start by 2048 bytes.
__device__ __forceinline__ u64 pw_vdesc(u32 addr) { return wg_desc(addr, PW_CB, 1024); }

#define PW_D8(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), "+f"(d[b + 7])
#define PW_D64 PW_D8(0), PW_D8(8), PW_D8(16), PW_D8(24), PW_D8(32), PW_D8(40), PW_D8(48), PW_D8(56)

// S (+)= Q K^T for one warpgroup: 64 x 128, k 16, both operands K-major in
// shared memory; accumulate 0 overwrites d.
__device__ __forceinline__ void pw_qk(float (&d)[64], u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : PW_D64
                 : "l"(da), "l"(db), "r"(accumulate));
}

// O += P V for one warpgroup: 64 x 128, k 16, P from registers (the A
// fragment: rows r and r+8 of the thread, keys 2t, 2t+1 and 2t+8, 2t+9 of
// the k-step), V MN-major in shared memory.
__device__ __forceinline__ void pw_pv(float (&d)[64], u32 a0, u32 a1, u32 a2, u32 a3, u64 db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : PW_D64
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

// The prefill of one block. TMA: the producer is one thread issuing TMA
// loads over the descriptors qm, km and vm (q and k viewed as [tokens,
// heads x 192], v as [tokens, heads x 128], boxes of 128 rows x 64
// columns); else its four warps issue cp.async copies.
template <bool TMA>
__device__ __forceinline__ void prefill_wg(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                                           bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_q,
                                           const int* __restrict__ k_ranges, const int* __restrict__ schedule, int heads,
                                           int causal, float scale_log2, const TmaMap* qm, const TmaMap* km, const TmaMap* vm) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const u32 sq_a = smem_addr(smem_raw) + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023); // the atoms' alignment
    const u32 sk_a = sq_a + PW_QT, sv_a = sk_a + 2 * PW_QT;

    const int req = schedule[4 * blockIdx.x], q0 = schedule[4 * blockIdx.x + 1];
    const int h = blockIdx.y;
    const int qs = cu_q[req], qn = cu_q[req + 1] - qs;
    const int ks = k_ranges[2 * req], kn = k_ranges[2 * req + 1] - ks;
    // The warpgroup, read from lane 0 so that the compiler knows it uniform
    // across the warp (a role chosen on a divergent value serialises every
    // wgmma behind a wait of its own).
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = __shfl_sync(0xffffffff, tid >> 7, 0);
    const long long qstride = (long long)heads * PW_DQK, vstride = (long long)heads * PW_DV;
    const int off = kn - qn; // causal offset of query 0

    // Key tiles this block needs: causal rows see keys up to off + row.
    int ntiles = (kn + PW_BN - 1) / PW_BN;
    if (causal) ntiles = min(ntiles, max(0, (off + min(q0 + PW_BM, qn) + PW_BN - 1) / PW_BN));

    const u32 bars = sq_a + PW_BARS;
    auto kfull = [&](int t) -> u32 { return bars + 8 * (t & 1); };
    auto vfull = [&](int t) -> u32 { return bars + 16 + 8 * (t & 1); };
    auto kempty = [&](int t) -> u32 { return bars + 32 + 8 * (t & 1); };
    auto vempty = [&](int t) -> u32 { return bars + 48 + 8 * (t & 1); };
    const u32 qfull = bars + 64; // TMA: the queries' own barrier
    if (tid == 0) {
#pragma unroll
        for (int i = 0; i < 4; i++) mbar_init(bars + 8 * i, TMA ? 1 : 128); // FULL: the producer's thread(s)
#pragma unroll
        for (int i = 4; i < 8; i++) mbar_init(bars + 8 * i, 256); // EMPTY: the consumers' threads
        if (TMA) {
            mbar_init(qfull, 1);
            fence_async_smem(); // the barriers, before the TMA unit arrives on them
        }
    }
    __syncthreads();

    if (TMA && wg == 2) {
        // The producer gives its registers to the consumers; one thread
        // issues the loads, each box 16 KB, and arms each FULL barrier with
        // its stage's bytes.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 256 && ntiles > 0) {
            mbar_expect_tx(qfull, PW_QT);
            for (int b = 0; b < 3; b++) tma_load_2d(sq_a + b * PW_CB, qm, h * PW_DQK + 64 * b, qs + q0, qfull);
            for (int t = 0; t < ntiles; t++) {
                const u32 par = ((t >> 1) & 1) ^ 1; // the release of tile t-2
                if (t >= 2) mbar_wait(kempty(t), par);
                mbar_expect_tx(kfull(t), PW_QT);
                for (int b = 0; b < 3; b++)
                    tma_load_2d(sk_a + (t & 1) * PW_QT + b * PW_CB, km, h * PW_DQK + 64 * b, ks + t * PW_BN, kfull(t));
                if (t >= 2) mbar_wait(vempty(t), par);
                mbar_expect_tx(vfull(t), PW_VT);
                for (int b = 0; b < 2; b++)
                    tma_load_2d(sv_a + (t & 1) * PW_VT + b * PW_CB, vm, h * PW_DV + 64 * b, ks + t * PW_BN, vfull(t));
            }
        }
        return;
    }
    if (wg == 2) {
        // The producer gives its registers to the consumers. Thread (rs, c8)
        // copies chunk c8 of every column block of rows rs + 16i, so that a
        // warp's copy reads 128 contiguous bytes of four rows. Rows past the
        // request's keys (queries) are zeros: a masked key's value must be
        // finite (P is 0 there).
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        const int rs = (tid - 256) >> 3, c8 = tid & 7;
        auto rows = [&](u32 dst, const bf16* base, long long stride, int first, int limit, int blocks) {
#pragma unroll 4
            for (int i = 0; i < PW_BM / 16; i++) {
                const int r = rs + 16 * i;
                const bool ok = first + r < limit;
                const bf16* src = base + (long long)(ok ? first + r : 0) * stride + c8 * 8;
                const u32 d = dst + r * 128 + (((c8 ^ r) & 7) << 4);
                for (int b = 0; b < blocks; b++) cp_async16(d + b * PW_CB, src + 64 * b, ok ? 16 : 0);
            }
        };
        rows(sq_a, q + (long long)qs * qstride + (long long)h * PW_DQK, qstride, q0, qn, 3); // with the first keys
        for (int t = 0; t < ntiles; t++) {
            const u32 par = ((t >> 1) & 1) ^ 1; // the release of tile t-2
            if (t >= 2) mbar_wait(kempty(t), par);
            rows(sk_a + (t & 1) * PW_QT, k + (long long)ks * qstride + (long long)h * PW_DQK, qstride, t * PW_BN, kn, 3);
            cp_arrive(kfull(t));
            if (t >= 2) mbar_wait(vempty(t), par);
            rows(sv_a + (t & 1) * PW_VT, v + (long long)ks * vstride + (long long)h * PW_DV, vstride, t * PW_BN, kn, 2);
            cp_arrive(vfull(t));
        }
        cp_wait<0>();
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    // This thread's two rows (of S and O) within the request, their last
    // keys, and its first column of S.
    const int r0 = q0 + wg * 64 + (warp & 3) * 16 + (lane >> 2), r1 = r0 + 8;
    const int lim0 = causal ? min(off + r0, kn - 1) : kn - 1;
    const int lim1 = causal ? min(off + r1, kn - 1) : kn - 1;
    const int kq = (lane & 3) * 2;

    // S and O: 64 x 128 each, columns 8j + kq + {0,1} in [4j], [4j+1]
    // (row r0) and [4j+2], [4j+3] (row r1); P: tile t's probabilities as
    // the A fragments of its 8 k-steps.
    float s[64], o[64];
    u32 p[32];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f; // maxima in scaled log2 units
    const u64 dq = kmajor(sq_a + wg * 64 * 128);

    if (TMA && ntiles > 0) mbar_wait(qfull, 0);
    for (int t = 0; t < ntiles; t++) {
        mbar_wait(kfull(t), (t >> 1) & 1);
        if (t > 0) mbar_wait(vfull(t - 1), ((t - 1) >> 1) & 1);
        fence_async_smem(); // the copies before the products read them
        wg_fence();
        const u64 dk = kmajor(sk_a + (t & 1) * PW_QT);
#pragma unroll
        for (int kk = 0; kk < PW_DQK / 16; kk++) {
            const u32 koff = ((kk >> 2) * PW_CB + (kk & 3) * 32) >> 4;
            pw_qk(s, dq + koff, dk + koff, kk > 0);
        }
        wg_commit();
        if (t > 0) {
            const u64 dv = pw_vdesc(sv_a + ((t - 1) & 1) * PW_VT);
#pragma unroll
            for (int kk = 0; kk < PW_BN / 16; kk++)
                pw_pv(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], dv + ((kk * 2048) >> 4));
            wg_commit();
        }
        if (t > 0)
            wg_wait<1>(); // S_t; P V of tile t-1 runs on
        else
            wg_wait<0>();
        reg_fence(s);
        mbar_arrive(kempty(t)); // every thread: a branch here would hold P V's accumulators

        const int j0 = t * PW_BN;
        if (__any_sync(0xffffffff, j0 + PW_BN - 1 > min(lim0, lim1))) {
#pragma unroll
            for (int j = 0; j < PW_BN / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = j0 + 8 * j + kq + e;
                    if (key > lim0) s[4 * j + e] = NEG_INF;
                    if (key > lim1) s[4 * j + 2 + e] = NEG_INF;
                }
        }
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int j = 0; j < PW_BN / 8; j++) {
            mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
            mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
        }
        mx0 = quad_max(mx0);
        mx1 = quad_max(mx1);
        const float mt0 = fmaxf(m0, mx0 * scale_log2), mt1 = fmaxf(m1, mx1 * scale_log2);
        const float mu0 = mt0 == NEG_INF ? 0.f : mt0, mu1 = mt1 == NEG_INF ? 0.f : mt1;
        const float al0 = fast_exp2(m0 - mu0), al1 = fast_exp2(m1 - mu1);
        float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
        for (int j = 0; j < PW_BN / 8; j++) {
            s[4 * j] = fast_exp2(fmaf(s[4 * j], scale_log2, -mu0));
            s[4 * j + 1] = fast_exp2(fmaf(s[4 * j + 1], scale_log2, -mu0));
            s[4 * j + 2] = fast_exp2(fmaf(s[4 * j + 2], scale_log2, -mu1));
            s[4 * j + 3] = fast_exp2(fmaf(s[4 * j + 3], scale_log2, -mu1));
            sum0 += s[4 * j] + s[4 * j + 1];
            sum1 += s[4 * j + 2] + s[4 * j + 3];
        }
        wg_wait<0>(); // P V of tile t-1: O, P and the values are free
        reg_fence(o);
        if (t > 0) mbar_arrive(vempty(t - 1));
        m0 = mt0;
        m1 = mt1;
        l0 = l0 * al0 + sum0;
        l1 = l1 * al1 + sum1;
#pragma unroll
        for (int j = 0; j < PW_DV / 8; j++) {
            o[4 * j] *= al0;
            o[4 * j + 1] *= al0;
            o[4 * j + 2] *= al1;
            o[4 * j + 3] *= al1;
        }
#pragma unroll
        for (int kk = 0; kk < PW_BN / 16; kk++) {
            p[4 * kk] = pack_bf16(s[8 * kk], s[8 * kk + 1]);
            p[4 * kk + 1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
            p[4 * kk + 2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
            p[4 * kk + 3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
        }
    }
    if (ntiles > 0) { // the last tile's P V
        mbar_wait(vfull(ntiles - 1), ((ntiles - 1) >> 1) & 1);
        fence_async_smem();
        wg_fence();
        const u64 dv = pw_vdesc(sv_a + ((ntiles - 1) & 1) * PW_VT);
#pragma unroll
        for (int kk = 0; kk < PW_BN / 16; kk++)
            pw_pv(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], dv + ((kk * 2048) >> 4));
        wg_commit();
        wg_wait<0>();
        reg_fence(o);
    }

    // Row sums across the quad, then the output.
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    if (r0 < qn) {
        bf16* dst = out + (long long)(qs + r0) * vstride + (long long)h * PW_DV + kq;
#pragma unroll
        for (int j = 0; j < PW_DV / 8; j++) *(u32*)(dst + 8 * j) = pack_bf16(o[4 * j] * inv0, o[4 * j + 1] * inv0);
        if ((lane & 3) == 0)
            lse[(long long)(qs + r0) * heads + h] = l0 > 0.f ? (m0 + __log2f(l0)) * 0.6931471805599453f : NEG_INF;
    }
    if (r1 < qn) {
        bf16* dst = out + (long long)(qs + r1) * vstride + (long long)h * PW_DV + kq;
#pragma unroll
        for (int j = 0; j < PW_DV / 8; j++) *(u32*)(dst + 8 * j) = pack_bf16(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
        if ((lane & 3) == 0)
            lse[(long long)(qs + r1) * heads + h] = l1 > 0.f ? (m1 + __log2f(l1)) * 0.6931471805599453f : NEG_INF;
    }
}

// cp.async copies: the passes of fewer than 128 query or key rows, whose
// boxes a descriptor could not hold.
extern "C" __global__ void __launch_bounds__(PW_THREADS, 1)
    mha_prefill_wg(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                   bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_q,
                   const int* __restrict__ k_ranges, const int* __restrict__ schedule, int heads, int causal,
                   float scale_log2) {
    prefill_wg<false>(q, k, v, out, lse, cu_q, k_ranges, schedule, heads, causal, scale_log2, nullptr, nullptr, nullptr);
}

// TMA loads over the host's descriptors of q, k and v.
extern "C" __global__ void __launch_bounds__(PW_THREADS, 1)
    mha_prefill_tma(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                    bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_q,
                    const int* __restrict__ k_ranges, const int* __restrict__ schedule, int heads, int causal,
                    float scale_log2, const __grid_constant__ TmaMap q_map, const __grid_constant__ TmaMap k_map,
                    const __grid_constant__ TmaMap v_map) {
    prefill_wg<true>(q, k, v, out, lse, cu_q, k_ranges, schedule, heads, causal, scale_log2, &q_map, &k_map, &v_map);
}
