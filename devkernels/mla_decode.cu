// Absorbed-MLA decode for sglang's latent KV cache, with split-KV and a
// combine kernel: the paged dense decode (bf16 or FP8 cache) and DeepSeek
// sparse attention over each query token's top-k (bf16 or DeepSeek-V3.2's
// FP8 cache). Built ahead of time (images/) or by NVRTC for the host's GPU
// (sm_80 and newer: mma.sync, ldmatrix, cp.async).
//
// The layout, the cache formats and the loaders: mla_common.cuh.
//
// Work: the plan's schedule cuts each request's keys into chunks (items);
// one block runs one item for M query rows of its request (rows are token-
// major: row = t*heads + h), so every head of a head block shares each key
// tile read from memory, and the head blocks of one item are adjacent in
// the grid, so they read each tile while it is in L2. (For a sparse kernel
// every query token is a request of topk keys.) A block holds its M query
// rows in shared memory and streams key tiles of BN rows through a
// STAGES-deep cp.async pipeline; 8 warps compute S = QK^T on tensor cores
// (mma.sync m16n8k16, bf16 in, fp32 out), an online softmax in fp32 with the
// row maxima exchanged through shared memory, and O += PV with P through
// shared memory in bf16. An FP8 tile lands in a staging buffer and is
// converted into an f16 tile in shared memory before the MMAs, which then
// take f16 (queries rounded to f16 once, P in f16). A request
// cut into several chunks writes fp32 partial outputs and their LSE to the
// workspace; mla_combine merges them.

// The shared memory of mla_decode_body<M, STAGES, FMT, *>, byte offsets
// from its start: the queries (M x QSTRIDE bf16), the key tiles (the
// stages, or the one an FP8 tile is dequantised into: NT x BN x QSTRIDE),
// P (M x PSTRIDE), the partial row maxima and sums (CGQ x M floats each;
// the sums are reused for l at the end, CG x M), and the staged FP8 tiles
// (STAGES x BN rows as cached).
template <int M, int STAGES, int FMT>
struct NarrowLayout {
    static constexpr int CG = 8 / (M / 16);                    // column groups
    static constexpr int NQ = (BN / CG >= 8) ? BN / CG : 8;    // keys per warp in S
    static constexpr int CGQ = BN / NQ;                        // column groups that compute S
    static constexpr int NT = FMT == FMT_BF16 ? STAGES : 1;    // key tiles
    static constexpr int q = 0;
    static constexpr int kv = q + 2 * M * QSTRIDE;
    static constexpr int p = kv + 2 * NT * BN * QSTRIDE;
    static constexpr int red_max = p + 2 * M * PSTRIDE;
    static constexpr int red_sum = red_max + 4 * CGQ * M;
    static constexpr int raw = red_sum + 4 * CGQ * M;
    static constexpr int bytes = raw + (FMT == FMT_BF16 ? 0 : STAGES * BN * row_bytes(FMT));
};

template <int M, int STAGES, int FMT, bool SPARSE>
__device__ __forceinline__ void mla_decode_body(const QView& q, const Keys& ks, bf16* __restrict__ out,
                                                float* __restrict__ lse, const Item it,
                                                const ReqInfo* __restrict__ reqs,
                                                bf16* __restrict__ part_o, float* __restrict__ part_lse, int heads,
                                                float scale_log2, int hb) {
    constexpr int RG = M / 16;                   // row groups of 16
    constexpr int CG = 8 / RG;                   // column groups
    constexpr int NQ = (BN / CG >= 8) ? BN / CG : 8; // keys per warp in S
    constexpr int CGQ = BN / NQ;                 // column groups that compute S
    constexpr int NTQ = NQ / 8;
    constexpr int VC = DV / CG;                  // output columns per warp
    constexpr int NTV = VC / 8;
    constexpr int RB = row_bytes(FMT), CH = RB / 16;    // cached bytes and 16-byte chunks per key
    constexpr int ITERS = (BN * CH + NTHREADS - 1) / NTHREADS;
    constexpr int NT = FMT == FMT_BF16 ? STAGES : 1;    // key tiles: the stages, or the one dequantised
    constexpr bool H = FMT != FMT_BF16;                 // f16 tiles, queries and P

    using L = NarrowLayout<M, STAGES, FMT>;
    static_assert(L::CG == CG && L::CGQ == CGQ && L::NT == NT, "NarrowLayout follows the body's split");
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* sq = (bf16*)(smem + L::q);
    bf16* skv = (bf16*)(smem + L::kv);
    bf16* sp = (bf16*)(smem + L::p);
    float* red_max = (float*)(smem + L::red_max);
    float* red_sum = (float*)(smem + L::red_sum);
    unsigned char* sraw = smem + L::raw;

    const ReqInfo rq = reqs[it.req];
    const int* krows = key_rows<SPARSE>(ks, it.req); // read beside the request
    const int rows = rq.q_len * heads;
    const int row0 = hb * M;
    if (row0 >= rows) return;
    pdl_wait(); // the queries, the cache, the partials (MLA_ITEMS)

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int rg = warp / CG, cg = warp - rg * CG;
    // FMT_FP8: the layer scale multiplies every score and the output.
    const float kv_mul = FMT == FMT_FP8 ? ks.kv_scale : 1.f;
    scale_log2 *= kv_mul;
    // Stage s of the pipeline, and where chunk ch of key r lands in it.
    auto stage = [&](int s) -> u32 {
        return FMT == FMT_BF16 ? smem_addr(skv + s * BN * QSTRIDE) : smem_addr(sraw + s * BN * RB);
    };
    auto stage_dst = [](int r, int ch) -> u32 { return FMT == FMT_BF16 ? (r * QSTRIDE + ch * 8) * 2 : r * RB + ch * 16; };
    auto tile_dst = [](int r, int ch) -> u32 { return (r * QSTRIDE + ch * 8) * 2; };

    // Queries: M rows starting at row0 (zero past the request's rows).
    load_queries<M>(smem_addr(sq), [](int r, int ch) -> u32 { return (r * QSTRIDE + ch * 8) * 2; }, q,
                    rq.q_start * heads + row0, rows - row0, heads, tid);
    const int ntiles = (it.kv_end - it.kv_begin + BN - 1) / BN;
    int pg[ITERS];
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < ntiles) {
            fetch_rows<SPARSE, BN, CH, ITERS>(pg, ks, krows, it.kv_begin + s * BN, it.kv_end, tid);
            issue_rows<SPARSE, BN, CH, ITERS>(stage(s), stage_dst, ks, pg, it.kv_begin + s * BN, tid);
        }
        cp_commit(); // the queries ride in the first group
    }
    if (STAGES - 1 < ntiles)
        fetch_rows<SPARSE, BN, CH, ITERS>(pg, ks, krows, it.kv_begin + (STAGES - 1) * BN, it.kv_end, tid);

    // This thread's two rows (within the block) and their causal limits.
    const int lr0 = rg * 16 + (lane >> 2), lr1 = lr0 + 8;
    const int causal0 = rq.seq_len - rq.q_len + (row0 + lr0) / heads; // last key row lr0 may see
    const int causal1 = rq.seq_len - rq.q_len + (row0 + lr1) / heads;

    float o[NTV][4];
