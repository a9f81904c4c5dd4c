// Absorbed-MLA decode on Hopper's own data path (sm_90a): the wide shapes
// (64 query rows of a request per block: 64 and 128 heads, or 16 heads with
// 4 query tokens) of mla_decode.cu's wide variant, in the same four forms
// and with the same work items, parameters and partial outputs, on wgmma:
// operands from shared memory through matrix descriptors, accumulators in
// registers, issued by two warpgroups asynchronously. The layout, formats
// and loaders: mla_common.cuh; wgmma's primitives: sm90.cuh. The plan
// picks these entries on a GPU of compute capability 9.0 (devkernels.go);
// mla_decode.cu's run everywhere else.
//
// Design (after FlashMLA's sm90 decode). A block holds its 64 query rows in
// shared memory (72 KB) and streams key tiles of 64 keys (72 KB each, two
// stages; an FP8 tile is staged and converted into one f16 tile). Every
// tile is stored as wgmma's 128-byte-swizzled K-major layout: 9 column
// blocks of 64 rows x 128 bytes, 16-byte chunks XOR-swizzled by row, so the
// same bytes serve S = Q K^T (K K-major) and O += P V (V = the first 512
// columns, read MN-major through the transposed-B form). The two
// warpgroups split each tile's S by keys (64 rows x 32 keys each, 36
// k-steps of m64n32k16) and the output by columns (64 x 256 each, 128 fp32
// registers a thread, 4 k-steps of m64n256k16 over P): the row maxima cross
// between them through shared memory once a tile, P (bf16, or f16 for an
// FP8 cache) is written to shared memory swizzled for the P V MMAs, and
// each warpgroup keeps its own partial row sums, added at the end. The
// next tile's copies (cp.async) start as soon as both warpgroups are past
// the previous tile's P V, while this tile's S runs, and a tile's P V runs
// while the next tile lands.

#define WG_BN 64                        /* keys per tile */
#define WG_TILE (WG_BN * DQK * 2)       /* 73728 bytes: 9 blocks of 64 rows x 128 bytes */
#define WG_BLOCK 8192                   /* one column block: 64 rows x 128 bytes */

// Byte offset of 16-byte chunk ch (0..71) of row r (0..63) in a tile: the
// column block, then the row, then the chunk XOR the row (the SW128 atom:
// 8 rows x 128 bytes, 1024-byte aligned).
__device__ __forceinline__ u32 wsw(int r, int ch) {
    return (u32)((ch >> 3) * WG_BLOCK + r * 128 + (((ch ^ r) & 7) << 4));
}

// MN-major operand (V): 64 columns per 128-byte row, the next 64 columns
// one column block (8192 bytes) on, 8-key groups 1024 apart.
__device__ __forceinline__ u64 mnmajor(u32 addr) { return wg_desc(addr, WG_BLOCK, 1024); }

// S (+)= Q K^T for one warpgroup: 64 x 32, k 16, both operands K-major in
// shared memory (descriptors da, db).
// T is "bf16" or "f16"; accumulate 0 overwrites d.
#define WGMMA_S_ASM(T)                                                         \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                  \
    "wgmma.mma_async.sync.aligned.m64n32k16.f32." T "." T " {"                  \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
    "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
template <bool H>
__device__ __forceinline__ void wgmma_s(float (&d)[16], u64 da, u64 db, int accumulate) {
    if constexpr (H)
        asm volatile(WGMMA_S_ASM("f16")
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                     : "l"(da), "l"(db), "r"(accumulate));
    else
        asm volatile(WGMMA_S_ASM("bf16")
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                     : "l"(da), "l"(db), "r"(accumulate));
}

// wgmma's accumulator operands: N fp32 registers of d from index i on,
// and their placeholders in the instruction's text.
#define WG_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_F16(d, i) WG_F4(d, i), WG_F4(d, i + 4), WG_F4(d, i + 8), WG_F4(d, i + 12)
#define WG_F32(d, i) WG_F16(d, i), WG_F16(d, i + 16)
#define WG_F128(d) WG_F32(d, 0), WG_F32(d, 32), WG_F32(d, 64), WG_F32(d, 96)
#define WG_D32                                                                                           \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                              \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_D128                                                                                          \
    WG_D32 ", "                                                                                          \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                    \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                    \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                    \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                    \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "        \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// O (+)= P V for one warpgroup: 64 x 256, k 16, P K-major and V MN-major
// (transposed) in shared memory.
// T is "bf16" or "f16"; accumulate 0 overwrites d.
#define WGMMA_O_ASM(T)                                                                                   \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                        \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" WG_D128 "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
template <bool H>
__device__ __forceinline__ void wgmma_o(float (&d)[128], u64 da, u64 db, int accumulate) {
    if constexpr (H)
        asm volatile(WGMMA_O_ASM("f16") : WG_F128(d) : "l"(da), "l"(db), "r"(accumulate));
    else
        asm volatile(WGMMA_O_ASM("bf16") : WG_F128(d) : "l"(da), "l"(db), "r"(accumulate));
}
// The key-tile loaders: TPR threads per key row, thread k of a row copying
// its chunks k, k + TPR, k + 2 TPR, ..., so that a row's place in the cache
// is looked up once per tile (a tile ahead), every copy is one instruction
// off two base addresses, and a warp's copy covers 128 contiguous bytes of
// each of its rows (TPR 8: one 128-byte line a row, a bf16 row's column
// block; TPR 4: two rows a line's worth).
//
// wg_key is what the index tensors hold for key j (its page, dense, or its
// slot, sparse), -1 past kv_end; wg_row turns it into the cache row of key
// j when the copies are issued, a tile later, so the load is never waited
// for: -1 for padding, a slot outside the cache, or past kv_end.
template <bool SPARSE>
__device__ __forceinline__ int wg_key(const Keys& ks, const int* krows, int j, int kv_end) {
    return j >= kv_end ? -1 : __ldg(krows + (SPARSE ? j : j >> ks.page_shift));
}
template <bool SPARSE>
__device__ __forceinline__ long long wg_row(const Keys& ks, int key, int j) {
    if (key < 0) return -1;
    if (SPARSE) return key >= ks.num_slots ? -1 : key;
    return ((long long)key << ks.page_shift) | (j & ((1 << ks.page_shift) - 1));
}

// Issues the copies of this thread's chunks (k of TPR) of cache row row
// (-1: zeros) into row r of the stage at stage: a bf16 tile (swizzled) or
// raw FP8 rows. A row of zeros reads nothing; its addresses stay inside the
// cache's first row.
template <int FMT, int TPR>
__device__ __forceinline__ void wg_issue(u32 stage, const Keys& ks, long long row, int r, int k) {
    constexpr int KB = row_bytes(FMT), CH = KB / 16, PER = (CH + TPR - 1) / TPR;
    const unsigned char* src = ks.kv + (row >= 0 ? row * KB : 0) + k * 16;
    const int bytes = row >= 0 ? 16 : 0;
    const u32 base = FMT == FMT_BF16 ? stage + r * 128 : stage + r * KB + k * 16;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        if (CH % TPR != 0 && k + TPR * i >= CH) break;
        // Chunk k + TPR i: column block (k + TPR i) / 8, swizzled by the row
        // within it.
        const int ch = k + TPR * i;
        const u32 dst = FMT == FMT_BF16 ? base + (ch >> 3) * WG_BLOCK + (u32)(((ch ^ r) & 7) << 4) : base + TPR * 16 * i;
        cp_async16(dst, src + TPR * 16 * i, bytes);
    }
}

// The shared memory of mla_decode_wg<FMT, *>, byte offsets from a start
// aligned to 1024 bytes (the swizzle atoms'), and the 1024 bytes the
// alignment may take: 64 query rows (a tile), the key tiles (two stages,
// or the one an FP8 tile is converted into), P (64 rows x 64 keys), each
// warpgroup's row maxima and sums (2 x 64 floats each), the keys of a tile
// that are rows (2 x 64 ints), and the next FP8 tile, staged (64 rows as
// cached).
template <int FMT>
struct WgLayout {
    static constexpr int M = 64;
    static constexpr int NT = FMT == FMT_BF16 ? 2 : 1;
    static constexpr int q = 0;
    static constexpr int kv = q + WG_TILE;
    static constexpr int p = kv + NT * WG_TILE;
    static constexpr int red_max = p + WG_BLOCK;
    static constexpr int red_sum = red_max + 4 * 2 * M;
    static constexpr int kvalid = red_sum + 4 * 2 * M;
    static constexpr int raw = kvalid + 4 * 2 * WG_BN;
    static constexpr int bytes = 1024 + raw + (FMT == FMT_BF16 ? 0 : WG_BN * row_bytes(FMT));
};

