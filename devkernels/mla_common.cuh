// The shared part of the absorbed-MLA decode modules (mla_decode.cu on
// mma.sync for sm_80 and newer, mla_decode_sm90.cu on wgmma for sm_90a):
// the cache formats, the plan's work items and per-request metadata, the
// loaders of key tiles (dense pages or sparse slots), the FP8
// dequantisation, and the entry points' parameters. Compiled after
// tile.cuh and before the module's own source.
//
// Layout (see launch.Tensors): q [tokens, heads, 576] (or its two parts:
// QView), out [tokens, heads, 512], lse [tokens, heads] (natural log of
// the sum of exp(scale * q.k)), and the cache kv_cache [pages*page_size, row] in one of three formats:
//   FMT_BF16  576 bf16 (the first 512 columns are also the values);
//   FMT_FP8   576 e4m3, the value stored times the layer's kv_scale (sglang's
//             --kv-cache-dtype fp8_e4m3 for the MLA pool);
//   FMT_DSA   656 bytes: 512 e4m3, 4 f32 scales (one per 128 columns), 64
//             bf16 rope values (sglang's NSA pool in fp8_e4m3, FlashMLA's
//             sparse FP8 layout).
// Dense kernels find request i's keys through kv_indptr/kv_indices (its
// pages); sparse kernels read, for query token t, topk_indices[t, :]: slots
// of the cache (page * page_size + offset, sglang's page_table_1), -1 pads.

#define DQK 576
#define DV 512
#define BN 32
#define NTHREADS 256
#define QSTRIDE (DQK + 8)   /* shared row stride in elements: 1168 bytes, 16 mod 128 */
#define PSTRIDE (BN + 8)    /* 80 bytes, conflict-free for ldmatrix */

// Cache formats.
#define FMT_BF16 0
#define FMT_FP8 1
#define FMT_DSA 2

// Bytes of one cached token in format fmt.
__host__ __device__ constexpr int row_bytes(int fmt) {
    return fmt == FMT_BF16 ? DQK * 2 : fmt == FMT_FP8 ? DQK : DV + 4 * (DV / 128) + 2 * (DQK - DV);
}

// The queries of a layer: row g (token-major, g = t*heads + h) is the
// DV columns of q nope at nope + t*nope_t + h*nope_h, then the DQK - DV of
// q rope at rope + t*rope_t + h*rope_h + rope_col, each contiguous. The
// plan binds either the two parts DeepSeek's absorbed attention leaves
// (launch.Tensors' q_nope and q_rope, any strides, rope_col 0) or one
// [tokens, heads, DQK] q as both (rope_col DV).
struct QView {
    const bf16* nope;
    const bf16* rope;
    long long nope_t, nope_h, rope_t, rope_h;
    int rope_col;
};