#pragma unroll
    for (int n = 0; n < NTV; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;

    const u32 sq_a = smem_addr(sq), sp_a = smem_addr(sp);
    for (int t = 0; t < ntiles; t++) {
        cp_wait<STAGES - 2>();
        __syncthreads();
        if (H) {
            dequant_tile<FMT, BN>(sraw + (t % STAGES) * BN * RB, (unsigned char*)skv, tile_dst, tid);
            if (t == 0) queries_f16<M>((unsigned char*)sq, tile_dst, tid); // they landed with the first tile
        }
        {
            int nt = t + STAGES - 1;
            if (nt < ntiles) issue_rows<SPARSE, BN, CH, ITERS>(stage(nt % STAGES), stage_dst, ks, pg, it.kv_begin + nt * BN, tid);
            cp_commit();
            if (nt + 1 < ntiles)
                fetch_rows<SPARSE, BN, CH, ITERS>(pg, ks, krows, it.kv_begin + (nt + 1) * BN, it.kv_end, tid);
        }
        if (H) __syncthreads(); // the dequantised tile (and the queries) are whole
        const bf16* sk = FMT == FMT_BF16 ? skv + (t % STAGES) * BN * QSTRIDE : skv;
        const u32 sk_a = smem_addr(sk);
        const int j0 = it.kv_begin + t * BN;

        float s[NTQ][4];
        const bool qk = cg < CGQ;
        if (qk) {
            // Sparse: which of this thread's keys are slots, read before the
            // MMAs so that the loads overlap them.
            u32 valid = 0;
            if (SPARSE) {
#pragma unroll
                for (int n = 0; n < NTQ; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int j = j0 + cg * NQ + n * 8 + (lane & 3) * 2 + e;
                        if (j < it.kv_end && sparse_valid(ks, krows, j)) valid |= 1u << (n * 2 + e);
                    }
            }
            float s2[NTQ][4]; // odd k-steps: two independent accumulator chains
#pragma unroll
            for (int n = 0; n < NTQ; n++)
                s[n][0] = s[n][1] = s[n][2] = s[n][3] = s2[n][0] = s2[n][1] = s2[n][2] = s2[n][3] = 0.f;
            const u32 a_addr = sq_a + (((rg * 16 + (lane & 15)) * QSTRIDE + (lane >> 4) * 8) * 2);
            auto kstep = [&](int kk, float(&acc)[NTQ][4]) {
                u32 a0, a1, a2, a3;
                ldsm_x4(a_addr + kk * 32, a0, a1, a2, a3);
                if (NTQ == 1) {
                    u32 b0, b1;
                    ldsm_x2(sk_a + (((cg * NQ + (lane & 7)) * QSTRIDE + kk * 16 + ((lane >> 3) & 1) * 8) * 2), b0, b1);
                    mma_<H>(acc[0], a0, a1, a2, a3, b0, b1);
                } else {
#pragma unroll
                    for (int n = 0; n < NTQ; n += 2) {
                        u32 b0, b1, b2, b3;
                        ldsm_x4(sk_a + (((cg * NQ + n * 8 + (lane & 7) + (lane >> 4) * 8) * QSTRIDE + kk * 16 +
                                         ((lane >> 3) & 1) * 8) * 2),
                                b0, b1, b2, b3);
                        mma_<H>(acc[n], a0, a1, a2, a3, b0, b1);
                        mma_<H>(acc[n + 1], a0, a1, a2, a3, b2, b3);
                    }
                }
            };
#pragma unroll 2
            for (int kk = 0; kk < DQK / 16; kk += 2) {
                kstep(kk, s);
                kstep(kk + 1, s2);
            }
#pragma unroll
            for (int n = 0; n < NTQ; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[n][e] += s2[n][e];
            // Scale, mask, row maxima over this warp's keys.
            float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
            for (int n = 0; n < NTQ; n++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int j = j0 + cg * NQ + n * 8 + (lane & 3) * 2 + e;
                    bool in = SPARSE ? (valid >> (n * 2 + e)) & 1 : j < it.kv_end;
                    s[n][e] = (in && j <= causal0) ? s[n][e] * scale_log2 : NEG_INF;
                    s[n][2 + e] = (in && j <= causal1) ? s[n][2 + e] * scale_log2 : NEG_INF;
                    mx0 = fmaxf(mx0, s[n][e]);
                    mx1 = fmaxf(mx1, s[n][2 + e]);
                }
            }
            mx0 = quad_max(mx0);
            mx1 = quad_max(mx1);
            if ((lane & 3) == 0) {
                red_max[cg * M + lr0] = mx0;
                red_max[cg * M + lr1] = mx1;
            }
        }
        __syncthreads();
        float mt0 = m0, mt1 = m1;
#pragma unroll
        for (int g = 0; g < CGQ; g++) {
            mt0 = fmaxf(mt0, red_max[g * M + lr0]);
            mt1 = fmaxf(mt1, red_max[g * M + lr1]);
        }
        const float mu0 = mt0 == NEG_INF ? 0.f : mt0, mu1 = mt1 == NEG_INF ? 0.f : mt1;
        const float al0 = fast_exp2(m0 - mu0), al1 = fast_exp2(m1 - mu1);
        m0 = mt0;
        m1 = mt1;
        l0 *= al0;
        l1 *= al1;
#pragma unroll
        for (int n = 0; n < NTV; n++) {
            o[n][0] *= al0;
            o[n][1] *= al0;
            o[n][2] *= al1;
            o[n][3] *= al1;
        }
        if (qk) {
            float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
            for (int n = 0; n < NTQ; n++) {
                float p0 = fast_exp2(s[n][0] - mu0), p1 = fast_exp2(s[n][1] - mu0);
                float p2 = fast_exp2(s[n][2] - mu1), p3 = fast_exp2(s[n][3] - mu1);
                u32 w01 = pack_<H>(p0, p1), w23 = pack_<H>(p2, p3);
                sum0 += p0 + p1;
                sum1 += p2 + p3;
                int col = cg * NQ + n * 8 + (lane & 3) * 2;
                *(u32*)(sp + lr0 * PSTRIDE + col) = w01;
                *(u32*)(sp + lr1 * PSTRIDE + col) = w23;
            }
            sum0 = quad_sum(sum0);
            sum1 = quad_sum(sum1);
            if ((lane & 3) == 0) {
                red_sum[cg * M + lr0] = sum0;
                red_sum[cg * M + lr1] = sum1;
            }
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < CGQ; g++) {
            l0 += red_sum[g * M + lr0];
            l1 += red_sum[g * M + lr1];
        }
        // O += P V over this warp's VC output columns.
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            u32 a0, a1, a2, a3;
            ldsm_x4(sp_a + (((rg * 16 + (lane & 15)) * PSTRIDE + kk * 16 + (lane >> 4) * 8) * 2), a0, a1, a2, a3);
#pragma unroll
            for (int n = 0; n < NTV; n += 2) {
                u32 b0, b1, b2, b3;
                ldsm_x4_t(sk_a + (((kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * QSTRIDE + cg * VC + n * 8 +
                                   (lane >> 4) * 8) * 2),
                          b0, b1, b2, b3);
                mma_<H>(o[n], a0, a1, a2, a3, b0, b1);
                mma_<H>(o[n + 1], a0, a1, a2, a3, b2, b3);
            }
        }
    }
    cp_wait<0>();

    // Epilogue: normalise, then the final output or a partial one.
    const float inv0 = l0 > 0.f ? kv_mul / l0 : 0.f, inv1 = l1 > 0.f ? kv_mul / l1 : 0.f;
    const float lse0 = l0 > 0.f ? (m0 + __log2f(l0)) * 0.6931471805599453f : NEG_INF;
    const float lse1 = l1 > 0.f ? (m1 + __log2f(l1)) * 0.6931471805599453f : NEG_INF;
    const int gr0 = row0 + lr0, gr1 = row0 + lr1; // rows within the request
    const bool ok0 = gr0 < rows, ok1 = gr1 < rows;
    const bool whole = rq.num_splits == 1;
    const long long p0 = whole ? (long long)rq.q_start * heads + gr0 : (long long)rq.part_base + (long long)it.split * rows + gr0;
    const long long p1 = whole ? (long long)rq.q_start * heads + gr1 : (long long)rq.part_base + (long long)it.split * rows + gr1;
    bf16* o0 = (whole ? out : part_o) + p0 * DV + cg * VC;
    bf16* o1 = (whole ? out : part_o) + p1 * DV + cg * VC;
    static_assert(NTV % 2 == 0, "quad_store16 takes groups in pairs");
#pragma unroll
    for (int n = 0; n < NTV; n += 2) {
        quad_store16(o0 + n * 8, pack_bf16(o[n][0] * inv0, o[n][1] * inv0), pack_bf16(o[n + 1][0] * inv0, o[n + 1][1] * inv0),
                     lane & 3, ok0);
        quad_store16(o1 + n * 8, pack_bf16(o[n][2] * inv1, o[n][3] * inv1), pack_bf16(o[n + 1][2] * inv1, o[n + 1][3] * inv1),
                     lane & 3, ok1);
    }
    if (cg == 0 && (lane & 3) == 0) {
        float* l = whole ? lse : part_lse;
        if (ok0) l[p0] = lse0;
        if (ok1) l[p1] = lse1;
    }
}


