// Varlen flash attention for DeepSeek prefill on Hopper's own data path
// (sm_90a): mha_prefill.cu's mha_prefill (q/k head dim 192, v 128, bf16)
// with the same parameters, schedule and outputs (and two more: the
// schedule's block count and the work counters), on wgmma, on a persistent
// grid, in two entries that differ in their copies: mha_prefill_tma (TMA
// loads over the host's descriptors of q, k and v) and mha_prefill_wg
// (cp.async, for passes of fewer than 128 query or key rows, which a
// descriptor's box would overrun). The plan runs them on a GPU of compute
// capability 9.0 (prefill.go); mha_prefill runs everywhere else, and
// merge_state stays in mha_prefill.cu. wgmma's primitives: sm90.cuh.
//
// Design (after FlashAttention 3). A work item is 128 query rows of one
// request and one head; the grid holds a block an SM, and each block runs
// the items it claims in turn (pw_claim: from a counter, in the order a
// grid of one block an item would start them, on the block that frees
// first). A block is two consumer warpgroups of 64 rows each, and a
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
// finite either way, are multiplied by P = 0. Causal items stop at the
// diagonal. The stages run on across a block's items, and the queries'
// buffer (EMPTY queries) frees once an item's last S has read it, so the
// producer loads the next item's first keys and its queries while the
// consumers finish this item's last P V and write its output: on short
// items (1k keys) each item's start and end no longer leave the tensor
// cores idle.

#define PW_BM 128                 /* query rows a block: 64 a warpgroup */
#define PW_BN 128                 /* keys a tile */
#define PW_DQK 192
#define PW_DV 128
#define PW_CB 16384               /* one 64-column block: 128 rows x 128 bytes */
#define PW_QT (3 * PW_CB)         /* 128 rows x 192 columns: the queries, or a key tile */
#define PW_VT (2 * PW_CB)         /* 128 keys x 128 columns: a value tile */
#define PW_THREADS 384            /* two consumer warpgroups, then the producer's */
#define PW_BARS (3 * PW_QT + 2 * PW_VT) /* 14 mbarriers (FULL keys, FULL values, EMPTY keys, EMPTY values, x2 stages; FULL and EMPTY queries; FULL and EMPTY items, x2) and 2 item slots */
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

// Arrives on bar when cond holds, predicated rather than branched, so that
// no branch stands between asynchronous MMAs and their accumulators.
__device__ __forceinline__ void pw_arrive_if(u32 bar, bool cond) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
                 "r"((int)cond)
                 : "memory");
}

// One work item of a pass: 128 queries of one request (from row q0 of its
// qn; q rows qs on), one head h, over the request's kn keys (k rows ks on)
// in ntiles tiles.
struct PwItem {
    int h, q0, qs, qn, ks, kn, ntiles;
};

// Work item i of a pass: the pass's items are its schedule's blocks x the
// heads, head by head (item i: head i / blocks, schedule block
// i % blocks), in the order the blocks of a grid of one block an item
// would start.
__device__ __forceinline__ void pw_item(int i, int blocks, const int* __restrict__ cu_q, const int* __restrict__ k_ranges,
                                        const int* __restrict__ schedule, int causal, PwItem& it) {
    it.h = i / blocks;
    const int b = i - it.h * blocks;
    const int req = schedule[4 * b];
    it.q0 = schedule[4 * b + 1];
    it.qs = cu_q[req];
    it.qn = cu_q[req + 1] - it.qs;
    it.ks = k_ranges[2 * req];
    it.kn = k_ranges[2 * req + 1] - it.ks;
    // Key tiles the item needs: causal rows see keys up to kn - qn + row.
    int n = (it.kn + PW_BN - 1) / PW_BN;
    if (causal) n = min(n, max(0, (it.kn - it.qn + min(it.q0 + PW_BM, it.qn) + PW_BN - 1) / PW_BN));
    it.ntiles = n;
}