// Issues the cp.async copies of a block's M query rows, rows g0 + r of the
// batch (token-major), into shared memory at base: chunk ch (of DQK / 8) of
// row r to base + dst(r, ch), zero for r >= n (past the request's rows).
// Where one token holds the M rows (h0 + M <= heads, the head block of a
// decode), row r is r head strides past the first: the q nope chunks (64 a
// row) and the q rope ones (8) go in two loops in which a thread keeps its
// chunk column and steps its source by a fixed stride. Otherwise (a verify
// or an extend over few heads) each row's token and head come of a float
// quotient (exact here: h0 + r < 2048), in a loop kept rolled. (Whole
// queries through it cost 5-7% more at batch 1 than a loader of contiguous
// rows alone: docs/bench/h100-2026-12-05-qsplit.md.) T threads issue them,
// tid 0 to T - 1: the block's, or the 16-row body's consumer warpgroup.
template <int M, int T = NTHREADS, class Dst>
__device__ __forceinline__ void load_queries(u32 base, Dst dst, const QView& q, int g0, int n, int heads, int tid) {
    constexpr int NC = DV / 8, RC = (DQK - DV) / 8; // chunks a row: 64 of q nope, 8 of q rope
    static_assert(NC == 64 && RC == 8, "the row chunks are found by shifts");
    const int t0 = g0 / heads, h0 = g0 - t0 * heads;
    const bf16* nope = q.nope + t0 * q.nope_t + h0 * q.nope_h; // the block's first row
    const bf16* rope = q.rope + t0 * q.rope_t + h0 * q.rope_h + q.rope_col;
    if (h0 + M <= heads) {
        // A thread's chunk column is the same in every pass, its row
        // T / 64 (q nope) or T / 8 (q rope) rows further on, its source a
        // stride further: a pointer stepped, not a product, and a select
        // of the source, not a branch (a copy past the request's rows reads
        // nothing, from the first row). Where the passes cover the rows
        // exactly, no pass asks whether its row is one of the M.
        static_assert(T % NC == 0, "a pass covers whole rows");
        constexpr int PN = (M * NC + T - 1) / T, PR = (M * RC + T - 1) / T;
        const int cn = tid & (NC - 1), cr = tid & (RC - 1);
        const bf16* pn = nope + (tid / NC) * q.nope_h + cn * 8;
        const bf16* pr = rope + (tid / RC) * q.rope_h + cr * 8;
        const long long sn = (T / NC) * q.nope_h, sr = (T / RC) * q.rope_h;
#pragma unroll
        for (int i = 0; i < PN; i++, pn += sn) {
            const int r = tid / NC + i * (T / NC);
            const bool ok = r < n;
            if (PN * T == M * NC || r < M) cp_async16(base + dst(r, cn), ok ? pn : q.nope, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < PR; i++, pr += sr) {
            const int r = tid / RC + i * (T / RC);
            const bool ok = r < n;
            if (PR * T == M * RC || r < M) cp_async16(base + dst(r, NC + cr), ok ? pr : q.nope, ok ? 16 : 0);
        }
        return;
    }
    const float rcp = 1.f / heads;
#pragma unroll 1
    for (int c = tid; c < M * (NC + RC); c += T) {
        const int r = c / (NC + RC), ch = c - r * (NC + RC);
        const int hh = h0 + r, dt = __float2int_rz(((float)hh + 0.5f) * rcp), h = hh - dt * heads - h0;
        const bool ok = r < n;
        const bf16* src = ch < NC ? nope + (long long)dt * q.nope_t + (long long)h * q.nope_h + ch * 8
                                  : rope + (long long)dt * q.rope_t + (long long)h * q.rope_h + (ch - NC) * 8;
        cp_async16(base + dst(r, ch), ok ? src : q.nope, ok ? 16 : 0);
    }
}

// Per-request metadata (the plan's "requests" buffer), 8 int32 each.
struct ReqInfo {
    int q_start;    // first query token of the request in q/out/lse
    int q_len;      // its query tokens
    int seq_len;    // its keys
    int num_splits; // chunks its keys are cut into
    int part_base;  // first partial row in the workspace
    int pad0, pad1, pad2;
};

// One work item (the plan's "schedule" buffer), 4 int32 each.
struct Item {
    int req, kv_begin, kv_end, split;
};

// Where a block finds its keys.
struct Keys {
    const unsigned char* kv; // the cache
    const int* kv_indptr;    // dense: request i's pages are kv_indices[kv_indptr[i]:]
    const int* kv_indices;   // dense: the page table; sparse: topk_indices
    int page_shift;          // dense: log2 of the page size
    int topk;                // sparse: indices per query token
    long long num_slots;     // sparse: rows of the cache (a slot outside reads as padding)
    float kv_scale;          // FMT_FP8: a key or value is the stored e4m3 times kv_scale
};

// The key rows of one request (dense) or query token (sparse): page numbers
// or slots.
template <bool SPARSE>
__device__ __forceinline__ const int* key_rows(const Keys& ks, int req) {
    return SPARSE ? ks.kv_indices + (long long)req * ks.topk : ks.kv_indices + ks.kv_indptr[req];
}

// Whether key j (below kv_end) of a sparse token is a slot of the cache.
__device__ __forceinline__ bool sparse_valid(const Keys& ks, const int* rows, int j) {
    const int x = __ldg(rows + j);
    return x >= 0 && x < ks.num_slots;
}

// Reads what each 16-byte copy of this thread in key tile j0 (BNR rows of
// CH chunks) comes from: the page (dense) or the slot (sparse) of its key,
// -1 past kv_end or for padding. Done a tile ahead, so the copies never
// wait for it.
template <bool SPARSE, int BNR, int CH, int ITERS>
__device__ __forceinline__ void fetch_rows(int* pg, const Keys& ks, const int* rows, int j0, int kv_end, int tid) {
#pragma unroll
    for (int i = 0; i < ITERS; i++) {
        const int c = tid + i * NTHREADS;
        const int j = j0 + c / CH;
        int v = -1;
        if (c < BNR * CH && j < kv_end) {
            if (SPARSE) {
                v = rows[j];
                if (v >= ks.num_slots) v = -1;
            } else {
                v = rows[j >> ks.page_shift];
            }
        }
        pg[i] = v < 0 ? -1 : v;
    }
}

// Issues the cp.async copies of key tile j0 (what fetch_rows read) to
// shared memory at base: chunk ch of row r goes to base + dst(r, ch).
// Rows past kv_end and padding are zeroed.
template <bool SPARSE, int BNR, int CH, int ITERS, class Dst>
__device__ __forceinline__ void issue_rows(u32 base, Dst dst, const Keys& ks, const int* pg, int j0, int tid) {
#pragma unroll
    for (int i = 0; i < ITERS; i++) {
        const int c = tid + i * NTHREADS;
        if (c >= BNR * CH) break;
        const int r = c / CH, ch = c - r * CH;
        const unsigned char* src = ks.kv;
        int bytes = 0;
        if (pg[i] >= 0) {
            const long long row =
                SPARSE ? (long long)pg[i]
                       : ((long long)pg[i] << ks.page_shift) | ((j0 + r) & ((1 << ks.page_shift) - 1));
            src = ks.kv + row * (CH * 16) + ch * 16;
            bytes = 16;
        }
        cp_async16(base + dst(r, ch), src, bytes);
    }
}

// The tiles of an FP8 cache are f16: every e4m3 value is an f16 (exactly),
// and the conversion is one instruction per two values on sm_89 and newer.
// Its queries are rounded to f16 (11 bits, more than bf16's 8, within
// +-65504, clamped) and P is f16; the MMAs take f16 with fp32 accumulators.

// Two e4m3 (the first in the low byte) as f16x2, exactly. (Before sm_89:
// each byte into the high bits of an f16, an e4m3 value times 2^-8
// exactly, then times 2^8.)
__device__ __forceinline__ u32 e4m3x2_f16(u32 pair16) {
    u32 r;
#if __CUDA_ARCH__ >= 890
    asm("{ .reg .b16 p; cvt.u16.u32 p, %1; cvt.rn.f16x2.e4m3x2 %0, p; }" : "=r"(r) : "r"(pair16));
#else
    const u32 x = __byte_perm(pair16, 0, 0x4140);
    const u32 h = ((x & 0x007f007fu) << 7) | ((x & 0x00800080u) << 8);
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(h), "r"(0x5c005c00u));
#endif
    return r;
}
// Eight e4m3 (w0's four bytes, then w1's, each word's first in its low
// byte) as eight f16, exactly. On sm_89 and newer each word is split into
// its two halves as registers (mov.b32), so that the conversions need no
// masks or shifts.
__device__ __forceinline__ uint4 e4m3x8_f16(u32 w0, u32 w1) {
#if __CUDA_ARCH__ >= 890
    uint4 r;
    asm("{ .reg .b16 a, b, c, d;\n"
        "mov.b32 {a, b}, %4;\n"
        "mov.b32 {c, d}, %5;\n"
        "cvt.rn.f16x2.e4m3x2 %0, a;\n"
        "cvt.rn.f16x2.e4m3x2 %1, b;\n"
        "cvt.rn.f16x2.e4m3x2 %2, c;\n"
        "cvt.rn.f16x2.e4m3x2 %3, d;\n}"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "r"(w0), "r"(w1));
    return r;
#else
    return make_uint4(e4m3x2_f16(w0 & 0xffff), e4m3x2_f16(w0 >> 16), e4m3x2_f16(w1 & 0xffff), e4m3x2_f16(w1 >> 16));
#endif
}
__device__ __forceinline__ u32 hmul2(u32 a, u32 b) {
    u32 r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ u32 pack_f16(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// Two bf16 as f16x2, clamped to the f16 range.
__device__ __forceinline__ u32 bf16x2_f16(u32 w) {
    const float lo = fminf(fmaxf(__int_as_float(w << 16), -65504.f), 65504.f);
    const float hi = fminf(fmaxf(__int_as_float(w & 0xffff0000u), -65504.f), 65504.f);
    return pack_f16(lo, hi);
}
__device__ __forceinline__ uint4 bf16x8_f16(uint4 v) {
    return make_uint4(bf16x2_f16(v.x), bf16x2_f16(v.y), bf16x2_f16(v.z), bf16x2_f16(v.w));
}
__device__ __forceinline__ void mma16816_f16(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// The MMA and the packing of P of a body: f16 for an FP8 cache (H), bf16
// otherwise.
template <bool H>
__device__ __forceinline__ void mma_(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    if constexpr (H) mma16816_f16(d, a0, a1, a2, a3, b0, b1);
    else mma16816(d, a0, a1, a2, a3, b0, b1);
}
template <bool H>
__device__ __forceinline__ u32 pack_(float lo, float hi) {
    if constexpr (H) return pack_f16(lo, hi);
    else return pack_bf16(lo, hi);
}

// Dequantises BNR staged FP8 rows (raw, row_bytes(FMT) each) into the f16
// key tile at tile: chunk ch (8 values) of row r at tile + dst(r, ch). The
// layer scale of FMT_FP8 is applied to the scores and the output instead,
// so its tile is exact; FMT_DSA's block scales (as f16) multiply here, in
// f16, and its rope values are rounded to f16.
template <int FMT, int BNR, class Dst>
__device__ __forceinline__ void dequant_tile(const unsigned char* raw, unsigned char* tile, Dst dst, int tid) {
    constexpr int RB = row_bytes(FMT);
    constexpr int UNITS = FMT == FMT_FP8 ? DQK / 16 : DV / 16 + (DQK - DV) / 8; // per row: 36, or 32 + 8
    for (int u = tid; u < BNR * UNITS; u += NTHREADS) {
        const int r = u / UNITS, k = u - r * UNITS;
        const unsigned char* row = raw + r * RB;
        if (FMT == FMT_DSA && k >= DV / 16) { // rope: 8 bf16
            const int c = k - DV / 16;
            *(uint4*)(tile + dst(r, DV / 8 + c)) = bf16x8_f16(*(const uint4*)(row + DV + 4 * (DV / 128) + c * 16));
            continue;
        }
        const uint4 v = *(const uint4*)(row + k * 16);
        uint4 lo = e4m3x8_f16(v.x, v.y), hi = e4m3x8_f16(v.z, v.w);
        if (FMT == FMT_DSA) {
            const float sc = ((const float*)(row + DV))[k >> 3];
            const u32 s2 = pack_f16(sc, sc);
            lo = make_uint4(hmul2(lo.x, s2), hmul2(lo.y, s2), hmul2(lo.z, s2), hmul2(lo.w, s2));
            hi = make_uint4(hmul2(hi.x, s2), hmul2(hi.y, s2), hmul2(hi.z, s2), hmul2(hi.w, s2));
        }
        *(uint4*)(tile + dst(r, 2 * k)) = lo;
        *(uint4*)(tile + dst(r, 2 * k + 1)) = hi;
    }
}

// Rounds the M staged query rows at sq to f16, in place (each of T
// threads, tid 0 to T - 1, its own 16-byte chunks): chunk ch of row r at
// sq + dst(r, ch).
template <int M, int T = NTHREADS, class Dst>
__device__ __forceinline__ void queries_f16(unsigned char* sq, Dst dst, int tid) {
    for (int c = tid; c < M * (DQK / 8); c += T) {
        const int r = c / (DQK / 8), ch = c - r * (DQK / 8);
        uint4* p = (uint4*)(sq + dst(r, ch));
        *p = bf16x8_f16(*p);
    }
}

// Programmatic dependent launch (sm_90 and newer; nothing before): a
// kernel launched programmatically may start while the launch before it
// ends, and waits (pdl_wait) before it reads or writes anything that
// launch touches; pdl_launch_dependents lets the next launch start once
// every block of this one has said so. Launched plainly, both do nothing.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Asks L2 for the first n keys of item it of a dense cache (rows of RB
// bytes), a 128-byte line at a time, every thread of the block its share.
// A block does so before its wait, while the launch before it ends (at a
// short step, the last layer's combine), so that its first copies after
// the wait find their rows in L2. It reads the request's page table: only
// where the step's schedule ran on the device (MLA_ITEMS), which started
// after whatever wrote the table had ended.
template <int RB>
__device__ __forceinline__ void prefetch_keys(const Keys& ks, const Item& it, int n) {
    constexpr int LINES = (RB + 127) / 128;
    const int* krows = ks.kv_indices + ks.kv_indptr[it.req];
    const int keys = min(it.kv_end, it.kv_begin + n) - it.kv_begin;
    const int mask = (1 << ks.page_shift) - 1;
    for (int u = threadIdx.x; u < keys * LINES; u += blockDim.x) {
        const int k = u / LINES, l = u - k * LINES, j = it.kv_begin + k;
        const long long row = ((long long)krows[j >> ks.page_shift] << ks.page_shift) | (j & mask);
        asm volatile("prefetch.L2 [%0];" ::"l"(ks.kv + row * RB + l * 128));
    }
}

// A block runs the items of its slot, one after the other: the plan gives
// every slot about the same number of key tiles, FlashMLA's way of balancing
// a ragged batch. blockIdx.x = slot * head_blocks + head block. The slot's
// bounds, the counts and the slot's own item are read together (the
// schedule has an item for every slot, and a block that runs one item, the
// planner's way, runs its slot's), so that a block's first trip to memory
// brings its item, and the next its request and first key rows.
// They are read before the block's wait, which the queries, the cache and
// the partial results need: the host uploads a planner's schedule before
// the step, and mla_schedule lets no launch start before it ends (it does
// not trigger its dependents, and fences its writes). counts[1] is set
// where the schedule ran on the device: the page table was then complete
// when the plan's launches began. A dense plan's block then waits late:
// PREFETCH asks L2 for the first keys of the slot's first item, and the
// body reads its request, its key rows and (the 64-row bodies, and the
// 16-row one's loader) its first tiles' page-table entries before its own
// pdl_wait, which comes just before its first copies. Elsewhere the block
// waits here, and the body's wait returns at once: a planner's decode is
// the plan's first launch and may start while the launch before it ends,
// which may be what writes the page table (counts[1] is 0 there), and a
// sparse plan's key rows are the indexer's output.
#define MLA_ITEMS(BODY, KS, PREFETCH)                                                                           \
    const int slot = blockIdx.x / head_blocks, hb = blockIdx.x - slot * head_blocks;                          \
    const int first = slots[slot], last = slots[slot + 1], count = counts[0];                                  \
    const Item own = ((const Item*)schedule)[slot];                                                            \
    const bool late = counts[1] != 0 && KS.kv_indptr != nullptr; /* dense, scheduled on the device */          \
    if (late && first < last && first < count)                                                                 \
        PREFETCH(KS, first == slot ? own : ((const Item*)schedule)[first]);                                    \
    if (!late) pdl_wait();   /* the last layer's combine is done */                                           \
    pdl_launch_dependents(); /* this layer's combine may take its place as blocks end */                      \
    for (int idx = first; idx < last && idx < count; idx++) {                                                  \
        if (idx > first) __syncthreads(); /* the previous item is done with shared memory */                  \
        BODY(qv, KS, out, lse, idx == slot ? own : ((const Item*)schedule)[idx], (const ReqInfo*)requests,      \
             part_o, part_lse, heads, scale_log2, hb);                                                          \
    }
#define MLA_PREFETCH_BF16(KS, IT) prefetch_keys<DQK * 2>(KS, IT, 128)
#define MLA_PREFETCH_FP8(KS, IT) prefetch_keys<DQK>(KS, IT, 128)
#define MLA_PREFETCH_NONE(KS, IT) ((void)0)

// The queries' parameters (QView's fields), and the view an entry makes of
// them.
#define MLA_Q_PARAMS                                                                                           \
    const bf16 *__restrict__ q_nope, const bf16 *__restrict__ q_rope, long long q_nope_t, long long q_nope_h,  \
        long long q_rope_t, long long q_rope_h, int q_rope_col
#define MLA_Q_VIEW const QView qv = {q_nope, q_rope, q_nope_t, q_nope_h, q_rope_t, q_rope_h, q_rope_col};

#define MLA_COMMON_PARAMS                                                                                      \
    bf16 *__restrict__ out, float *__restrict__ lse, const int *__restrict__ schedule,                        \
        const int *__restrict__ requests, const int *__restrict__ counts, const int *__restrict__ slots,       \
        bf16 *__restrict__ part_o, float *__restrict__ part_lse, int heads

// An entry's dynamic shared memory, in bytes: the layout of its body
// (LAYOUT<ARGS>::bytes, the carve-up the body itself uses), exported beside
// the entry as the constant NAME_shared. It is the one figure of it:
// devkernels/gen reads it from the PTX into the images' manifest, which the
// planner reads, and the GPU tests read it from the loaded module.
#define MLA_ARGS(...) __VA_ARGS__
#define MLA_SHARED(NAME, LAYOUT, ARGS)                                                                        \
    extern "C" {                                                                                               \
    __constant__ int NAME##_shared = LAYOUT<MLA_ARGS ARGS>::bytes;                                             \
    }

// The entries: NAME runs BODY<ARGS, sparse> over each item of its slot,
// with LAYOUT<ARGS>'s shared memory.

// The dense decode over the paged bf16 cache.
#define MLA_DECODE_ENTRY(NAME, BLOCKS, BODY, LAYOUT, ARGS)                                                     \
    MLA_SHARED(NAME, LAYOUT, ARGS)                                                                             \
    extern "C" __global__ void __launch_bounds__(NTHREADS, BLOCKS)                                             \
        NAME(MLA_Q_PARAMS, const void* __restrict__ kv_cache, const int* __restrict__ kv_indptr,               \
             const int* __restrict__ kv_indices, MLA_COMMON_PARAMS, int page_shift, float scale_log2,           \
             int head_blocks) {                                                                                 \
        MLA_Q_VIEW                                                                                              \
        const Keys ks = {(const unsigned char*)kv_cache, kv_indptr, kv_indices, page_shift, 0, 0, 1.f};        \
        MLA_ITEMS((BODY<MLA_ARGS ARGS, false>), ks, MLA_PREFETCH_BF16)                                         \
    }

// The dense decode over the paged FP8 cache, with the layer's scale.
#define MLA_DECODE_FP8_ENTRY(NAME, BLOCKS, BODY, LAYOUT, ARGS)                                                 \
    MLA_SHARED(NAME, LAYOUT, ARGS)                                                                             \
    extern "C" __global__ void __launch_bounds__(NTHREADS, BLOCKS)                                             \
        NAME(MLA_Q_PARAMS, const void* __restrict__ kv_cache, const int* __restrict__ kv_indptr,               \
             const int* __restrict__ kv_indices, const float* __restrict__ kv_scale, MLA_COMMON_PARAMS,         \
             int page_shift, float scale_log2, int head_blocks) {                                               \
        MLA_Q_VIEW                                                                                              \
        const Keys ks = {(const unsigned char*)kv_cache, kv_indptr, kv_indices, page_shift, 0, 0, kv_scale[0]}; \
        MLA_ITEMS((BODY<MLA_ARGS ARGS, false>), ks, MLA_PREFETCH_FP8)                                          \
    }

// The sparse decode: query token t attends to the slots topk_indices[t, :].
#define MLA_SPARSE_ENTRY(NAME, BLOCKS, BODY, LAYOUT, ARGS)                                                     \
    MLA_SHARED(NAME, LAYOUT, ARGS)                                                                             \
    extern "C" __global__ void __launch_bounds__(NTHREADS, BLOCKS)                                             \
        NAME(MLA_Q_PARAMS, const void* __restrict__ kv_cache, const int* __restrict__ topk_indices,             \
             MLA_COMMON_PARAMS, int topk, long long num_slots, float scale_log2, int head_blocks) {             \
        MLA_Q_VIEW                                                                                              \
        const Keys ks = {(const unsigned char*)kv_cache, nullptr, topk_indices, 0, topk, num_slots, 1.f};      \
        MLA_ITEMS((BODY<MLA_ARGS ARGS, true>), ks, MLA_PREFETCH_NONE)                                          \
    }