// Writes this thread's share of a 64-row body's output: its two rows (r0,
// r0 + 8 of the block's rows from row0) of its warpgroup's 256 columns of O
// (o: the m64n256 accumulator layout), divided by the rows' sums l0, l1
// (times mul: an FP8 cache's scale) and their LSE from the maxima m0, m1
// (log2 domain): into the output where the request is one item, else into
// the item's partial rows.
__device__ __forceinline__ void wg_store(const float (&o)[128], float l0, float l1, float m0, float m1, float mul,
                                         bf16* __restrict__ out, float* __restrict__ lse, bf16* __restrict__ part_o,
                                         float* __restrict__ part_lse, const ReqInfo& rq, const Item& it, int heads,
                                         int rows, int row0, int r0, int wg, int t4) {
    const int r1 = r0 + 8;
    const float inv0 = l0 > 0.f ? mul / l0 : 0.f, inv1 = l1 > 0.f ? mul / l1 : 0.f;
    const float lse0 = l0 > 0.f ? (m0 + __log2f(l0)) * 0.6931471805599453f : NEG_INF;
    const float lse1 = l1 > 0.f ? (m1 + __log2f(l1)) * 0.6931471805599453f : NEG_INF;
    const int gr0 = row0 + r0, gr1 = row0 + r1; // rows within the request
    const bool ok0 = gr0 < rows, ok1 = gr1 < rows;
    const bool whole = rq.num_splits == 1;
    const long long p0 = whole ? (long long)rq.q_start * heads + gr0 : (long long)rq.part_base + (long long)it.split * rows + gr0;
    const long long p1 = whole ? (long long)rq.q_start * heads + gr1 : (long long)rq.part_base + (long long)it.split * rows + gr1;
    bf16* o0 = (whole ? out : part_o) + p0 * DV + wg * 256;
    bf16* o1 = (whole ? out : part_o) + p1 * DV + wg * 256;
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
        quad_store16(o0 + 8 * j, pack_bf16(o[4 * j] * inv0, o[4 * j + 1] * inv0),
                     pack_bf16(o[4 * j + 4] * inv0, o[4 * j + 5] * inv0), t4, ok0);
        quad_store16(o1 + 8 * j, pack_bf16(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1),
                     pack_bf16(o[4 * j + 6] * inv1, o[4 * j + 7] * inv1), t4, ok1);
    }
    if (wg == 0 && t4 == 0) {
        float* l = whole ? lse : part_lse;
        if (ok0) l[p0] = lse0;
        if (ok1) l[p1] = lse1;
    }
}

template <int FMT, bool SPARSE>
__device__ __forceinline__ void mla_decode_wg(const QView& q, const Keys& ks, bf16* __restrict__ out,
                                              float* __restrict__ lse, const Item it,
                                              const ReqInfo* __restrict__ reqs,
                                              bf16* __restrict__ part_o, float* __restrict__ part_lse, int heads,
                                              float scale_log2, int hb) {
    constexpr int M = 64;
    constexpr bool H = FMT != FMT_BF16;          // f16 tiles, queries and P
    constexpr int KB = row_bytes(FMT); // cached bytes per key
    constexpr int NT = H ? 1 : 2;                // key tiles: two stages, or the one dequantised
    using L = WgLayout<FMT>;
    static_assert(L::M == M && L::NT == NT, "WgLayout follows the body");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023); // the atoms' alignment
    unsigned char* sq = smem + L::q;
    unsigned char* skv = smem + L::kv;
    unsigned char* sp = smem + L::p;
    float* red_max = (float*)(smem + L::red_max);
    float* red_sum = (float*)(smem + L::red_sum);
    int* kvalid = (int*)(smem + L::kvalid);
    unsigned char* sraw = smem + L::raw;

    const ReqInfo rq = reqs[it.req];
    const int* krows = key_rows<SPARSE>(ks, it.req); // read beside the request
    const int rows = rq.q_len * heads;
    const int row0 = hb * M;
    if (row0 >= rows) return;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wg = warp >> 2; // the warpgroup: keys wg*32.. of S, columns wg*256.. of O
    const u32 sq_a = smem_addr(sq), skv_a = smem_addr(skv), sp_a = smem_addr(sp);
    const float kv_mul = FMT == FMT_FP8 ? ks.kv_scale : 1.f; // FMT_FP8: scales every score and the output
    scale_log2 *= kv_mul;
    // Where tile t lands: a bf16 stage, or the FP8 staging tile (raw rows).
    auto stage = [&](int t) -> u32 { return H ? smem_addr(sraw) : skv_a + (t & 1) * WG_TILE; };
    auto tile_dst = [](int r, int ch) -> u32 { return wsw(r, ch); };

    const int ntiles = (it.kv_end - it.kv_begin + WG_BN - 1) / WG_BN;
    // This thread's key rows of every tile (lr and lr + 32, eight threads
    // a row) and its chunks (lk); what the index tensors hold for its keys
    // of the next tile (nkey), loaded a tile ahead: the first tile's before
    // the wait where the block waits late (MLA_ITEMS).
    const int lr = tid >> 3, lk = tid & 7;
    int nkey[2] = {wg_key<SPARSE>(ks, krows, it.kv_begin + lr, it.kv_end),
                   wg_key<SPARSE>(ks, krows, it.kv_begin + lr + 32, it.kv_end)};
    pdl_wait(); // the queries, the cache, the partials
    load_queries<M>(sq_a, tile_dst, q, rq.q_start * heads + row0, rows - row0, heads, tid);
    // Issues tile t's copies (and its keys' validity), then loads tile t+1's keys.
    auto load = [&](int t) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rr = lr + 32 * h;
            const long long row = wg_row<SPARSE>(ks, nkey[h], it.kv_begin + t * WG_BN + rr);
            wg_issue<FMT, 8>(stage(t), ks, row, rr, lk);
            if (lk == 0) kvalid[(t & 1) * WG_BN + rr] = row >= 0;
        }
        cp_commit();
#pragma unroll
        for (int h = 0; h < 2; h++)
            nkey[h] = wg_key<SPARSE>(ks, krows, it.kv_begin + (t + 1) * WG_BN + lr + 32 * h, it.kv_end);
    };
    load(0); // the queries ride with the first tile

    // This thread's two rows (of S and of O: both are m64 accumulators of
    // its warpgroup), their causal limits, and its first key of S.
    const int r0 = (warp & 3) * 16 + (lane >> 2), r1 = r0 + 8;
    const int causal0 = rq.seq_len - rq.q_len + (row0 + r0) / heads;
    const int causal1 = rq.seq_len - rq.q_len + (row0 + r1) / heads;
    const int kq = wg * 32 + (lane & 3) * 2;

    // O: 64 x 256, columns wg*256 + 8j + (lane&3)*2 + {0,1} in o[4j], o[4j+1]
    // (row r0) and o[4j+2], o[4j+3] (row r1).
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; i++) o[i] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;

    for (int t = 0; t < ntiles; t++) {
        const int j0 = it.kv_begin + t * WG_BN;
        if (H) wg_wait<0>(); // this warpgroup's last P V is done with the f16 tile
        cp_wait<0>();
        fence_async_smem(); // the copies (the bf16 stage, the queries) before the MMAs read them
        __syncthreads();
        if (H) {
            dequant_tile<FMT, WG_BN>(sraw, skv, tile_dst, tid);
            if (t == 0) queries_f16<M>(sq, tile_dst, tid); // they landed with the first tile
            fence_async_smem();
            __syncthreads(); // the tile (and the queries) whole, the staging tile free
            if (t + 1 < ntiles) load(t + 1);
        }
        const u32 sk_a = H ? skv_a : skv_a + (t & 1) * WG_TILE;

        // S: this warpgroup's 32 keys, 36 k-steps.
        float s[16];
#pragma unroll
        for (int i = 0; i < 16; i++) s[i] = 0.f;
        wg_fence();
        reg_fence(s);
        const u64 dq = kmajor(sq_a), dk = kmajor(sk_a + wg * 32 * 128); // + (byte offset >> 4) per k-step
#pragma unroll
        for (int kk = 0; kk < DQK / 16; kk++) {
            const u32 off = ((kk >> 2) * WG_BLOCK + (kk & 3) * 32) >> 4;
            wgmma_s<H>(s, dq + off, dk + off, kk > 0);
        }
        wg_commit();
        if (!H && t + 1 < ntiles) {
            // The next tile's copies go out while S runs: once both
            // warpgroups' last P V is done (S is the one group left in
            // flight), the stage it read is free.
            wg_wait<1>();
            __syncthreads();
            load(t + 1);
        }
        wg_wait<0>(); // S, and the last tile's P V queued before it
        reg_fence(s);
        reg_fence(o);

        float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = j0 + kq + 8 * j + e;
                const bool in = kvalid[(t & 1) * WG_BN + kq + 8 * j + e] != 0;
                s[4 * j + e] = (in && key <= causal0) ? s[4 * j + e] * scale_log2 : NEG_INF;
                s[4 * j + 2 + e] = (in && key <= causal1) ? s[4 * j + 2 + e] * scale_log2 : NEG_INF;
                mx0 = fmaxf(mx0, s[4 * j + e]);
                mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
            }
        mx0 = quad_max(mx0);
        mx1 = quad_max(mx1);
        if ((lane & 3) == 0) {
            red_max[wg * M + r0] = mx0;
            red_max[wg * M + r1] = mx1;
        }
        __syncthreads(); // the maxima of both warpgroups
        const float mt0 = fmaxf(m0, fmaxf(red_max[r0], red_max[M + r0]));
        const float mt1 = fmaxf(m1, fmaxf(red_max[r1], red_max[M + r1]));
        const float mu0 = mt0 == NEG_INF ? 0.f : mt0, mu1 = mt1 == NEG_INF ? 0.f : mt1;
        const float al0 = fast_exp2(m0 - mu0), al1 = fast_exp2(m1 - mu1);
        m0 = mt0;
        m1 = mt1;
        l0 *= al0;
        l1 *= al1;
        if (__any_sync(0xffffffff, al0 != 1.f || al1 != 1.f)) // (the maxima settle after a few tiles)