// The wide variant for 64 query rows (the compute-bound shapes: 64 and 128
// heads, or 16 heads with 4 query tokens): key tiles of 64 rows, two stages,
// and no padding (16-byte chunks XOR-swizzled within each 128-byte line), so
// that 64 query rows and two 64-key tiles fit in shared memory. S = QK^T is
// split over the warps as 4 row groups x 2 key halves (16 x 32 per warp),
// O += PV as 2 row halves x 4 column quarters (32 x 128 per warp), which
// reads less shared memory per MMA than a 16 x 256 split.
#define WBN 64

// The shared memory of mla_decode_wide<FMT, *>, byte offsets from its
// start: 64 query rows (1152 bytes each), the key tiles (two stages, or
// the one an FP8 tile is dequantised into), P (64 x 64 bf16), the partial
// row maxima and sums (2 x 64 floats each), the running row maxima (64),
// and the next FP8 tile, staged (64 rows as cached).
template <int FMT>
struct WideLayout {
    static constexpr int M = 64, RB = DQK * 2, PB = WBN * 2;
    static constexpr int NT = FMT == FMT_BF16 ? 2 : 1;
    static constexpr int q = 0;
    static constexpr int kv = q + M * RB;
    static constexpr int p = kv + NT * WBN * RB;
    static constexpr int red_max = p + M * PB;
    static constexpr int red_sum = red_max + 4 * 2 * M;
    static constexpr int m_row = red_sum + 4 * 2 * M;
    static constexpr int raw = m_row + 4 * M;
    static constexpr int bytes = raw + (FMT == FMT_BF16 ? 0 : WBN * row_bytes(FMT));
};