__device__ __forceinline__ void st_shared_i32(u32 addr, int v) { asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory"); }
__device__ __forceinline__ int ld_shared_i32(u32 addr) {
    int v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

// Claims the block's k-th work item (-1 past the pass's items) and hands
// it to the block in slot k & 1 (its FULL item barrier; the slot is free
// once its EMPTY one completes). The first is the block's own index; the
// rest come from the counter work[0] in the order asked, so items start in
// the order a grid of one block an item would start them, each on the
// block that frees first. The block that asks last past the end (work[1]
// counts them, one a block) zeroes both counters for the next launch.
__device__ __forceinline__ int pw_claim(int k, int items, int* work, u32 slot, u32 full, u32 empty) {
    int i = k == 0 ? (int)blockIdx.x : (int)gridDim.x + atomicAdd(work, 1);
    if (i >= items) {
        i = -1;
        if (atomicAdd(work + 1, 1) == (int)gridDim.x - 1) {
            atomicExch(work, 0);
            atomicExch(work + 1, 0);
        }
    }
    if (k >= 2) mbar_wait(empty, ((k >> 1) & 1) ^ 1); // the block has read the slot's item k-2
    st_shared_i32(slot, i);
    mbar_arrive(full);
    return i;
}

// The prefill of one block: the work items it claims, in turn (a grid of
// one block an SM: prefill.go's prefillGrid). TMA: the producer is one
// thread issuing TMA loads over the descriptors qm, km and vm (q and k
// viewed as [tokens, heads x 192], v as [tokens, heads x 128], boxes of 128
// rows x 64 columns); else its four warps issue cp.async copies. The key
// and value stages run on across items (tile g of the block, counted from
// its first item, in stage g & 1), and the queries' buffer is refilled
// once the last item's last S has read it (EMPTY queries), so the next
// item's first loads overlap this item's last P V and its output.
template <bool TMA>
__device__ __forceinline__ void prefill_wg(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                                           bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_q,
                                           const int* __restrict__ k_ranges, const int* __restrict__ schedule, int heads,
                                           int causal, float scale_log2, int blocks, int* work, const TmaMap* qm,
                                           const TmaMap* km, const TmaMap* vm) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const u32 sq_a = smem_addr(smem_raw) + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023); // the atoms' alignment
    const u32 sk_a = sq_a + PW_QT, sv_a = sk_a + 2 * PW_QT;

    // The warpgroup, read from lane 0 so that the compiler knows it uniform
    // across the warp (a role chosen on a divergent value serialises every
    // wgmma behind a wait of its own).
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = __shfl_sync(0xffffffff, tid >> 7, 0);
    const long long qstride = (long long)heads * PW_DQK, vstride = (long long)heads * PW_DV;

    const u32 bars = sq_a + PW_BARS;
    auto kfull = [&](int g) -> u32 { return bars + 8 * (g & 1); };
    auto vfull = [&](int g) -> u32 { return bars + 16 + 8 * (g & 1); };
    auto kempty = [&](int g) -> u32 { return bars + 32 + 8 * (g & 1); };
    auto vempty = [&](int g) -> u32 { return bars + 48 + 8 * (g & 1); };
    const u32 qfull = bars + 64, qempty = bars + 72; // the queries' (qfull: TMA only)
    // The claimed items: FULL and EMPTY barriers and a slot, two of each.
    auto ifull = [&](int k) -> u32 { return bars + 80 + 8 * (k & 1); };
    auto iempty = [&](int k) -> u32 { return bars + 96 + 8 * (k & 1); };
    auto islot = [&](int k) -> u32 { return bars + 112 + 4 * (k & 1); };
    const int items = blocks * heads;
    if (tid == 0) {
#pragma unroll
        for (int i = 0; i < 4; i++) mbar_init(bars + 8 * i, TMA ? 1 : 128); // FULL: the producer's thread(s)
#pragma unroll
        for (int i = 4; i < 8; i++) mbar_init(bars + 8 * i, 256); // EMPTY: the consumers' threads
        mbar_init(qempty, 256);
        for (int i = 0; i < 2; i++) {
            mbar_init(ifull(i), 1);                      // the claiming thread
            mbar_init(iempty(i), TMA ? 256 : 256 + 128); // the threads that read the slot
        }
        if (TMA) {
            mbar_init(qfull, 1);
            fence_async_smem(); // the barriers, before the TMA unit arrives on them
        }
    }
    __syncthreads();

    PwItem it;
    int g = 0, nq = 0; // the block's key tiles and query loads so far
    if (TMA && wg == 2) {
        // The producer gives its registers to the consumers; one thread
        // issues the loads, each box 16 KB, and arms each FULL barrier with
        // its stage's bytes. An item's first keys go before its queries,
        // whose buffer frees later.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid != 256) return;
        for (int c = 0;; c++) {
            const int i = pw_claim(c, items, work, islot(c), ifull(c), iempty(c));
            if (i < 0) break;
            pw_item(i, blocks, cu_q, k_ranges, schedule, causal, it);
            for (int t = 0; t < it.ntiles; t++, g++) {
                const u32 par = ((g >> 1) & 1) ^ 1; // the release of tile g-2
                if (g >= 2) mbar_wait(kempty(g), par);
                mbar_expect_tx(kfull(g), PW_QT);
                for (int b = 0; b < 3; b++)
                    tma_load_2d(sk_a + (g & 1) * PW_QT + b * PW_CB, km, it.h * PW_DQK + 64 * b, it.ks + t * PW_BN, kfull(g));
                if (t == 0) {
                    if (nq > 0) mbar_wait(qempty, (nq - 1) & 1);
                    mbar_expect_tx(qfull, PW_QT);
                    for (int b = 0; b < 3; b++) tma_load_2d(sq_a + b * PW_CB, qm, it.h * PW_DQK + 64 * b, it.qs + it.q0, qfull);
                    nq++;
                }
                if (g >= 2) mbar_wait(vempty(g), par);
                mbar_expect_tx(vfull(g), PW_VT);
                for (int b = 0; b < 2; b++)
                    tma_load_2d(sv_a + (g & 1) * PW_VT + b * PW_CB, vm, it.h * PW_DV + 64 * b, it.ks + t * PW_BN, vfull(g));
            }
        }
        return;
    }
    if (wg == 2) {
        // The producer gives its registers to the consumers. Thread (rs, c8)
        // copies chunk c8 of every column block of rows rs + 16i, so that a
        // warp's copy reads 128 contiguous bytes of four rows. Rows past the
        // request's keys (queries) are zeros: a masked key's value must be
        // finite (P is 0 there). An item's queries land with its first keys.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        const int rs = (tid - 256) >> 3, c8 = tid & 7;
        auto rows = [&](u32 dst, const bf16* base, long long stride, int first, int limit, int nblocks) {
#pragma unroll 4
            for (int i = 0; i < PW_BM / 16; i++) {
                const int r = rs + 16 * i;
                const bool ok = first + r < limit;
                const bf16* src = base + (long long)(ok ? first + r : 0) * stride + c8 * 8;
                const u32 d = dst + r * 128 + (((c8 ^ r) & 7) << 4);
                for (int b = 0; b < nblocks; b++) cp_async16(d + b * PW_CB, src + 64 * b, ok ? 16 : 0);
            }
        };
        for (int c = 0;; c++) {
            if (tid == 256) pw_claim(c, items, work, islot(c), ifull(c), iempty(c));
            mbar_wait(ifull(c), (c >> 1) & 1);
            const int i = ld_shared_i32(islot(c));
            mbar_arrive(iempty(c));
            if (i < 0) break;
            pw_item(i, blocks, cu_q, k_ranges, schedule, causal, it);
            if (it.ntiles == 0) continue;
            if (nq > 0) mbar_wait(qempty, (nq - 1) & 1);
            nq++;
            rows(sq_a, q + (long long)it.qs * qstride + (long long)it.h * PW_DQK, qstride, it.q0, it.qn, 3);
            for (int t = 0; t < it.ntiles; t++, g++) {
                const u32 par = ((g >> 1) & 1) ^ 1; // the release of tile g-2
                if (g >= 2) mbar_wait(kempty(g), par);
                rows(sk_a + (g & 1) * PW_QT, k + (long long)it.ks * qstride + (long long)it.h * PW_DQK, qstride, t * PW_BN, it.kn, 3);
                cp_arrive(kfull(g));
                if (g >= 2) mbar_wait(vempty(g), par);
                rows(sv_a + (g & 1) * PW_VT, v + (long long)it.ks * vstride + (long long)it.h * PW_DV, vstride, t * PW_BN, it.kn, 2);
                cp_arrive(vfull(g));
            }
        }
        cp_wait<0>();
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    // This thread's first row (of S and O) within an item, the second 8 on,
    // and its first column of S.
    const int rw = wg * 64 + (warp & 3) * 16 + (lane >> 2);
    const int kq = (lane & 3) * 2;
    const u64 dq = kmajor(sq_a + wg * 64 * 128);

    // S and O: 64 x 128 each, columns 8j + kq + {0,1} in [4j], [4j+1]
    // (row r0) and [4j+2], [4j+3] (row r1); P: tile t's probabilities as
    // the A fragments of its 8 k-steps.
    float s[64], o[64];
    u32 p[32];
    for (int c = 0;; c++) {
        mbar_wait(ifull(c), (c >> 1) & 1);
        const int i = ld_shared_i32(islot(c));
        mbar_arrive(iempty(c));
        if (i < 0) break;
        pw_item(i, blocks, cu_q, k_ranges, schedule, causal, it);
        const int r0 = it.q0 + rw, r1 = r0 + 8, off = it.kn - it.qn; // off: the causal offset of query 0
        const int lim0 = causal ? min(off + r0, it.kn - 1) : it.kn - 1;
        const int lim1 = causal ? min(off + r1, it.kn - 1) : it.kn - 1;
#pragma unroll
        for (int i = 0; i < 64; i++) o[i] = 0.f;
        float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f; // maxima in scaled log2 units

        if (TMA && it.ntiles > 0) mbar_wait(qfull, nq++ & 1);
        for (int t = 0; t < it.ntiles; t++, g++) {
            mbar_wait(kfull(g), (g >> 1) & 1);
            if (t > 0) mbar_wait(vfull(g - 1), ((g - 1) >> 1) & 1);
            fence_async_smem(); // the copies before the products read them
            wg_fence();
            const u64 dk = kmajor(sk_a + (g & 1) * PW_QT);
#pragma unroll
            for (int kk = 0; kk < PW_DQK / 16; kk++) {
                const u32 koff = ((kk >> 2) * PW_CB + (kk & 3) * 32) >> 4;
                pw_qk(s, dq + koff, dk + koff, kk > 0);
            }
            wg_commit();
            if (t > 0) {
                const u64 dv = pw_vdesc(sv_a + ((g - 1) & 1) * PW_VT);
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
            mbar_arrive(kempty(g)); // every thread: a branch here would hold P V's accumulators
            pw_arrive_if(qempty, t == it.ntiles - 1); // the item's last read of the queries

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
            if (t > 0) mbar_arrive(vempty(g - 1));
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
        if (it.ntiles > 0) { // the last tile's P V, and its values' release
            const int gl = g - 1;
            mbar_wait(vfull(gl), (gl >> 1) & 1);
            fence_async_smem();
            wg_fence();
            const u64 dv = pw_vdesc(sv_a + (gl & 1) * PW_VT);
#pragma unroll
            for (int kk = 0; kk < PW_BN / 16; kk++)
                pw_pv(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], dv + ((kk * 2048) >> 4));
            wg_commit();
            wg_wait<0>();
            reg_fence(o);
            mbar_arrive(vempty(gl));
        }

        // Row sums across the quad, then the output.
        l0 = quad_sum(l0);
        l1 = quad_sum(l1);
        const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
        if (r0 < it.qn) {
            bf16* dst = out + (long long)(it.qs + r0) * vstride + (long long)it.h * PW_DV + kq;
#pragma unroll
            for (int j = 0; j < PW_DV / 8; j++) *(u32*)(dst + 8 * j) = pack_bf16(o[4 * j] * inv0, o[4 * j + 1] * inv0);
            if ((lane & 3) == 0)
                lse[(long long)(it.qs + r0) * heads + it.h] = l0 > 0.f ? (m0 + __log2f(l0)) * 0.6931471805599453f : NEG_INF;
        }
        if (r1 < it.qn) {
            bf16* dst = out + (long long)(it.qs + r1) * vstride + (long long)it.h * PW_DV + kq;
#pragma unroll
            for (int j = 0; j < PW_DV / 8; j++) *(u32*)(dst + 8 * j) = pack_bf16(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
            if ((lane & 3) == 0)
                lse[(long long)(it.qs + r1) * heads + it.h] = l1 > 0.f ? (m1 + __log2f(l1)) * 0.6931471805599453f : NEG_INF;
        }
    }
}

// cp.async copies: the passes of fewer than 128 query or key rows, whose
// boxes a descriptor could not hold.
extern "C" __global__ void __launch_bounds__(PW_THREADS, 1)
    mha_prefill_wg(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                   bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_q,
                   const int* __restrict__ k_ranges, const int* __restrict__ schedule, int heads, int causal,
                   float scale_log2, int blocks, int* work) {
    prefill_wg<false>(q, k, v, out, lse, cu_q, k_ranges, schedule, heads, causal, scale_log2, blocks, work, nullptr, nullptr,
                      nullptr);
}

// TMA loads over the host's descriptors of q, k and v.
extern "C" __global__ void __launch_bounds__(PW_THREADS, 1)
    mha_prefill_tma(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                    bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_q,
                    const int* __restrict__ k_ranges, const int* __restrict__ schedule, int heads, int causal,
                    float scale_log2, int blocks, int* work, const __grid_constant__ TmaMap q_map,
                    const __grid_constant__ TmaMap k_map, const __grid_constant__ TmaMap v_map) {
    prefill_wg<true>(q, k, v, out, lse, cu_q, k_ranges, schedule, heads, causal, scale_log2, blocks, work, &q_map, &k_map,
                     &v_map);
}