#pragma unroll
        for (int j = 0; j < 32; j++) {
            o[4 * j] *= al0;
            o[4 * j + 1] *= al0;
            o[4 * j + 2] *= al1;
            o[4 * j + 3] *= al1;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float p0 = fast_exp2(s[4 * j] - mu0), p1 = fast_exp2(s[4 * j + 1] - mu0);
            const float p2 = fast_exp2(s[4 * j + 2] - mu1), p3 = fast_exp2(s[4 * j + 3] - mu1);
            l0 += p0 + p1;
            l1 += p2 + p3;
            const int col = kq + 8 * j; // key within the tile
            *(u32*)(sp + wsw(r0, col >> 3) + (col & 7) * 2) = pack_<H>(p0, p1);
            *(u32*)(sp + wsw(r1, col >> 3) + (col & 7) * 2) = pack_<H>(p2, p3);
        }
        fence_async_smem();
        __syncthreads(); // P whole
        // O += P V: this warpgroup's 256 columns, 4 k-steps of 16 keys.
        wg_fence();
        reg_fence(o);
        const u64 dp = kmajor(sp_a), dv = mnmajor(sk_a + wg * 4 * WG_BLOCK);
#pragma unroll
        for (int kk = 0; kk < WG_BN / 16; kk++) wgmma_o<H>(o, dp + kk * 2, dv + kk * 128, 1);
        wg_commit();
    }
    wg_wait<0>();
    reg_fence(o);

    // Row sums: this thread's keys, its quad's, then both warpgroups'.
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    if ((lane & 3) == 0) {
        red_sum[wg * M + r0] = l0;
        red_sum[wg * M + r1] = l1;
    }
    __syncthreads();
    l0 = red_sum[r0] + red_sum[M + r0];
    l1 = red_sum[r1] + red_sum[M + r1];

    wg_store(o, l0, l1, m0, m1, kv_mul, out, lse, part_o, part_lse, rq, it, heads, rows, row0, r0, wg, lane & 3);
}

// One block of two warpgroups per multiprocessor (its shared memory), in
// the four forms (devkernels.go's sm90 variant).
MLA_DECODE_ENTRY(mla_decode_wg64, 1, mla_decode_wg, WgLayout, (FMT_BF16))
MLA_DECODE_FP8_ENTRY(mla_decode_fp8_wg64, 1, mla_decode_wg, WgLayout, (FMT_FP8))
MLA_SPARSE_ENTRY(mla_sparse_wg64, 1, mla_decode_wg, WgLayout, (FMT_BF16))
MLA_SPARSE_ENTRY(mla_sparse_fp8_wg64, 1, mla_decode_wg, WgLayout, (FMT_DSA))

// ---------------------------------------------------------------------------
// The 64-row body as a seesaw (FlashMLA's sm90 dense decode, re-derived; the
// reading it follows: docs/bench/2026-12-05-flashmla-sm90-reading.md), in
// the four forms. The block walks its keys two 64-key tiles at
// a time: warpgroup 0 owns the even tile (buffer K0), warpgroup 1 the odd one
// (K1). Each computes the whole S of its own tile (64 x 64, 36 k-steps of
// m64n64k16: the 512 latent columns with both operands in shared memory, the
// 64 rope columns with the queries' from registers), and each owns half of O
// (warpgroup 0 columns 0-255, warpgroup 1 columns 256-511), so each runs the
// P V of both tiles over its half of V: its own P straight from registers
// (the A operand of m64n256k16), the other warpgroup's from shared memory.
// One running maximum per row, in shared memory, passes from warpgroup 0 to
// 1 and back once a pair of tiles; a warpgroup's softmax always runs while
// the other's products are queued on the tensor cores:
//
//   warpgroup 0 (tile K0)                  warpgroup 1 (tile K1)
//   softmax of S0: max m0, O_L *= a0       .
//   arrive SCALE0                          sync SCALE0
//   O_L += P0 V0_L (P0 in registers),      softmax of S1: max m1 >= m0,
//     refilling K0's blocks 0-3 16 keys      O_R *= a0 a1
//     at a time as its k-steps retire
//   sync SCALE1                            arrive SCALE1
//   P0 a1 -> shared memory (sP0)           P1 -> shared memory (sP1, the
//   arrive P0                                queries' rope block)
//   sync O1                                O_R += P1 V1_R (P1 in registers)
//   O_L *= a1; O_L += sP1 V1_L             sync P0; O_R += sP0 V0_R; arrive O1
//   S of the next K0, blocks 0-3 first     refill K1's blocks 4-8, then K0's
//   refill K1's blocks 0-3                 S of the next K1, blocks 4-8 first
//
// Four one-way named barriers a pair of tiles and no __syncthreads in the
// loop. The loads are cp.async, so that pages of any size (and a sparse
// token's slots) are rows as they are: the warpgroup that last reads a half
// of a buffer refills it (blocks 0-3, V's left half: warpgroup 0; blocks
// 4-8: warpgroup 1), eight threads a key row, onto that half's mbarrier
// (the copies' own arrivals; warpgroup 0's also one plain arrival of each
// thread after it wrote the keys' validity). Warpgroup 0's own P V is four
// commit groups, one a k-step of 16 keys, so that its refill of K0's
// blocks 0-3 starts with the first: measured on an H100, 0.99x the time
// of one refill after the whole product, where issuing it after the hand-
// over of P0 instead took 1.08x, and the other halves refilled alike
// 1.02x; TMA boxes in place of the copies (over pages of 32 keys or more)
// took 1.03x, and asking L2 for the next pair's keys early 1.0x
// (docs/bench/h100-2026-12-06-refills.md). The keys' validity and the
// causal limits mask the tiles that need it: an item's last ones, those
// past a row's limit, and those with a key that is not a row (the loaders
// mark them).
//
// An FP8 cache (dense, or DeepSeek-V3.2's) needs no room of its own: each
// half of a key lands raw at the start of the lines its f16 columns take,
// and the warpgroup that owns the tile converts the half in place once it
// has landed, before its first k-step over it (ss_convert), while the other
// warpgroup's products run. The queries and P are then f16, and the MMAs
// take f16, as in mla_decode_wg.