template <int FMT, bool SPARSE>
__device__ __forceinline__ void mla_decode_wide(const QView& q, const Keys& ks, bf16* __restrict__ out,
                                                float* __restrict__ lse, const Item it,
                                                const ReqInfo* __restrict__ reqs,
                                                bf16* __restrict__ part_o, float* __restrict__ part_lse, int heads,
                                                float scale_log2, int hb) {
    constexpr int M = 64;
    constexpr int RB = DQK * 2;       // bytes per Q/K row: 1152 = 9 lines
    constexpr int PB = WBN * 2;       // bytes per P row: 128 = 1 line
    constexpr int KB = row_bytes(FMT), CH = KB / 16; // cached bytes and 16-byte chunks per key
    constexpr int ITERS = (WBN * CH + NTHREADS - 1) / NTHREADS;
    constexpr int NT = FMT == FMT_BF16 ? 2 : 1;      // key tiles: two stages, or the one dequantised
    constexpr bool H = FMT != FMT_BF16;              // f16 tiles, queries and P
    using L = WideLayout<FMT>;
    static_assert(L::RB == RB && L::PB == PB && L::NT == NT, "WideLayout follows the body");
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* sq = smem + L::q;
    unsigned char* skv = smem + L::kv;
    unsigned char* sp = smem + L::p;
    float* red_max = (float*)(smem + L::red_max);
    float* red_sum = (float*)(smem + L::red_sum);
    float* m_row = (float*)(smem + L::m_row);
    unsigned char* sraw = smem + L::raw;

    const ReqInfo rq = reqs[it.req];
    const int* krows = key_rows<SPARSE>(ks, it.req); // read beside the request
    const int rows = rq.q_len * heads;
    const int row0 = hb * M;
    if (row0 >= rows) return;
    pdl_wait(); // the queries, the cache, the partials (MLA_ITEMS)

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const u32 sq_a = smem_addr(sq), skv_a = smem_addr(skv), sp_a = smem_addr(sp);
    const float kv_mul = FMT == FMT_FP8 ? ks.kv_scale : 1.f; // FMT_FP8: scales every score and the output
    scale_log2 *= kv_mul;
    // Where tile t lands: a bf16 stage (swizzled), or the FP8 staging tile.
    auto stage = [&](int t) -> u32 { return FMT == FMT_BF16 ? skv_a + (t & 1) * WBN * RB : smem_addr(sraw); };
    auto stage_dst = [](int r, int ch) -> u32 { return FMT == FMT_BF16 ? swz(r, ch, RB) : r * KB + ch * 16; };
    auto tile_dst = [](int r, int ch) -> u32 { return swz(r, ch, RB); };

    load_queries<M>(sq_a, [](int r, int ch) -> u32 { return swz(r, ch, RB); }, q, rq.q_start * heads + row0, rows - row0,
                    heads, tid);
    if (tid < M) m_row[tid] = NEG_INF;
    const int ntiles = (it.kv_end - it.kv_begin + WBN - 1) / WBN;
    int pg[ITERS];
    fetch_rows<SPARSE, WBN, CH, ITERS>(pg, ks, krows, it.kv_begin, it.kv_end, tid);
    issue_rows<SPARSE, WBN, CH, ITERS>(stage(0), stage_dst, ks, pg, it.kv_begin, tid);
    cp_commit();
    if (ntiles > 1) fetch_rows<SPARSE, WBN, CH, ITERS>(pg, ks, krows, it.kv_begin + WBN, it.kv_end, tid);

    // S layout: warp = 4 row groups x 2 key halves.
    const int qr = warp & 3, qc = warp >> 2;
    const int sr0 = qr * 16 + (lane >> 2), sr1 = sr0 + 8; // S rows of this thread
    const int causal_s0 = rq.seq_len - rq.q_len + (row0 + sr0) / heads;
    const int causal_s1 = rq.seq_len - rq.q_len + (row0 + sr1) / heads;
    // O layout: warp = 2 row halves x 4 column quarters; rows pr[0..3].
    const int orh = warp & 1, oc = warp >> 1;
    int pr[4];
#pragma unroll
    for (int k = 0; k < 4; k++) pr[k] = orh * 32 + (k >> 1) * 16 + (lane >> 2) + (k & 1) * 8;

    float o[2][16][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int n = 0; n < 16; n++) o[a][n][0] = o[a][n][1] = o[a][n][2] = o[a][n][3] = 0.f;
    float mo[4] = {NEG_INF, NEG_INF, NEG_INF, NEG_INF}, l[4] = {0.f, 0.f, 0.f, 0.f};

    for (int t = 0; t < ntiles; t++) {
        cp_wait<0>();
        __syncthreads();
        if (H) {
            dequant_tile<FMT, WBN>(sraw, skv, tile_dst, tid);
            if (t == 0) queries_f16<M>(sq, tile_dst, tid); // they landed with the first tile
            __syncthreads(); // the tile (and the queries) whole, the staging tile free
        }
        if (t + 1 < ntiles) {
            issue_rows<SPARSE, WBN, CH, ITERS>(stage(t + 1), stage_dst, ks, pg, it.kv_begin + (t + 1) * WBN, tid);
            cp_commit();
            if (t + 2 < ntiles) fetch_rows<SPARSE, WBN, CH, ITERS>(pg, ks, krows, it.kv_begin + (t + 2) * WBN, it.kv_end, tid);
        }
        const u32 sk_a = FMT == FMT_BF16 ? skv_a + (t & 1) * WBN * RB : skv_a;
        const int j0 = it.kv_begin + t * WBN;

        // Sparse: which of this thread's keys are slots, read before the
        // MMAs so that the loads overlap them.
        u32 valid = 0;
        if (SPARSE) {
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = j0 + qc * 32 + n * 8 + (lane & 3) * 2 + e;
                    if (j < it.kv_end && sparse_valid(ks, krows, j)) valid |= 1u << (n * 2 + e);
                }
        }
        // S (16 rows x 32 keys), four independent accumulators.
        float s[4][4];
#pragma unroll
        for (int n = 0; n < 4; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll 4
        for (int kk = 0; kk < DQK / 16; kk++) {
            u32 a0, a1, a2, a3;
            ldsm_x4(sq_a + swz(qr * 16 + (lane & 15), kk * 2 + (lane >> 4), RB), a0, a1, a2, a3);
#pragma unroll
            for (int n = 0; n < 4; n += 2) {
                u32 b0, b1, b2, b3;
                ldsm_x4(sk_a + swz(qc * 32 + n * 8 + (lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1), RB), b0,
                        b1, b2, b3);
                mma_<H>(s[n], a0, a1, a2, a3, b0, b1);
                mma_<H>(s[n + 1], a0, a1, a2, a3, b2, b3);
            }
        }
        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int n = 0; n < 4; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int j = j0 + qc * 32 + n * 8 + (lane & 3) * 2 + e;
                bool in = SPARSE ? (valid >> (n * 2 + e)) & 1 : j < it.kv_end;
                s[n][e] = (in && j <= causal_s0) ? s[n][e] * scale_log2 : NEG_INF;
                s[n][2 + e] = (in && j <= causal_s1) ? s[n][2 + e] * scale_log2 : NEG_INF;
                mx0 = fmaxf(mx0, s[n][e]);
                mx1 = fmaxf(mx1, s[n][2 + e]);
            }
        }
        mx0 = quad_max(mx0);
        mx1 = quad_max(mx1);
        if ((lane & 3) == 0) {
            red_max[qc * M + sr0] = mx0;
            red_max[qc * M + sr1] = mx1;
        }
        __syncthreads();
        {
            // P for the S rows, with the new maxima (m_row is the old ones).
            float mt0 = fmaxf(m_row[sr0], fmaxf(red_max[sr0], red_max[M + sr0]));
            float mt1 = fmaxf(m_row[sr1], fmaxf(red_max[sr1], red_max[M + sr1]));
            const float mu0 = mt0 == NEG_INF ? 0.f : mt0, mu1 = mt1 == NEG_INF ? 0.f : mt1;
            float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
            for (int n = 0; n < 4; n++) {
                float p0 = fast_exp2(s[n][0] - mu0), p1 = fast_exp2(s[n][1] - mu0);
                float p2 = fast_exp2(s[n][2] - mu1), p3 = fast_exp2(s[n][3] - mu1);
                sum0 += p0 + p1;
                sum1 += p2 + p3;
                int col = qc * 32 + n * 8 + (lane & 3) * 2; // key within the tile
                *(u32*)(sp + swz(sr0, col >> 3, PB) + (col & 7) * 2) = pack_<H>(p0, p1);
                *(u32*)(sp + swz(sr1, col >> 3, PB) + (col & 7) * 2) = pack_<H>(p2, p3);
            }
            sum0 = quad_sum(sum0);
            sum1 = quad_sum(sum1);
            if ((lane & 3) == 0) {
                red_sum[qc * M + sr0] = sum0;
                red_sum[qc * M + sr1] = sum1;
            }
        }
        __syncthreads();
        // Rescale O for the O rows, then O += P V.
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int r = pr[k];
            float mt = fmaxf(mo[k], fmaxf(red_max[r], red_max[M + r]));
            float mu = mt == NEG_INF ? 0.f : mt;
            float al = fast_exp2(mo[k] - mu);
            mo[k] = mt;
            l[k] = l[k] * al + red_sum[r] + red_sum[M + r];
#pragma unroll
            for (int n = 0; n < 16; n++) {
                o[k >> 1][n][(k & 1) * 2 + 0] *= al;
                o[k >> 1][n][(k & 1) * 2 + 1] *= al;
            }
        }
        if (oc == 0 && (lane & 3) == 0) {
#pragma unroll
            for (int k = 0; k < 4; k++) m_row[pr[k]] = mo[k]; // read again only after the next barrier
        }
#pragma unroll
        for (int kk = 0; kk < WBN / 16; kk++) {
            u32 a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                ldsm_x4(sp_a + swz(orh * 32 + mt * 16 + (lane & 15), kk * 2 + (lane >> 4), PB), a[mt][0], a[mt][1],
                        a[mt][2], a[mt][3]);
#pragma unroll
            for (int n = 0; n < 16; n += 2) {
                u32 b0, b1, b2, b3;
                ldsm_x4_t(sk_a + swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, (oc * 128 + n * 8) / 8 + (lane >> 4),
                                     RB),
                          b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma_<H>(o[mt][n], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b0, b1);
                    mma_<H>(o[mt][n + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b2, b3);
                }
            }
        }
    }

    // Epilogue for the four O rows of this thread.
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int gr = row0 + pr[k];
        const bool ok = gr < rows; // the same across a quad (quad_store16)
        const float inv = l[k] > 0.f ? kv_mul / l[k] : 0.f;
        const float ls = l[k] > 0.f ? (mo[k] + __log2f(l[k])) * 0.6931471805599453f : NEG_INF;
        const int mt = k >> 1, h = (k & 1) * 2;
        const bool whole = rq.num_splits == 1;
        const long long p = whole ? (long long)rq.q_start * heads + gr : (long long)rq.part_base + (long long)it.split * rows + gr;
        bf16* dst = (whole ? out : part_o) + p * DV + oc * 128;
#pragma unroll
        for (int n = 0; n < 16; n += 2)
            quad_store16(dst + n * 8, pack_bf16(o[mt][n][h] * inv, o[mt][n][h + 1] * inv),
                         pack_bf16(o[mt][n + 1][h] * inv, o[mt][n + 1][h + 1] * inv), lane & 3, ok);
        if (ok && oc == 0 && (lane & 3) == 0) (whole ? lse : part_lse)[p] = ls;
    }
}