// S (+)= Q K^T over one 64-key tile (m64n64k16), both operands K-major in
// shared memory; accumulate 0 overwrites d. T is "bf16" or "f16" (H).
#define WGMMA_S64_ASM(T)                                                                                 \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                          \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" WG_D32 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
template <bool H>
__device__ __forceinline__ void wgmma_s64(float (&d)[32], u64 da, u64 db, int accumulate) {
    if constexpr (H)
        asm volatile(WGMMA_S64_ASM("f16") : WG_F32(d, 0) : "l"(da), "l"(db), "r"(accumulate));
    else
        asm volatile(WGMMA_S64_ASM("bf16") : WG_F32(d, 0) : "l"(da), "l"(db), "r"(accumulate));
}
// The same with A (16 columns of this warpgroup's 64 query rows) from
// registers, in mma.sync's A layout: rows r0 and r0 + 8, columns 2 (lane & 3)
// and 8 on.
#define WGMMA_S64_RS_ASM(T)                                                                              \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                          \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" WG_D32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
template <bool H>
__device__ __forceinline__ void wgmma_s64_rs(float (&d)[32], const u32 (&a)[4], u64 db) {
    if constexpr (H)
        asm volatile(WGMMA_S64_RS_ASM("f16") : WG_F32(d, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    else
        asm volatile(WGMMA_S64_RS_ASM("bf16") : WG_F32(d, 0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
// O += P V over 16 keys with P from registers (m64n256k16, V MN-major).
#define WGMMA_O_RS_ASM(T)                                                                                \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                                         \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" WG_D128 "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
template <bool H>
__device__ __forceinline__ void wgmma_o_rs(float (&d)[128], const u32* a, u64 db) {
    if constexpr (H)
        asm volatile(WGMMA_O_RS_ASM("f16") : WG_F128(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    else
        asm volatile(WGMMA_O_RS_ASM("bf16") : WG_F128(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
// Keeps the compiler from reusing the registers an asynchronous MMA reads
// its A operand from before the wait that retires it.
template <int N>
__device__ __forceinline__ void reg_keep(u32 (&a)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(a[i])::"memory");
}

// Named barrier id of n threads: waits for it, or arrives without waiting.
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

// The seesaw's named barriers (0 is __syncthreads'), each 128 arrivals
// and 128 waiters a pair of tiles.
#define SS_SCALE0 1 /* warpgroup 0's maxima and scales are in shared memory */
#define SS_SCALE1 2 /* warpgroup 1's */
#define SS_P0 3     /* sP0 is written */
#define SS_O1 4     /* sP1 is written, and warpgroup 1 has issued its products over sP0 */
#define SS_CONV0 5  /* an FP8 half is f16 (warpgroup 0's 128 threads; SS_CONV0 + 1: warpgroup 1's) */

// An FP8 cache in the seesaw: each half of a cached key lands as raw 16-byte
// chunks, chunk j = k + 8i at the start of the key's line in column block
// 4 hf + i (k: its slot in the line), within the 128 bytes that key has in
// each block of the half; ss_convert turns the half into f16 in place. The
// raw chunks of half hf (0: columns 0-255, 1: columns 256-575) of a cached
// key, and where chunk j starts in it: FMT_FP8, the e4m3 columns 256 hf +
// 16 j on; FMT_DSA, its e4m3 columns, then its four scales (j 16), then
// (hf 1) its bf16 rope values.
template <int FMT>
__device__ __forceinline__ int ss_raw_chunks(int hf) {
    return FMT == FMT_FP8 ? (hf ? 20 : 16) : (hf ? 25 : 17);
}
template <int FMT>
__device__ __forceinline__ int ss_raw_src(int hf, int j) {
    if (FMT == FMT_FP8 || j < 16) return hf * 256 + 16 * j;
    return j == 16 ? DV : DV + 4 * (DV / 128) + 16 * (j - 17);
}

// Makes half hf of an FP8 tile (kb: its buffer) f16 in place: this
// thread's chunks (slot lk) of its four key rows (lr + 16 h), each row's
// raw chunks read before any of its eight threads writes (a row's threads
// are eight lanes of one warp, and a key's f16 columns overwrite only its
// own lines). As dequant_tile: FMT_FP8's layer scale is applied to the
// scores and the output, FMT_DSA's block scales multiply here in f16, and
// its rope values are rounded to f16.
template <int FMT>
__device__ __forceinline__ void ss_convert(unsigned char* kb, int hf, int lr, int lk) {
    const int n = ss_raw_chunks<FMT>(hf);
#pragma unroll 1
    for (int h = 0; h < 4; h++) {
        const int rr = lr + 16 * h;
        const unsigned char* line = kb + hf * 4 * WG_BLOCK + rr * 128;
        uint4 raw[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (lk + 8 * i < n) raw[i] = *(const uint4*)(line + i * WG_BLOCK + lk * 16);
        u32 sc[2] = {0u, 0u};
        if (FMT == FMT_DSA) {
            const float* s = (const float*)(line + 2 * WG_BLOCK); // chunk 16: the four scales
            sc[0] = pack_f16(s[2 * hf], s[2 * hf]);
            sc[1] = pack_f16(s[2 * hf + 1], s[2 * hf + 1]);
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int j = lk + 8 * i;
            if (j >= n) continue;
            const uint4 v = raw[i];
            if (FMT == FMT_FP8 || j < 16) { // 16 e4m3 values: f16 chunks 32 hf + 2 j and the next
                uint4 a = e4m3x8_f16(v.x, v.y), b = e4m3x8_f16(v.z, v.w);
                if (FMT == FMT_DSA) {
                    const u32 s2 = sc[i & 1];
                    a = make_uint4(hmul2(a.x, s2), hmul2(a.y, s2), hmul2(a.z, s2), hmul2(a.w, s2));
                    b = make_uint4(hmul2(b.x, s2), hmul2(b.y, s2), hmul2(b.z, s2), hmul2(b.w, s2));
                }
                *(uint4*)(kb + wsw(rr, 32 * hf + 2 * j)) = a;
                *(uint4*)(kb + wsw(rr, 32 * hf + 2 * j + 1)) = b;
            } else if (j > 16) { // FMT_DSA's rope, 8 bf16 values: f16 chunk 64 + j - 17
                *(uint4*)(kb + wsw(rr, DV / 8 + j - 17)) = bf16x8_f16(v);
            }
        }
    }
}

// The shared memory of mla_decode_ss, byte offsets from a start aligned to
// 1024 bytes, and the 1024 bytes the alignment may take: the queries (their
// rope block holds sP1 once both warpgroups have the rope columns in
// registers), the two key buffers, sP0, the running maxima, each tile's
// scales, the row sums of both warpgroups, the keys' validity of both
// buffers (a byte a key), the last tile of each buffer with a key that is
// not a row (its index + 1) and four mbarriers (each buffer's blocks 0-3
// and 4-8). The same in every form: an FP8 tile is converted in place.
template <int FMT>
struct SsLayout {
    static constexpr int M = 64;
    static constexpr int q = 0;
    static constexpr int p1 = q + 8 * WG_BLOCK;
    static constexpr int k0 = q + WG_TILE;
    static constexpr int p0 = k0 + 2 * WG_TILE;
    static constexpr int rmax = p0 + WG_BLOCK;
    static constexpr int scale0 = rmax + 4 * M;
    static constexpr int scale1 = scale0 + 4 * M;
    static constexpr int rsum = scale1 + 4 * M;
    static constexpr int kvalid = rsum + 4 * 2 * M;
    static constexpr int badt = kvalid + 2 * WG_BN;
    static constexpr int bars = badt + 2 * 4;
    static constexpr int bytes = 1024 + bars + 4 * 8;
};

template <int FMT, bool SPARSE>
__device__ __forceinline__ void mla_decode_ss(const QView& q, const Keys& ks, bf16* __restrict__ out,
                                              float* __restrict__ lse, const Item it,
                                              const ReqInfo* __restrict__ reqs,
                                              bf16* __restrict__ part_o, float* __restrict__ part_lse, int heads,
                                              float scale_log2, int hb) {
    constexpr int M = 64;
    constexpr bool H = FMT != FMT_BF16; // f16 tiles, queries and P, converted in place
    constexpr int KB = row_bytes(FMT);  // cached bytes per key
    using L = SsLayout<FMT>;
    static_assert(L::M == M, "SsLayout follows the body");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023); // the atoms' alignment
    float* rmax = (float*)(smem + L::rmax);
    float* scale0 = (float*)(smem + L::scale0);
    float* scale1 = (float*)(smem + L::scale1);
    float* rsum = (float*)(smem + L::rsum);
    unsigned char* kvalid = smem + L::kvalid;
    int* badt = (int*)(smem + L::badt);
    const u32 base = smem_addr(smem), sq_a = base + L::q, bars = base + L::bars;
    auto kbuf = [&](int b) -> u32 { return base + L::k0 + b * WG_TILE; };
    auto lo = [&](int b) -> u32 { return bars + 8 * b; };       // buffer b's blocks 0-3 (and its keys' validity)
    auto hi = [&](int b) -> u32 { return bars + 16 + 8 * b; };  // its blocks 4-8

    const ReqInfo rq = reqs[it.req];
    const int* krows = key_rows<SPARSE>(ks, it.req); // read beside the request
    const int rows = rq.q_len * heads;
    const int row0 = hb * M;
    if (row0 >= rows) return;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const float kv_mul = FMT == FMT_FP8 ? ks.kv_scale : 1.f; // FMT_FP8: scales every score and the output
    scale_log2 *= kv_mul;
    // The warpgroup: tiles of parity wg, columns wg*256.. of O. Read from
    // lane 0, so that the compiler sees a value uniform across the warp:
    // branches on a per-thread value around the products make ptxas
    // serialise every wgmma behind a wait of its own (C7520).
    const int wg = __shfl_sync(0xffffffff, warp >> 2, 0);
    const int r0 = (warp & 3) * 16 + (lane >> 2), r1 = r0 + 8, t4 = lane & 3;
    const int causal0 = rq.seq_len - rq.q_len + (row0 + r0) / heads;
    const int causal1 = rq.seq_len - rq.q_len + (row0 + r1) / heads;
    const int causal_lo = rq.seq_len - rq.q_len + row0 / heads;
    const int ntiles = (it.kv_end - it.kv_begin + WG_BN - 1) / WG_BN;
    const int npairs = ntiles > 2 ? (ntiles + 1) / 2 : 1; // a missing odd tile is all padding

    if (tid == 0) {
        mbar_init(lo(0), 256);
        mbar_init(lo(1), 256);
        mbar_init(hi(0), 128);
        mbar_init(hi(1), 128);
        fence_async_smem();
    }
    if (tid < M) rmax[tid] = NEG_INF;
    if (tid < 2) badt[tid] = -1;
    __syncthreads(); // the barriers, before any arrival

    // This thread's key rows of a tile (lr + 16h, eight threads a row: a
    // warp's copy is one 128-byte line of each of four rows) and its chunk
    // of each column block (lk).
    const int lr = (tid & 127) >> 3, lk = tid & 7;
    auto keys = [&](int t, int (&key)[4]) {
#pragma unroll
        for (int h = 0; h < 4; h++) key[h] = wg_key<SPARSE>(ks, krows, it.kv_begin + t * WG_BN + lr + 16 * h, it.kv_end);
    };
    // Copies this warpgroup's half of tile t into buffer t & 1.
    // Row h of this thread's (lr + 16h) copies, then its arrivals once all
    // four are issued.
    auto refill_row = [&](int t, const int (&key)[4], int h) {
        const int b = t & 1, rr = lr + 16 * h;
        const long long row = wg_row<SPARSE>(ks, key[h], it.kv_begin + t * WG_BN + rr);
        const int bytes = row >= 0 ? 16 : 0;
        if constexpr (H) {
            // The half's raw chunks j = lk + 8i, to the start of row rr's
            // lines of the half (ss_convert makes them f16 in place).
            const unsigned char* src = ks.kv + (row >= 0 ? row * KB : 0);
            const u32 dst = kbuf(b) + wg * 4 * WG_BLOCK + rr * 128 + lk * 16;
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (lk + 8 * i < ss_raw_chunks<FMT>(wg)) cp_async16(dst + i * WG_BLOCK, src + ss_raw_src<FMT>(wg, lk + 8 * i), bytes);
            if (wg == 0 && lk == 0) {
                kvalid[b * WG_BN + rr] = row >= 0;
                if (row < 0) badt[b] = t + 1;
            }
            return;
        }
        const unsigned char* src = ks.kv + (row >= 0 ? row * KB : 0) + lk * 16;
        const u32 dst = kbuf(b) + rr * 128 + (((lk ^ rr) & 7) << 4);
        if (wg == 0) {
#pragma unroll
            for (int blk = 0; blk < 4; blk++) cp_async16(dst + blk * WG_BLOCK, src + blk * 128, bytes);
            if (lk == 0) {
                kvalid[b * WG_BN + rr] = row >= 0;
                if (row < 0) badt[b] = t + 1;
            }
        } else {
#pragma unroll
            for (int blk = 4; blk < 9; blk++) cp_async16(dst + blk * WG_BLOCK, src + blk * 128, bytes);
        }
    };
    auto refill_arrive = [&](int t) {
        const int b = t & 1;
        if (wg == 0) {
            cp_arrive(lo(b));
            mbar_arrive(lo(b)); // after this thread's keys' validity
        } else {
            cp_arrive(hi(b));
        }
    };
    auto refill = [&](int t, const int (&key)[4]) {
#pragma unroll
        for (int h = 0; h < 4; h++) refill_row(t, key, h);
        refill_arrive(t);
    };

    // The first two tiles' key rows, read before the wait where the block
    // waits late (MLA_ITEMS): the page table is then complete.
    int key0[4], key1[4];
    keys(0, key0);
    keys(1, key1);
    pdl_wait(); // the queries, the cache, the partials
    const auto tile_dst = [](int r, int ch) -> u32 { return wsw(r, ch); };
    load_queries<M>(sq_a, tile_dst, q, rq.q_start * heads + row0, rows - row0, heads, tid);
    cp_commit();
    refill(0, key0);
    refill(1, key1);
    cp_wait<0>(); // this thread's copies of the queries (the tiles' land on their mbarriers)
    fence_async_smem();
    __syncthreads(); // the queries, whole
    if constexpr (H) {
        queries_f16<M>(smem + L::q, tile_dst, tid);
        fence_async_smem();
        __syncthreads();
    }

    // The rope columns of this thread's two rows of Q, the A operand of
    // S's last four k-steps (their shared memory then holds sP1).
    u32 q8[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const unsigned char* qr = smem + L::q + 8 * WG_BLOCK + 4 * t4;
        q8[kk][0] = *(const u32*)(qr + r0 * 128 + (((2 * kk) ^ r0) & 7) * 16);
        q8[kk][1] = *(const u32*)(qr + r1 * 128 + (((2 * kk) ^ r1) & 7) * 16);
        q8[kk][2] = *(const u32*)(qr + r0 * 128 + (((2 * kk + 1) ^ r0) & 7) * 16);
        q8[kk][3] = *(const u32*)(qr + r1 * 128 + (((2 * kk + 1) ^ r1) & 7) * 16);
    }

    // S of this warpgroup's tile: the k-steps of column blocks b0..b1-1
    // (both operands in shared memory; the first overwrites s if zero),
    // and those of the rope block (the queries from registers).
    float s[32];
    auto s_nope = [&](u32 sk, int b0, int b1, bool zero) {
        const u64 dq = kmajor(sq_a), dk = kmajor(sk);
#pragma unroll 1
        for (int blk = b0; blk < b1; blk++)
#pragma unroll
            for (int k4 = 0; k4 < 4; k4++) {
                const u32 off = (blk * WG_BLOCK + k4 * 32) >> 4;
                wgmma_s64<H>(s, dq + off, dk + off, !(zero && blk == b0 && k4 == 0));
            }
    };
    auto s_rope = [&](u32 sk) {
        const u64 dk = kmajor(sk + 8 * WG_BLOCK);
#pragma unroll
        for (int k4 = 0; k4 < 4; k4++) wgmma_s64_rs<H>(s, q8[k4], dk + ((k4 * 32) >> 4));
    };
    // An FP8 tile's half hf (0: blocks 0-3, 1: blocks 4-8) of buffer b,
    // landed: this warpgroup's owner of the tile makes it f16 in place,
    // then it is whole for the products of both warpgroups.
    auto landed = [&](int b, int hf, int ph) {
        mbar_wait(hf ? hi(b) : lo(b), ph);
        if constexpr (H) {
            ss_convert<FMT>(smem + L::k0 + b * WG_TILE, hf, lr, lk);
            fence_async_smem();
            named_sync(SS_CONV0 + wg, 128);
        }
        fence_async_smem();
    };
    // The whole S of buffer b's tile, each half once it has landed (phase
    // ph): warpgroup 0 takes blocks 0-3 first (it refills them itself),
    // warpgroup 1 blocks 4-8.
    auto scores = [&](int b, int ph) {
        const u32 sk = kbuf(b);
        wg_fence();
        if (wg == 0) {
            landed(b, 0, ph);
            s_nope(sk, 0, 4, true);
            wg_commit();
            landed(b, 1, ph);
            wg_fence();
            s_nope(sk, 4, 8, false);
            s_rope(sk);
            wg_commit();
        } else {
            landed(b, 1, ph);
            s_nope(sk, 4, 8, true);
            s_rope(sk);
            wg_commit();
            landed(b, 0, ph);
            wg_fence();
            s_nope(sk, 0, 4, false);
            wg_commit();
        }
    };

    // O: 64 x 256, columns wg*256 + 8j + 2 t4 + {0,1} in o[4j], o[4j+1]
    // (row r0) and o[4j+2], o[4j+3] (row r1); l0, l1: this warpgroup's row
    // sums at the running maximum.
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; i++) o[i] = 0.f;
    float l0 = 0.f, l1 = 0.f;
    u32 p[16]; // this warpgroup's P, bf16, as the A operand of its P V (4 k-steps of 16 keys)

    scores(wg, 0);
    wg_wait<0>();
    reg_fence(s);

    for (int i = 0; i < npairs; i++) {
        const bool more = i + 1 < npairs;
        int nk0[4], nk1[4]; // the next pair's key rows, looked up now, copied later
        if (more) {
            keys(2 * i + 2, nk0);
            keys(2 * i + 3, nk1);
        }
        // Scale this warpgroup's S, masked where the tile needs it (a key
        // past the item, past a row's causal limit, or not a row: the
        // block's first row has the lowest limit); its row maxima. Read
        // from lane 0, so that ptxas sees a branch uniform across the warp.
        const int t = 2 * i + wg, j0 = it.kv_begin + t * WG_BN;
        const bool whole = __shfl_sync(0xffffffff, j0 + WG_BN <= it.kv_end && j0 + WG_BN - 1 <= causal_lo && badt[wg] != t + 1, 0);
        float mx0 = NEG_INF, mx1 = NEG_INF;
        if (whole) {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                s[2 * j] *= scale_log2;
                s[2 * j + 1] *= scale_log2;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
                mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = 8 * j + 2 * t4 + e, key = j0 + col;
                    const bool in = kvalid[wg * WG_BN + col] != 0;
                    s[4 * j + e] = (in && key <= causal0) ? s[4 * j + e] * scale_log2 : NEG_INF;
                    s[4 * j + 2 + e] = (in && key <= causal1) ? s[4 * j + 2 + e] * scale_log2 : NEG_INF;
                    mx0 = fmaxf(mx0, s[4 * j + e]);
                    mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
                }
        }
        mx0 = quad_max(mx0);
        mx1 = quad_max(mx1);
        if (wg == 1) named_sync(SS_SCALE0, 256); // warpgroup 0's maximum and scales
        const float mo0 = rmax[r0], mo1 = rmax[r1];
        const float mn0 = fmaxf(mo0, mx0), mn1 = fmaxf(mo1, mx1);
        const float mu0 = mn0 == NEG_INF ? 0.f : mn0, mu1 = mn1 == NEG_INF ? 0.f : mn1;
        const float a0 = fast_exp2(mo0 - mu0), a1 = fast_exp2(mo1 - mu1);
        __syncwarp(); // the quad has read the maxima
        if (t4 == 0) {
            rmax[r0] = mn0;
            rmax[r1] = mn1;
            float* sc = wg == 0 ? scale0 : scale1;
            sc[r0] = a0;
            sc[r1] = a1;
        }
        // O's rescale: by a0 (warpgroup 0, then by warpgroup 1's scale
        // before the second product), or by both tiles' scales at once.
        float f0 = a0, f1 = a1;
        if (wg == 1) {
            f0 *= scale0[r0];
            f1 *= scale0[r1];
        }
#pragma unroll
        for (int j = 0; j < 32; j++) {
            o[4 * j] *= f0;
            o[4 * j + 1] *= f0;
            o[4 * j + 2] *= f1;
            o[4 * j + 3] *= f1;
        }
        l0 *= f0;
        l1 *= f1;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float e0 = fast_exp2(s[4 * j] - mu0), e1 = fast_exp2(s[4 * j + 1] - mu0);
            const float e2 = fast_exp2(s[4 * j + 2] - mu1), e3 = fast_exp2(s[4 * j + 3] - mu1);
            s[4 * j] = e0;
            s[4 * j + 1] = e1;
            s[4 * j + 2] = e2;
            s[4 * j + 3] = e3;
            l0 += e0 + e1;
            l1 += e2 + e3;
            // keys 8j + 2 t4: k-step j / 2, registers 0-1 (j even) or 2-3
            p[4 * (j >> 1) + 2 * (j & 1)] = pack_<H>(e0, e1);
            p[4 * (j >> 1) + 2 * (j & 1) + 1] = pack_<H>(e2, e3);
        }
        const u64 dv = mnmajor(kbuf(wg) + wg * 4 * WG_BLOCK); // this warpgroup's half of its own tile's V
        if (wg == 0) {
            named_arrive(SS_SCALE0, 256);
            wg_fence();
            reg_fence(o);
            // One group a k-step: each retired one frees 16 keys of K0's
            // blocks 0-3 (their last reader), this thread's row h of them.
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                wgmma_o_rs<H>(o, p + 4 * kk, dv + kk * 128);
                wg_commit();
            }
            if (more) {
                wg_wait<3>();
                refill_row(2 * i + 2, nk0, 0);
                wg_wait<2>();
                refill_row(2 * i + 2, nk0, 1);
                wg_wait<1>();
                refill_row(2 * i + 2, nk0, 2);
                wg_wait<0>();
                refill_row(2 * i + 2, nk0, 3);
                refill_arrive(2 * i + 2);
            } else {
                wg_wait<0>();
            }
            reg_keep(p);
            reg_fence(o);
            named_sync(SS_SCALE1, 256); // warpgroup 1's maxima and scales
            const float c0 = scale1[r0], c1 = scale1[r1];
            l0 *= c0;
            l1 *= c1;
            // P0 at warpgroup 1's maximum, for its half of O.
            unsigned char* sp0 = smem + L::p0;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int col = 8 * j + 2 * t4;
                *(u32*)(sp0 + wsw(r0, col >> 3) + (col & 7) * 2) = pack_<H>(s[4 * j] * c0, s[4 * j + 1] * c0);
                *(u32*)(sp0 + wsw(r1, col >> 3) + (col & 7) * 2) = pack_<H>(s[4 * j + 2] * c1, s[4 * j + 3] * c1);
            }
            fence_async_smem();
            named_arrive(SS_P0, 256);
            named_sync(SS_O1, 256); // sP1
#pragma unroll
            for (int j = 0; j < 32; j++) {
                o[4 * j] *= c0;
                o[4 * j + 1] *= c0;
                o[4 * j + 2] *= c1;
                o[4 * j + 3] *= c1;
            }
            wg_fence();
            reg_fence(o);
            const u64 dp1 = kmajor(base + L::p1), dv1 = mnmajor(kbuf(1));
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_o<H>(o, dp1 + kk * 2, dv1 + kk * 128, 1);
            wg_commit();
            if (more) {
                const u32 sk = kbuf(0);
                const int ph = (i + 1) & 1;
                landed(0, 0, ph);
                wg_fence();
                s_nope(sk, 0, 4, true);
                wg_commit();
                wg_wait<1>(); // the product over sP1: K1's blocks 0-3 are free
                refill(2 * i + 3, nk1);
                landed(0, 1, ph);
                wg_fence();
                s_nope(sk, 4, 8, false);
                s_rope(sk);
                wg_commit();
            }
            wg_wait<0>();
        } else {
            named_arrive(SS_SCALE1, 256);
            unsigned char* sp1 = smem + L::p1;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int col = 8 * j + 2 * t4;
                *(u32*)(sp1 + wsw(r0, col >> 3) + (col & 7) * 2) = p[4 * (j >> 1) + 2 * (j & 1)];
                *(u32*)(sp1 + wsw(r1, col >> 3) + (col & 7) * 2) = p[4 * (j >> 1) + 2 * (j & 1) + 1];
            }
            wg_fence();
            reg_fence(o);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_o_rs<H>(o, p + 4 * kk, dv + kk * 128);
            wg_commit();
            fence_async_smem(); // sP1, before warpgroup 0's product reads it
            named_sync(SS_P0, 256);
            wg_fence();
            const u64 dp0 = kmajor(base + L::p0), dv0 = mnmajor(kbuf(0) + 4 * WG_BLOCK);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_o<H>(o, dp0 + kk * 2, dv0 + kk * 128, 1);
            wg_commit();
            named_arrive(SS_O1, 256);
            wg_wait<1>(); // its own product: K1's blocks 4-8 are free
            reg_keep(p);
            if (more) refill(2 * i + 3, nk1);
            wg_wait<0>(); // the product over sP0: K0's blocks 4-8 are free
            if (more) {
                refill(2 * i + 2, nk0);
                scores(1, (i + 1) & 1);
                wg_wait<0>();
            }
        }
        reg_fence(s);
        reg_fence(o);
    }
    reg_keep(q8[0]);
    reg_keep(q8[1]);
    reg_keep(q8[2]);
    reg_keep(q8[3]);

    // Row sums: this thread's keys, its quad's, then both warpgroups'; the
    // final maxima are warpgroup 1's.
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    if (t4 == 0) {
        rsum[wg * M + r0] = l0;
        rsum[wg * M + r1] = l1;
    }
    __syncthreads();
    l0 = rsum[r0] + rsum[M + r0];
    l1 = rsum[r1] + rsum[M + r1];
    const float m0 = rmax[r0], m1 = rmax[r1];

    wg_store(o, l0, l1, m0, m1, kv_mul, out, lse, part_o, part_lse, rq, it, heads, rows, row0, r0, wg, t4);
}

// The seesaw in the four forms (devkernels.go's hopperSeesaw).
MLA_DECODE_ENTRY(mla_decode_ss64, 1, mla_decode_ss, SsLayout, (FMT_BF16))
MLA_DECODE_FP8_ENTRY(mla_decode_fp8_ss64, 1, mla_decode_ss, SsLayout, (FMT_FP8))
MLA_SPARSE_ENTRY(mla_sparse_ss64, 1, mla_decode_ss, SsLayout, (FMT_BF16))
MLA_SPARSE_ENTRY(mla_sparse_fp8_ss64, 1, mla_decode_ss, SsLayout, (FMT_DSA))

// ---------------------------------------------------------------------------
// The narrow shapes (16 query rows of a request per block: 16 heads and one
// query token, DeepSeek's tensor-parallel-8 decode), which are bound by
// memory: the 64-row products above would waste three quarters of every
// wgmma. Here the products are transposed (A and B swapped), so that the 64
// rows of a wgmma are the tile's 64 keys and its 16 columns the query rows:
// S^T = K Q^T (36 wgmma.m64n16k16, K K-major, Q K-major) and O^T += V^T P^T
// (8 column blocks x 4 key steps of wgmma.m64n16k16, V^T through the
// transposed-A form over the same tile, P^T K-major). One warpgroup computes;
// the other loads. The softmax runs down the columns of S^T: each column's
// maximum crosses the consumer's four warps through shared memory, and P^T
// (16 rows x 64 keys, bf16 or f16) is written to shared memory for the second
// product. Shared memory holds the queries (18 KB) and two 72 KB key tiles,
// both in flight from the start in every form; the consumer alone copies the
// queries (and over an FP8 cache makes them f16), so that the loader's first
// copies go out first. In every form the consumer issues a tile's S^T behind
// the last tile's O^T product, before it waits for either. A bf16 tile lands
// by the loader's cp.async (eight threads a row) onto the stage's FULL
// mbarrier, and the consumer frees it on its EMPTY one once the tile's O^T
// product is done (wgmma.wait_group 1: the next S^T may still run). The FP8
// caches (dense, and DeepSeek-V3.2's) are staged in the loader's registers
// (two tiles in flight, 144 or 176 registers a thread) and converted into
// whichever f16 tile the consumer is not computing; named barriers (FULL,
// EMPTY) pass the tiles between them.

// D (+)= A B for one warpgroup, m64 n16 k16: A (64 x 16) K-major, or MN-major
// with TA = 1; B (16 x 16) K-major; both in shared memory. T is "bf16" or
// "f16"; accumulate 0 overwrites d.
#define WGMMA_N16_ASM(T)                                                                        \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"                                                 \
    "wgmma.mma_async.sync.aligned.m64n16k16.f32." T "." T " {%0, %1, %2, %3, %4, %5, %6, %7}, " \
    "%8, %9, p, 1, 1, %11, 0;\n}\n"
template <bool H, int TA>
__device__ __forceinline__ void wgmma_n16(float (&d)[8], u64 da, u64 db, int accumulate) {
    if constexpr (H)
        asm volatile(WGMMA_N16_ASM("f16")
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "l"(da), "l"(db), "r"(accumulate), "n"(TA));
    else
        asm volatile(WGMMA_N16_ASM("bf16")
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "l"(da), "l"(db), "r"(accumulate), "n"(TA));
}

#define WN_ROWS 16                       /* query rows per block */
#define WN_QBLOCK (WN_ROWS * 128)        /* one column block of the queries: 16 rows x 128 bytes */

// Byte offset of 16-byte chunk ch of query row r (0..15): 9 column blocks
// of 16 rows x 128 bytes, swizzled as the key tiles.
__device__ __forceinline__ u32 qsw(int r, int ch) {
    return (u32)((ch >> 3) * WN_QBLOCK + r * 128 + (((ch ^ r) & 7) << 4));
}

// The consumer warpgroup's own barrier (the loaders do not wait for it).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }

// The shared memory of mla_decode_wgn<FMT, *>, byte offsets from a start
// aligned to 1024 bytes, and the 1024 bytes the alignment may take: 16
// query rows (9 column blocks), two key tiles (bf16, or f16 converted from
// FP8), P^T (16 rows x 64 keys), 4 warps' row maxima and sums (4 x 16
// floats each), each tile's keys' validity (2 x 64 ints), and the bf16
// stages' mbarriers (64 bytes; the FP8 forms stage their rows in
// registers).
template <int FMT>
struct WgnLayout {
    static constexpr int M = WN_ROWS;
    static constexpr int NT = 2;
    static constexpr int q = 0;
    static constexpr int kv = q + 9 * WN_QBLOCK;
    static constexpr int p = kv + NT * WG_TILE;
    static constexpr int red_max = p + WN_QBLOCK;
    static constexpr int red_sum = red_max + 4 * 4 * M;
    static constexpr int kvalid = red_sum + 4 * 4 * M;
    static constexpr int bars = kvalid + 4 * 2 * WG_BN;
    static constexpr int bytes = 1024 + bars + (FMT == FMT_BF16 ? 64 : 0);
};

template <int FMT, bool SPARSE>
__device__ __forceinline__ void mla_decode_wgn(const QView& q, const Keys& ks, bf16* __restrict__ out,
                                               float* __restrict__ lse, const Item it,
                                               const ReqInfo* __restrict__ reqs,
                                               bf16* __restrict__ part_o, float* __restrict__ part_lse, int heads,
                                               float scale_log2, int hb) {
    constexpr int M = WN_ROWS;
    constexpr bool H = FMT != FMT_BF16;
    // Every form keeps two key tiles (bf16, or f16 converted from FP8) and
    // a loader warpgroup beside the consumer: the FP8 forms stage their rows
    // in the loader's registers (RS: two tiles in flight, one converted into
    // the f16 tile the consumer is not computing, so the conversion runs
    // beside the products); bf16 tiles come by the loader's cp.async onto
    // mbarriers.
    constexpr bool RS = H;
    constexpr int KB = row_bytes(FMT);
    constexpr int NT = 2;
    using L = WgnLayout<FMT>;
    static_assert(L::M == M && L::NT == NT, "WgnLayout follows the body");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    unsigned char* sq = smem + L::q;
    unsigned char* skv = smem + L::kv;
    unsigned char* sp = smem + L::p;
    float* red_max = (float*)(smem + L::red_max);
    float* red_sum = (float*)(smem + L::red_sum);
    int* kvalid = (int*)(smem + L::kvalid);
    unsigned char* sraw = smem + L::bars;

    const ReqInfo rq = reqs[it.req];
    const int* krows = key_rows<SPARSE>(ks, it.req); // read beside the request
    const int rows = rq.q_len * heads;
    const int row0 = hb * M;
    if (row0 >= rows) return;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    // Read from lane 0, so that the compiler sees a value uniform across the
    // warp: a branch on a per-thread value around the products makes ptxas
    // serialise every wgmma of the loop (C7518).
    const bool consumer = __shfl_sync(0xffffffff, warp, 0) < 4;
    const u32 sq_a = smem_addr(sq), skv_a = smem_addr(skv), sp_a = smem_addr(sp);
    const float kv_mul = FMT == FMT_FP8 ? ks.kv_scale : 1.f;
    scale_log2 *= kv_mul;
    auto q_dst = [](int r, int ch) -> u32 { return qsw(r, ch); };

    const int g0 = rq.q_start * heads + row0; // the block's first query row
    if constexpr (RS) __syncthreads(); // a block's last item is done with its queries and f16 tiles
    const int ntiles = (it.kv_end - it.kv_begin + WG_BN - 1) / WG_BN;

    // The consumer's place in the accumulators (64 x 16, rows = keys of S^T
    // or value columns of O^T): rows kr and kr + 8 of its warp's 16, and
    // columns (query rows) 8j + 2*(lane&3) + e of d[4j + e] (row kr) and
    // d[4j + 2 + e] (row kr + 8).
    const int w = warp & 3, kr = w * 16 + (lane >> 2), qc = (lane & 3) * 2;
    int causal[4]; // of columns c(j, e) = 8j + qc + e, at [2j + e]
#pragma unroll
    for (int x = 0; x < 4; x++) causal[x] = rq.seq_len - rq.q_len + (row0 + 8 * (x >> 1) + qc + (x & 1)) / heads;

    float o[8][8]; // O^T: value columns 64i + kr (+8), query columns as above
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int x = 0; x < 8; x++) o[i][x] = 0.f;
    float m[4] = {NEG_INF, NEG_INF, NEG_INF, NEG_INF}, l[4] = {0.f, 0.f, 0.f, 0.f};

    // The consumer's products and softmax of one tile (sk_a: its f16 or bf16
    // tile; vb: its keys' validity; j0: its first key).
    float s[8];
    auto scores = [&](u32 sk_a) {
        // S^T = K Q^T over the 576 columns.
#pragma unroll
        for (int x = 0; x < 8; x++) s[x] = 0.f;
        wg_fence();
        reg_fence(s);
        const u64 dk = kmajor(sk_a), dq = kmajor(sq_a);
#pragma unroll
        for (int kk = 0; kk < DQK / 16; kk++)
            wgmma_n16<H, 0>(s, dk + (((kk >> 2) * WG_BLOCK + (kk & 3) * 32) >> 4),
                            dq + (((kk >> 2) * WN_QBLOCK + (kk & 3) * 32) >> 4), kk > 0);
        wg_commit();
    };
    auto softmax = [&](int vb, int j0) {
        // Scale and mask, then each column's maximum over the tile.
        const bool in0 = kvalid[vb + kr] != 0, in1 = kvalid[vb + kr + 8] != 0;
        float mx[4];
#pragma unroll
        for (int x = 0; x < 4; x++) {
            const int j = x >> 1, e = x & 1;
            float& a = s[4 * j + e];
            float& b = s[4 * j + 2 + e];
            a = (in0 && j0 + kr <= causal[x]) ? a * scale_log2 : NEG_INF;
            b = (in1 && j0 + kr + 8 <= causal[x]) ? b * scale_log2 : NEG_INF;
            float v = fmaxf(a, b);
            v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 4));
            v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 8));
            v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, 16));
            mx[x] = v;
        }
        if (lane < 4) {
#pragma unroll
            for (int x = 0; x < 4; x++) red_max[w * M + 8 * (x >> 1) + qc + (x & 1)] = mx[x];
        }
        consumer_sync();
        float mu[4], al[4];
#pragma unroll
        for (int x = 0; x < 4; x++) {
            const int c = 8 * (x >> 1) + qc + (x & 1);
            const float mt = fmaxf(fmaxf(m[x], red_max[c]), fmaxf(red_max[M + c], fmaxf(red_max[2 * M + c], red_max[3 * M + c])));
            mu[x] = mt == NEG_INF ? 0.f : mt;
            al[x] = fast_exp2(m[x] - mu[x]);
            m[x] = mt;
            l[x] *= al[x];
        }
        if (__any_sync(0xffffffff, al[0] != 1.f || al[1] != 1.f || al[2] != 1.f || al[3] != 1.f))
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    o[i][4 * (x >> 1) + (x & 1)] *= al[x];
                    o[i][4 * (x >> 1) + 2 + (x & 1)] *= al[x];
                }
        // P^T, row c (a query row) of 64 keys: this thread's keys kr and kr + 8.
#pragma unroll
        for (int x = 0; x < 4; x++) {
            const int j = x >> 1, e = x & 1, c = 8 * j + qc + e;
            const float pa = fast_exp2(s[4 * j + e] - mu[x]), pb = fast_exp2(s[4 * j + 2 + e] - mu[x]);
            l[x] += pa + pb;
            const u32 two = pack_<H>(pa, pb); // low half key kr, high half key kr + 8
            *(unsigned short*)(sp + qsw(c, kr >> 3) + (kr & 7) * 2) = (unsigned short)(two & 0xffff);
            *(unsigned short*)(sp + qsw(c, (kr + 8) >> 3) + ((kr + 8) & 7) * 2) = (unsigned short)(two >> 16);
        }
        fence_async_smem();
        consumer_sync(); // P^T whole, the maxima read
    };
    auto values = [&](u32 sk_a) {
        // O^T += V^T P^T: 8 blocks of 64 value columns, 4 steps of 16 keys.
        wg_fence();
#pragma unroll
        for (int i = 0; i < 8; i++) reg_fence(o[i]);
        const u64 dp = kmajor(sp_a);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const u64 dv = mnmajor(sk_a + i * WG_BLOCK);
#pragma unroll
            for (int kk = 0; kk < WG_BN / 16; kk++) wgmma_n16<H, 1>(o[i], dv + kk * 128, dp + kk * 2, 1);
        }
        wg_commit();
    };

    // The consumer's queries, copied by its threads alone once the launch
    // before has written them.
    auto queries_in = [&] {
        pdl_wait(); // the queries, the partials
        load_queries<M, 128>(sq_a, q_dst, q, g0, rows - row0, heads, tid);
        cp_commit();
        cp_wait<0>(); // this thread's copies of the queries
    };

    if constexpr (RS) {
        // Named barriers between the warpgroups: FULL(b) when the loader has
        // converted a tile into f16 tile b, EMPTY(b) when the consumer's
        // products are done with it (2 + b and 4 + b; 0 is __syncthreads,
        // 1 the consumer's own). The consumer alone copies the queries and
        // makes them f16, while the loader's first rows are on their way.
        if (!consumer) {
            // Rows lr and lr + 32 of each tile, held in registers from their
            // load to their conversion (ra for even tiles, rb for odd ones):
            // of a dense FP8 row (576 e4m3) chunks lk, lk + 4, ..., lk + 32;
            // of DeepSeek-V3.2's 656-byte row the e4m3 chunks lk, lk + 4,
            // ..., lk + 28, the chunk of the four block scales, and the rope
            // chunks lk and lk + 4 (8 bf16 each).
            constexpr bool DSA = FMT == FMT_DSA;
            constexpr int E = DSA ? 8 : 9; // e4m3 chunks a row
            constexpr int CPR = DSA ? E + 3 : E; // chunks a row
            const int ltid = tid - 128, lr = ltid >> 2, lk = ltid & 3;
            // The first tile's keys, looked up before the wait where the
            // block waits late (MLA_ITEMS).
            int nk[2] = {wg_key<SPARSE>(ks, krows, it.kv_begin + lr, it.kv_end),
                         wg_key<SPARSE>(ks, krows, it.kv_begin + lr + 32, it.kv_end)};
            pdl_wait(); // the cache
            uint4 ra[2 * CPR], rb[2 * CPR];
            int va[2], vb[2];
            auto fetch = [&](uint4(&r)[2 * CPR], int (&v)[2], int t) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int rr = lr + 32 * h;
                    const long long row = wg_row<SPARSE>(ks, nk[h], it.kv_begin + t * WG_BN + rr);
                    v[h] = row >= 0;
                    const uint4* src = (const uint4*)(ks.kv + (row >= 0 ? row * KB : 0));
                    const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
                    for (int i = 0; i < E; i++) r[CPR * h + i] = row >= 0 ? __ldg(src + lk + 4 * i) : z;
                    if constexpr (DSA) {
                        r[CPR * h + E] = row >= 0 ? __ldg(src + DV / 16) : z; // the scales
#pragma unroll
                        for (int j = 0; j < 2; j++) r[CPR * h + E + 1 + j] = row >= 0 ? __ldg(src + DV / 16 + 1 + lk + 4 * j) : z;
                    }
                    nk[h] = wg_key<SPARSE>(ks, krows, it.kv_begin + (t + 1) * WG_BN + rr, it.kv_end);
                }
            };
            auto put = [&](const uint4(&r)[2 * CPR], const int (&v)[2], int b) {
                unsigned char* dt = skv + b * WG_TILE;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int rr = lr + 32 * h;
#pragma unroll
                    for (int i = 0; i < E; i++) {
                        const uint4 x = r[CPR * h + i];
                        const int k = lk + 4 * i;
                        uint4 lo = e4m3x8_f16(x.x, x.y), hi = e4m3x8_f16(x.z, x.w);
                        if constexpr (DSA) {
                            // Chunk k's 16 values share block scale k / 8 (= i / 2).
                            const uint4 sc = r[CPR * h + E];
                            const u32 sv = (i >> 1) == 0 ? sc.x : (i >> 1) == 1 ? sc.y : (i >> 1) == 2 ? sc.z : sc.w;
                            const float f = __uint_as_float(sv);
                            const u32 s2 = pack_f16(f, f);
                            lo = make_uint4(hmul2(lo.x, s2), hmul2(lo.y, s2), hmul2(lo.z, s2), hmul2(lo.w, s2));
                            hi = make_uint4(hmul2(hi.x, s2), hmul2(hi.y, s2), hmul2(hi.z, s2), hmul2(hi.w, s2));
                        }
                        *(uint4*)(dt + wsw(rr, 2 * k)) = lo;
                        *(uint4*)(dt + wsw(rr, 2 * k + 1)) = hi;
                    }
                    if constexpr (DSA) {
#pragma unroll
                        for (int j = 0; j < 2; j++) // the rope: f16 chunks 64 + lk + 4j
                            *(uint4*)(dt + wsw(rr, DV / 8 + lk + 4 * j)) = bf16x8_f16(r[CPR * h + E + 1 + j]);
                    }
                    if (lk == 0) kvalid[b * WG_BN + rr] = v[h];
                }
                fence_async_smem();
            };
            fetch(ra, va, 0);
            for (int t = 0; t < ntiles; t += 2) {
                if (t + 1 < ntiles) fetch(rb, vb, t + 1);
                if (t >= 2) named_sync(4, 256);
                put(ra, va, 0);
                named_arrive(2, 256);
                if (t + 1 >= ntiles) break;
                if (t + 2 < ntiles) fetch(ra, va, t + 2);
                if (t >= 1) named_sync(5, 256);
                put(rb, vb, 1);
                named_arrive(3, 256);
            }
            return;
        }
        queries_in();
        consumer_sync();
        queries_f16<M, 128>(sq, q_dst, tid);
        fence_async_smem(); // before the products read them
        consumer_sync();
        for (int t = 0; t < ntiles; t++) {
            const int b = t & 1;
            named_sync(2 + b, 256); // f16 tile b holds tile t
            const u32 sk_a = skv_a + b * WG_TILE;
            scores(sk_a); // runs while the last tile's O^T product ends
            wg_wait<0>();
            reg_fence(s);
#pragma unroll
            for (int i = 0; i < 8; i++) reg_fence(o[i]);
            if (t >= 1 && t + 1 < ntiles) named_arrive(4 + (b ^ 1), 256); // tile t-1's f16 tile is free for t+1
            softmax(b * WG_BN, it.kv_begin + t * WG_BN);
            values(sk_a);
        }
    } else {
        // The loader warpgroup copies every tile, eight threads a key row
        // (rows pr, pr + 16, pr + 32, pr + 48: a warp's copy is one 128-byte
        // line of each of four rows), the rows' places looked up a tile
        // ahead, onto the stage's FULL mbarrier: the copies' own arrivals
        // (cp.async.mbarrier.arrive.noinc) and a plain one of each loader
        // thread after it wrote the keys' validity, 256 in all. The
        // consumer's threads arrive on the stage's EMPTY mbarrier once its
        // products are done with it, and the loaders refill it: both stages
        // fly from the start, and no copy waits for the block's barrier.
        const u32 bars = smem_addr(sraw); // FULL x2, EMPTY x2
        auto full = [&](int t) -> u32 { return bars + 8 * (t & 1); };
        auto empty = [&](int t) -> u32 { return bars + 16 + 8 * (t & 1); };
        if (tid == 0) {
            mbar_init(full(0), 256);
            mbar_init(full(1), 256);
            mbar_init(empty(0), 128);
            mbar_init(empty(1), 128);
            fence_async_smem();
        }
        __syncthreads(); // the barriers, before any arrival
        if (!consumer) {
            // The first tile's keys are looked up before the wait where the
            // block waits late (MLA_ITEMS), and its copies go out first.
            const int ltid = tid - 128, pr = ltid >> 3, pk = ltid & 7;
            int nk[4];
#pragma unroll
            for (int h = 0; h < 4; h++) nk[h] = wg_key<SPARSE>(ks, krows, it.kv_begin + pr + 16 * h, it.kv_end);
            pdl_wait(); // the cache
            for (int t = 0; t < ntiles; t++) {
                if (t >= 2) mbar_wait(empty(t), ((t >> 1) - 1) & 1); // tile t-2's products are done with the stage
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    const int rr = pr + 16 * h;
                    const long long row = wg_row<SPARSE>(ks, nk[h], it.kv_begin + t * WG_BN + rr);
                    wg_issue<FMT, 8>(skv_a + (t & 1) * WG_TILE, ks, row, rr, pk);
                    if (pk == 0) kvalid[(t & 1) * WG_BN + rr] = row >= 0;
                }
                cp_arrive(full(t));
                mbar_arrive(full(t));
#pragma unroll
                for (int h = 0; h < 4; h++)
                    nk[h] = wg_key<SPARSE>(ks, krows, it.kv_begin + (t + 1) * WG_BN + pr + 16 * h, it.kv_end);
            }
            return;
        }
        queries_in();
        fence_async_smem();
        consumer_sync();
        for (int t = 0; t < ntiles; t++) {
            const int j0 = it.kv_begin + t * WG_BN;
            const u32 sk_a = skv_a + (t & 1) * WG_TILE;
            mbar_wait(full(t), (t >> 1) & 1);
            fence_async_smem(); // the loaders' copies before the products read them
            scores(sk_a); // queued behind tile t-1's O^T product
            if (t >= 1) {
                wg_wait<1>(); // tile t-1's O^T product, committed before S^T, is done with its stage
                mbar_arrive(empty(t - 1));
            }
            wg_wait<0>(); // S^T, and P^T free
#pragma unroll
            for (int i = 0; i < 8; i++) reg_fence(o[i]);
            reg_fence(s);
            softmax((t & 1) * WG_BN, j0);
            values(sk_a);
        }
    }
    if (!consumer) return;
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 8; i++) reg_fence(o[i]);

    // Each column's sum: this thread's keys, its warp's, the consumer's.