// Blocks per multiprocessor and body: 16 rows fit two blocks of two stages
// on a multiprocessor (the memory-bound shapes; measured on an H200 against
// one block of four stages, 1.0-1.6x faster from batch 16 up); 32 rows take
// one block of four stages; 64 rows are the wide variant. Each in the four
// forms: dense bf16, dense FP8, sparse bf16, sparse FP8 (FMT_DSA); the
// dense FP8 16-row body keeps three of its smaller tiles in flight
// (devkernels.go's variants).
MLA_DECODE_ENTRY(mla_decode_m16, 2, mla_decode_body, NarrowLayout, (16, 2, FMT_BF16))
MLA_DECODE_ENTRY(mla_decode_m32, 1, mla_decode_body, NarrowLayout, (32, 4, FMT_BF16))
MLA_DECODE_ENTRY(mla_decode_m64, 1, mla_decode_wide, WideLayout, (FMT_BF16))
MLA_DECODE_FP8_ENTRY(mla_decode_fp8_m16, 2, mla_decode_body, NarrowLayout, (16, 3, FMT_FP8))
MLA_DECODE_FP8_ENTRY(mla_decode_fp8_m32, 1, mla_decode_body, NarrowLayout, (32, 4, FMT_FP8))
MLA_DECODE_FP8_ENTRY(mla_decode_fp8_m64, 1, mla_decode_wide, WideLayout, (FMT_FP8))
MLA_SPARSE_ENTRY(mla_sparse_m16, 2, mla_decode_body, NarrowLayout, (16, 2, FMT_BF16))
MLA_SPARSE_ENTRY(mla_sparse_m32, 1, mla_decode_body, NarrowLayout, (32, 4, FMT_BF16))
MLA_SPARSE_ENTRY(mla_sparse_m64, 1, mla_decode_wide, WideLayout, (FMT_BF16))
MLA_SPARSE_ENTRY(mla_sparse_fp8_m16, 2, mla_decode_body, NarrowLayout, (16, 2, FMT_DSA))
MLA_SPARSE_ENTRY(mla_sparse_fp8_m32, 1, mla_decode_body, NarrowLayout, (32, 4, FMT_DSA))
MLA_SPARSE_ENTRY(mla_sparse_fp8_m64, 1, mla_decode_wide, WideLayout, (FMT_DSA))

// Merges the partial outputs of every request cut into several chunks, for
// a batch of at most 1024 query rows (the plan's combineManyRows; a longer
// one runs mla_combine_rows): one block per query row and column range
// (blockIdx.x the request, blockIdx.y the row, blockIdx.z the range: DV /
// gridDim.z columns, z 1, 2 or 4; the plan takes 4 for a batch of at most
// 128 rows, so that its few rows still spread over the GPU); its 8 warps
// share the chunks, each lane owning 4 of every 128 columns, so a row cut
// into many chunks is read with many loads in flight.
//
// Each warp merges its chunks online (the largest LSE so far, and the
// weighted sum and the weight under it, rescaled when a larger LSE comes),
// J chunks at a time, their LSEs and partial outputs loaded together: a
// merge of 8 J chunks takes one trip to memory, not one for the LSEs and one
// for the outputs. Two ways, by the range's width:
// - Whole rows (a batch of 129 to 1024 rows, a few chunks a row):
//   combine_warp, J 2, every lane loading the LSE of each chunk.
// - Ranges of 128 or 256 columns (the plan's batches of at most 128 rows,
//   whose rows are cut into the most chunks: 64 or 128 at batch 1 on 132
//   multiprocessors): combine_warp_lanes, J 16 or 8, lane j loading the
//   LSE of the warp's chunk j and every lane holding its columns of the J
//   chunks as loaded, bf16 pairs, until their weights are known. A row of
//   batch 1 cut into 128 chunks takes one trip, not four (16 heads, 16384
//   keys: 0.91-0.93x the layer's time on an H100); whole rows merged this
//   way, J 4, took 1.03x the time of a 16-head batch of 16
//   (docs/bench/h100-2026-12-07-cb.md).
// Either holds at most 34 registers of loads and LSEs, so that four blocks
// fit a multiprocessor (__launch_bounds__): a batch of 128 rows cut into
// four ranges, 512 blocks, is one wave of an H100. The warps' sums then
// merge the same way in shared memory.
//
// A larger LSE m rescales the warp's running sums to it.
template <int NV>
__device__ __forceinline__ void combine_rescale(float m, float& mx, float& wsum, float (&acc)[16]) {
    const float sc = __expf(mx - m); // 0 while mx is NEG_INF
    mx = m;
    wsum *= sc;
#pragma unroll
    for (int i = 0; i < 4 * NV; i++) acc[i] *= sc;
}
// Adds four columns of a chunk, weighted by w, to acc[0..3].
__device__ __forceinline__ void combine_add(float* acc, float w, float4 f) {
    acc[0] += w * f.x;
    acc[1] += w * f.y;
    acc[2] += w * f.z;
    acc[3] += w * f.w;
}
template <int NV, int J>
__device__ __forceinline__ void combine_warp(const bf16* __restrict__ part_o, const float* __restrict__ part_lse,
                                             long long base, int rows, int n, int col0, int warp, int lane,
                                             float& mx, float& wsum, float (&acc)[16]) {
    for (int s0 = warp; s0 < n; s0 += 8 * J) {
        // Chunks s0, s0 + 8, ...: the LSE and this lane's columns of each,
        // in flight together.
        float ls[J];
        float4 v[J][NV];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int s = s0 + 8 * j;
            ls[j] = NEG_INF;
#pragma unroll
            for (int i = 0; i < NV; i++) v[j][i] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (s < n) {
                const long long p = base + (long long)s * rows;
                ls[j] = part_lse[p];
                const bf16* src = part_o + p * DV + col0;
#pragma unroll
                for (int i = 0; i < NV; i++) v[j][i] = part_float4(part_load4(src + (lane + i * 32) * 4));
            }
        }
        float m = mx;
#pragma unroll
        for (int j = 0; j < J; j++) m = fmaxf(m, ls[j]);
        if (m == NEG_INF) continue; // every chunk so far empty
        combine_rescale<NV>(m, mx, wsum, acc);
#pragma unroll
        for (int j = 0; j < J; j++) {
            const float w = ls[j] == NEG_INF ? 0.f : __expf(ls[j] - mx);
            wsum += w;
#pragma unroll
            for (int i = 0; i < NV; i++) combine_add(acc + 4 * i, w, v[j][i]);
        }
    }
}
template <int NV, int J>
__device__ __forceinline__ void combine_warp_lanes(const bf16* __restrict__ part_o, const float* __restrict__ part_lse,
                                                   long long base, int rows, int n, int col0, int warp, int lane,
                                                   float& mx, float& wsum, float (&acc)[16]) {
    static_assert(J <= 32, "a lane loads the LSE of one chunk");
    for (int s0 = warp; s0 < n; s0 += 8 * J) {
        // Chunks s0, s0 + 8, ..., s0 + 8 (J - 1): lane j's LSE of chunk j,
        // and this lane's columns of each, in flight together.
        float ls = NEG_INF;
        if (lane < J && s0 + 8 * lane < n) ls = part_lse[base + (long long)(s0 + 8 * lane) * rows];
        uint2 v[J][NV];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int s = s0 + 8 * j;
            const bf16* src = part_o + (base + (long long)s * rows) * DV + col0;
#pragma unroll
            for (int i = 0; i < NV; i++) v[j][i] = s < n ? part_load4(src + (lane + i * 32) * 4) : make_uint2(0u, 0u);
        }
        float m = ls;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
        m = fmaxf(m, mx);
        if (m == NEG_INF) continue; // every chunk so far empty
        combine_rescale<NV>(m, mx, wsum, acc);
        const float wl = ls == NEG_INF ? 0.f : __expf(ls - mx);
#pragma unroll
        for (int j = 0; j < J; j++) {
            const float w = __shfl_sync(0xffffffff, wl, j);
            wsum += w;
#pragma unroll
            for (int i = 0; i < NV; i++) combine_add(acc + 4 * i, w, part_float4(v[j][i]));
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 4)
    mla_combine(bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ requests,
                const bf16* __restrict__ part_o, const float* __restrict__ part_lse, int heads, int batch) {
    __shared__ float red[8][DV];
    __shared__ float wred[2][8];
    const int r = blockIdx.x, row = blockIdx.y;
    const int width = DV / gridDim.z, col0 = blockIdx.z * width, nv = width / 128;
    // The schedule wrote the requests before the decode (this launch's
    // predecessor) passed its own wait, so they are read before this one's.
    ReqInfo rq = {};
    if (r < batch) rq = ((const ReqInfo*)requests)[r];
    pdl_wait(); // the decode's partial outputs
    pdl_launch_dependents();
    if (r >= batch) return;
    const int rows = rq.q_len * heads;
    if (rq.num_splits <= 1 || row >= rows) return;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const long long base = rq.part_base + row;
    float mx = NEG_INF, wsum = 0.f, acc[16];
#pragma unroll
    for (int i = 0; i < 16; i++) acc[i] = 0.f;
    if (nv == 1)
        combine_warp_lanes<1, 16>(part_o, part_lse, base, rows, rq.num_splits, col0, warp, lane, mx, wsum, acc);
    else if (nv == 2)
        combine_warp_lanes<2, 8>(part_o, part_lse, base, rows, rq.num_splits, col0, warp, lane, mx, wsum, acc);
    else
        combine_warp<4, 2>(part_o, part_lse, base, rows, rq.num_splits, col0, warp, lane, mx, wsum, acc);
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (i < nv)
            *(float4*)&red[warp][(lane + i * 32) * 4] = make_float4(acc[i * 4], acc[i * 4 + 1], acc[i * 4 + 2], acc[i * 4 + 3]);
    if (lane == 0) {
        wred[0][warp] = mx;
        wred[1][warp] = wsum;
    }
    __syncthreads();
    // Each warp's sums, rescaled to the largest LSE of all.
    float m = wred[0][0], f[8];
#pragma unroll
    for (int w = 1; w < 8; w++) m = fmaxf(m, wred[0][w]);
    float ws = 0.f;
#pragma unroll
    for (int w = 0; w < 8; w++) {
        f[w] = wred[0][w] == NEG_INF ? 0.f : __expf(wred[0][w] - m);
        ws += f[w] * wred[1][w];
    }
    const float inv = ws > 0.f ? 1.f / ws : 0.f;
    bf16* dst = out + ((long long)rq.q_start * heads + row) * DV + col0;
    // Two columns per thread.
    for (int c = tid * 2; c < width; c += 512) {
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int w = 0; w < 8; w++) {
            a += f[w] * red[w][c];
            b += f[w] * red[w][c + 1];
        }
        *(u32*)(dst + c) = pack_bf16(a * inv, b * inv);
    }
    if (tid == 0 && blockIdx.z == 0) lse[(long long)rq.q_start * heads + row] = ws > 0.f ? m + __logf(ws) : NEG_INF;
}

// mla_combine for a batch of more than 1024 rows: a warp a query row, the grid's
// warps striding over the batch's rows (request r's row i at r * max_rows
// + i), so that the grid is a wave of the GPU whatever the batch: a block a
// row (mla_combine) pays every block's start even where the row's request
// is unsplit and the block returns at once, 10 us at 128 heads and batch
// 64 on an H200. Each lane owns 16 of the 512 columns (four groups of four,
// 128 columns apart) and the weight of every 32nd chunk, which crosses the
// warp by shuffle. The request of a warp's first row is read before the
// wait (as mla_combine's), and the chunks' LSEs together with the first
// four chunks' columns (held as loaded, bf16 pairs, until their weights
// are known), the rest four chunks a trip: a row of the 128-head batch of
// 16 x 4096, four chunks, takes one trip after the wait where it took
// four (its request, the LSEs twice, the chunks): 0.97-0.98x the layer's
// time on an H100. 80 registers a thread, three blocks a multiprocessor
// (devkernels.go's combineBlocksPerSM).
extern "C" __global__ void __launch_bounds__(256)
    mla_combine_rows(bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ requests,
                     const bf16* __restrict__ part_o, const float* __restrict__ part_lse, int heads, int batch,
                     int max_rows) {
    const int lane = threadIdx.x & 31;
    const long long total = (long long)batch * max_rows;
    const long long stride = (long long)gridDim.x * (blockDim.x >> 5);
    const long long g0 = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    ReqInfo rq = {};
    if (g0 < total) rq = ((const ReqInfo*)requests)[g0 / max_rows];
    pdl_wait(); // the decode's partial outputs
    pdl_launch_dependents();
    for (long long g = g0; g < total; g += stride) {
        const int r = (int)(g / max_rows), row = (int)(g - (long long)r * max_rows);
        if (g != g0) rq = ((const ReqInfo*)requests)[r];
        const int rows = rq.q_len * heads;
        if (rq.num_splits <= 1 || row >= rows) continue;
        const long long base = rq.part_base + row;
        const int n = rq.num_splits;
        // Chunks 0..3's columns, and lane s's LSE of chunk s, together.
        uint2 v[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const bf16* src = part_o + (base + (long long)j * rows) * DV;
#pragma unroll
            for (int i = 0; i < 4; i++) v[j][i] = j < n ? part_load4(src + (lane + 32 * i) * 4) : make_uint2(0u, 0u);
        }
        const float ls0 = lane < n ? part_lse[base + (long long)lane * rows] : NEG_INF;
        float mx = ls0;
        for (int s = lane + 32; s < n; s += 32) mx = fmaxf(mx, part_lse[base + (long long)s * rows]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
        float acc[16];
#pragma unroll
        for (int i = 0; i < 16; i++) acc[i] = 0.f;
        float wsum = 0.f;
        for (int s0 = 0; s0 < n; s0 += 32) {
            // The weights of chunks s0..s0+31, a lane each.
            float ls = ls0;
            if (s0 > 0) ls = s0 + lane < n ? part_lse[base + (long long)(s0 + lane) * rows] : NEG_INF;
            const float wl = ls == NEG_INF ? 0.f : __expf(ls - mx);
            wsum += wl;
            const int m = min(32, n - s0);
            for (int j = 0; j < m; j += 4) {
                // Chunks s0 + j.. s0 + j + 3 (a lane past the last has weight 0).
                if (s0 + j > 0) {
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const bf16* src = part_o + (base + (long long)(s0 + j + k) * rows) * DV;
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            v[k][i] = j + k < m ? part_load4(src + (lane + 32 * i) * 4) : make_uint2(0u, 0u);
                    }
                }
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float w = __shfl_sync(0xffffffff, wl, j + k);
#pragma unroll
                    for (int i = 0; i < 4; i++) combine_add(acc + 4 * i, w, part_float4(v[k][i]));
                }
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) wsum += __shfl_xor_sync(0xffffffff, wsum, o);
        const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
        bf16* dst = out + ((long long)rq.q_start * heads + row) * DV;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint2 pk;
            pk.x = pack_bf16(acc[4 * i] * inv, acc[4 * i + 1] * inv);
            pk.y = pack_bf16(acc[4 * i + 2] * inv, acc[4 * i + 3] * inv);
            *(uint2*)(dst + (lane + 32 * i) * 4) = pk;
        }
        if (lane == 0) lse[(long long)rq.q_start * heads + row] = wsum > 0.f ? mx + __logf(wsum) : NEG_INF;
    }
}