#pragma unroll
    for (int x = 0; x < 4; x++) {
        l[x] += __shfl_xor_sync(0xffffffff, l[x], 4);
        l[x] += __shfl_xor_sync(0xffffffff, l[x], 8);
        l[x] += __shfl_xor_sync(0xffffffff, l[x], 16);
    }
    if (lane < 4) {
#pragma unroll
        for (int x = 0; x < 4; x++) red_sum[w * M + 8 * (x >> 1) + qc + (x & 1)] = l[x];
    }
    consumer_sync();
    // A row's 16 value columns 16w.. of block i are a 32-byte sector:
    // lanes g = lane >> 2 of the warp hold columns 16w + g and 16w + g + 8
    // (of the row lane & 3 picks). Even lanes trade the second for their
    // odd neighbour's first (lanes 4 apart), so each lane writes two
    // adjacent columns and the warp's lanes of a row the whole sector (see
    // quad_store16).
    const int g = lane >> 2;
    const bool even = (g & 1) == 0;
#pragma unroll
    for (int x = 0; x < 4; x++) {
        const int c = 8 * (x >> 1) + qc + (x & 1);
        const float lt = red_sum[c] + red_sum[M + c] + red_sum[2 * M + c] + red_sum[3 * M + c];
        const int gr = row0 + c; // the row within the request
        const bool ok = gr < rows; // the same for lanes 4 apart
        const float inv = lt > 0.f ? kv_mul / lt : 0.f;
        const float ls = lt > 0.f ? (m[x] + __log2f(lt)) * 0.6931471805599453f : NEG_INF;
        const int a = 4 * (x >> 1) + (x & 1);
        const bool whole = rq.num_splits == 1;
        const long long p = whole ? (long long)rq.q_start * heads + gr : (long long)rq.part_base + (long long)it.split * rows + gr;
        bf16* dst = (whole ? out : part_o) + p * DV + w * 16 + (even ? g : g + 7);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float x0 = o[i][a] * inv, x8 = o[i][a + 2] * inv;
            const float r = __shfl_xor_sync(0xffffffff, even ? x8 : x0, 4);
            if (ok) *(u32*)(dst + 64 * i) = even ? pack_bf16(x0, r) : pack_bf16(r, x8);
        }
        if (ok && w == 0 && lane < 4) (whole ? lse : part_lse)[p] = ls;
    }
}

MLA_DECODE_ENTRY(mla_decode_wg16, 1, mla_decode_wgn, WgnLayout, (FMT_BF16))
MLA_DECODE_FP8_ENTRY(mla_decode_fp8_wg16, 1, mla_decode_wgn, WgnLayout, (FMT_FP8))
MLA_SPARSE_ENTRY(mla_sparse_wg16, 1, mla_decode_wgn, WgnLayout, (FMT_BF16))
MLA_SPARSE_ENTRY(mla_sparse_fp8_wg16, 1, mla_decode_wgn, WgnLayout, (FMT_DSA))