// The split-KV schedule of a batch, computed on the device (FlashMLA's
// get_mla_metadata), for plans that hold for a batch size: one block reads
// seq_lens and qo_indptr and writes, into the workspace, the work items,
// the per-request metadata, the item count and the slot starts that the
// host's planner (cutItems in devkernels.go) computes on the CPU, cutting
// the batch exactly as it does: every request into chunks of about
// `target` key tiles (its tiles plus an item's cost: `full_cost` where the
// batch at that cost fills the slots, else `item_cost`), target being an
// even share of the batch over `nslots` blocks, grown by a quarter until
// the items fit the `capacity` the grid was sized for; where that share
// leaves more items than slots, the least share that leaves at most
// `nslots` if the one wave is estimated no slower (oneWave); slot k runs
// item k. Where that cut is estimated well over the packed one (packs), the
// batch is packed instead (packItems): its requests end to end, each after
// an item's cost, cut into `nslots` shares, slot s running the items of share s
// one after the other.
#define SCHED_THREADS 1024

// The block-wide sum of a and maximum of b, both to every thread (red:
// 2 x SCHED_THREADS / 32 values of shared memory).
__device__ __forceinline__ void sched_block_sum_max(long long& a, long long& b, long long* red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffff, a, o);
        b = max(b, __shfl_xor_sync(0xffffffff, b, o));
    }
    constexpr int W = SCHED_THREADS / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads(); // red is free
    if (lane == 0) {
        red[warp] = a;
        red[W + warp] = b;
    }
    __syncthreads();
    a = red[0];
    b = red[W];
#pragma unroll
    for (int w = 1; w < W; w++) {
        a += red[w];
        b = max(b, red[W + w]);
    }
}

// The inclusive scan of a and b over a warp's lanes.
__device__ __forceinline__ void sched_warp_scan(long long& a, long long& b, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const long long x = __shfl_up_sync(0xffffffff, a, o), y = __shfl_up_sync(0xffffffff, b, o);
        if (lane >= o) {
            a += x;
            b += y;
        }
    }
}

// The block-wide exclusive scan of a and b over the threads in order: on
// return a and b are the sums of the threads before this one, ta and tb
// the block's (sh: 2 x 65 values of shared memory: each value's warp
// totals, their exclusive scan and the block's total).
__device__ __forceinline__ void sched_block_scan(long long& a, long long& b, long long& ta, long long& tb,
                                                 long long* sh) {
    constexpr int W = SCHED_THREADS / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long ia = a, ib = b; // inclusive within the warp
    sched_warp_scan(ia, ib, lane);
    __syncthreads(); // sh is free
    if (lane == 31) {
        sh[warp] = ia;
        sh[65 + warp] = ib;
    }
    __syncthreads();
    if (warp == 0) { // exclusive scan of the warps' totals
        const long long wa = lane < W ? sh[lane] : 0, wb = lane < W ? sh[65 + lane] : 0;
        long long xa = wa, xb = wb;
        sched_warp_scan(xa, xb, lane);
        sh[32 + lane] = xa - wa;
        sh[65 + 32 + lane] = xb - wb;
        if (lane == 31) {
            sh[64] = xa;
            sh[65 + 64] = xb;
        }
    }
    __syncthreads();
    a = sh[32 + warp] + ia - a;
    b = sh[65 + 32 + warp] + ib - b;
    ta = sh[64];
    tb = sh[65 + 64];
}

// Items of a request of seq keys at target tiles per item, an item costing
// item_cost tiles more than its own; per is the tiles of each but the last.
__device__ __forceinline__ int sched_items(int seq, long long target, int item_cost, int* per) {
    const int tiles = (seq + BN - 1) / BN;
    if (tiles == 0) {
        *per = 1;
        return 0;
    }
    const long long want = (tiles + item_cost + target - 1) / target;
    const int chunks = (int)max(1LL, min(want, (long long)tiles));
    *per = (tiles + chunks - 1) / chunks;
    return (tiles + *per - 1) / *per;
}

// The requests the schedule cuts: the batch's own (seq_lens and qo_indptr
// read as they are), or, with a split map (an extend of more query tokens
// than a work request holds, launch.MaxQLen), its work requests: request
// v of the map is query tokens off..off+len of the batch's request real,
// whose keys are those its last token sees (causal within the extend),
// and whose page table is real's (kv_indptr, copied to the decode's
// kv_indptr for the work requests).
struct SchedReqs {
    const int* seq_lens;
    const int* qo_indptr;
    const int* split; // nullptr, or 3 int32 a work request: real, off, len
    __device__ __forceinline__ int real(int v) const { return split ? split[3 * v] : v; }
    __device__ __forceinline__ int q_len(int v) const {
        return split ? split[3 * v + 2] : qo_indptr[v + 1] - qo_indptr[v];
    }
    __device__ __forceinline__ int q_start(int v) const {
        return split ? qo_indptr[split[3 * v]] + split[3 * v + 1] : qo_indptr[v];
    }
    __device__ __forceinline__ int seq(int v) const {
        if (!split) return seq_lens[v];
        const int r = split[3 * v];
        const int given = qo_indptr[r + 1] - qo_indptr[r]; // the request's query tokens
        return max(0, seq_lens[r] - given + split[3 * v + 1] + split[3 * v + 2]);
    }
};

// packGain (devkernels.go): a batch is packed where the packed cut is
// estimated at most PACK_NUM / PACK_DEN of the one-item cut's time.
#define PACK_NUM 7
#define PACK_DEN 8

__device__ __forceinline__ void mla_schedule_body(const SchedReqs rs, const int* __restrict__ kv_indptr,
                                                  int* __restrict__ work_indptr, int* __restrict__ schedule,
                                                  int* __restrict__ requests, int* __restrict__ counts,
                                                  int* __restrict__ slots, int batch, int heads, int capacity,
                                                  int nslots, int item_cost, int full_cost) {
    __shared__ long long red[2 * SCHED_THREADS / 32];
    __shared__ long long sh[2 * 65];
    // No pdl_launch_dependents: the decode reads what the schedule writes,
    // and its first keys, before its own wait (MLA_ITEMS), so its launch
    // starts once every thread here has ended, after the fence below.
    const int tid = threadIdx.x;
    const int per_thread = (batch + SCHED_THREADS - 1) / SCHED_THREADS;
    const int lo = min(tid * per_thread, batch), hi = min(lo + per_thread, batch);

    long long total = 0, longest = 0;
    for (int i = lo; i < hi; i++) {
        const long long t = (rs.seq(i) + BN - 1) / BN;
        total += t;
        longest = max(longest, t);
    }
    sched_block_sum_max(total, longest, red);
    // An item's cost (costOf in devkernels.go): full_cost where the batch
    // at that cost fills the slots, else item_cost.
    if (full_cost > item_cost && total + (long long)batch * full_cost >= (long long)nslots * (1 + full_cost))
        item_cost = full_cost;
    total += (long long)batch * item_cost;
    long long target = max((total + nslots - 1) / nslots, 1LL + item_cost);
    // The items at a share, and the cost of the costliest.
    auto items_at = [&](long long t, long long* costliest) {
        long long n = 0, most = 0;
        for (int i = lo; i < hi; i++) {
            int per;
            const int k = sched_items(rs.seq(i), t, item_cost, &per);
            n += k;
            if (k > 0) most = max(most, (long long)per + item_cost);
        }
        sched_block_sum_max(n, most, red);
        *costliest = most;
        return n;
    };
    long long c0;
    long long n0 = items_at(target, &c0);
    while (n0 > capacity) {
        target += target / 4 + 1;
        n0 = items_at(target, &c0);
    }
    { // oneWave (devkernels.go)
        long long hi_t = longest + item_cost, c1; // every request one item
        if (n0 > nslots && hi_t > target && items_at(hi_t, &c1) <= nslots) {
            for (long long lo_t = target; hi_t - lo_t > 1;) {
                const long long mid = lo_t + (hi_t - lo_t) / 2;
                if (items_at(mid, &c1) <= nslots)
                    hi_t = mid;
                else
                    lo_t = mid;
            }
            const long long n1 = items_at(hi_t, &c1);
            if (c1 <= (n0 + nslots - 1) / nslots * c0) {
                target = hi_t;
                n0 = n1;
                c0 = c1;
            }
        }
    }
    // packs (devkernels.go): one item a block, or the batch packed into
    // shares of `share` tiles.
    const long long share = max((total + nslots - 1) / nslots, 1LL + item_cost);
    long long est = c0;
    if (n0 > nslots) {
        const long long items_cost = total - (long long)batch * item_cost + n0 * item_cost;
        est = min((n0 + nslots - 1) / nslots * c0, (items_cost + nslots - 1) / nslots + c0);
    }
    const bool pack = nslots > 1 && PACK_DEN * (share + item_cost) <= PACK_NUM * est;

    // Packed, where each of this thread's requests starts on the line
    // (packItems): an exclusive scan of the requests' lengths on it.
    long long at = 0, line = 0;
    if (pack) {
        long long mine = 0, none = 0, none_total;
        for (int i = lo; i < hi; i++) {
            const long long t = (rs.seq(i) + BN - 1) / BN;
            if (t > 0) mine += t + item_cost;
        }
        at = mine;
        sched_block_scan(at, none, line, none_total, sh);
    }
    // The items of request i (this thread's, in order): packed, its pieces
    // from its first tile on the line, first, to its last (at, on return).
    auto items_of = [&](int i, int* per, long long* first) -> int {
        if (!pack) return sched_items(rs.seq(i), target, item_cost, per);
        const long long t = (rs.seq(i) + BN - 1) / BN;
        if (t == 0) return 0;
        *first = at + item_cost;
        at = *first + t;
        return (int)((at - 1) / share - *first / share + 1);
    };

    // Each thread's items and partial rows, then an exclusive scan over the
    // threads (their requests are contiguous and in order).
    const long long at0 = at;
    long long item = 0, part = 0;
    for (int i = lo; i < hi; i++) {
        int per;
        long long first;
        const int n = items_of(i, &per, &first);
        item += n;
        if (n > 1) part += (long long)n * rs.q_len(i) * heads;
    }
    at = at0;
    long long count_all, rows_all;
    sched_block_scan(item, part, count_all, rows_all, sh);
    const int count = (int)count_all;
    for (int i = lo; i < hi; i++) {
        int per = 1;
        long long first = 0;
        const long long start = at; // packed: the line before request i
        const int n = items_of(i, &per, &first);
        const int seq = rs.seq(i);
        const int q0 = rs.q_start(i), ql = rs.q_len(i);
        if (work_indptr) work_indptr[i] = kv_indptr[rs.real(i)];
        for (int c = 0; c < n; c++) {
            int* it = schedule + 4 * (item + c);
            it[0] = i;
            it[3] = c;
            if (!pack) {
                it[1] = c * per * BN;
                it[2] = min((c + 1) * per * BN, seq);
                continue;
            }
            // Piece c: the request's tiles in share s0 + c. Every share from
            // the request's second on starts with its piece; its first
            // share, unless the request before ends in it.
            const long long s0 = first / share, sc = s0 + c;
            const long long a = c == 0 ? first : sc * share, e = min(at, (sc + 1) * share);
            it[1] = (int)((a - first) * BN);
            it[2] = (int)min((e - first) * BN, (long long)seq);
            if (c > 0 || start == 0 || (start - 1) / share < s0) slots[sc] = (int)(item + c);
        }
        item += n;
        int* rq = requests + 8 * i;
        rq[0] = q0;
        rq[1] = ql;
        rq[2] = seq;
        rq[3] = n;
        rq[4] = (int)part;
        rq[5] = rq[6] = rq[7] = 0;
        if (n > 1) part += (long long)n * ql * heads;
    }
    for (int k = count + tid; k < capacity; k += SCHED_THREADS) {
        int* it = schedule + 4 * k;
        it[0] = it[1] = it[2] = it[3] = 0;
    }
    // The slot starts: slot k's item k, or, packed, those written above up
    // to the last share used, and the item count past it.
    const int used = !pack ? 0 : line > 0 ? (int)((line - 1) / share) + 1 : 0;
    for (int k = tid; k <= capacity; k += SCHED_THREADS)
        if (k >= used) slots[k] = pack ? count : min(k, count);
    if (tid == 0) {
        counts[0] = count;
        counts[1] = 1; // scheduled on the device: MLA_ITEMS may prefetch keys
    }
    __threadfence(); // this thread's writes are seen before it ends
}

extern "C" __global__ void __launch_bounds__(SCHED_THREADS)
    mla_schedule(const int* __restrict__ seq_lens, const int* __restrict__ qo_indptr, int* __restrict__ schedule,
                 int* __restrict__ requests, int* __restrict__ counts, int* __restrict__ slots, int batch, int heads,
                 int capacity, int nslots, int item_cost, int full_cost) {
    mla_schedule_body(SchedReqs{seq_lens, qo_indptr, nullptr}, nullptr, nullptr, schedule, requests, counts, slots,
                      batch, heads, capacity, nslots, item_cost, full_cost);
}

// mla_schedule over the work requests of a split map (batch of them): it
// also writes each work request's page-table offset, kv_indptr of its
// request, into work_indptr, which the decode reads as its kv_indptr.
extern "C" __global__ void __launch_bounds__(SCHED_THREADS)
    mla_schedule_split(const int* __restrict__ seq_lens, const int* __restrict__ qo_indptr,
                       const int* __restrict__ kv_indptr, const int* __restrict__ split, int* __restrict__ work_indptr,
                       int* __restrict__ schedule, int* __restrict__ requests, int* __restrict__ counts,
                       int* __restrict__ slots, int batch, int heads, int capacity, int nslots, int item_cost,
                       int full_cost) {
    mla_schedule_body(SchedReqs{seq_lens, qo_indptr, split}, kv_indptr, work_indptr, schedule, requests, counts,
                      slots, batch, heads, capacity, nslots, item_cost, full_cost);
}
