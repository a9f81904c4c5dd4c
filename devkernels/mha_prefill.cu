// Varlen flash attention for DeepSeek prefill (q/k head dim 192, v 128,
// bf16) and merge_state, compiled by NVRTC at plugin start (sm_80 and newer).
//
// Layout (sglang's ragged prefill): q [tq, heads, 192], k [tk, heads, 192],
// v [tk, heads, 128]; request r's queries are rows cu_q[r]..cu_q[r+1] and its
// keys rows k_ranges[2r]..k_ranges[2r+1]; out [tq, heads, 128] bf16 and lse [tq, heads]
// f32 (natural log of the sum of exp(scale * q.k)). Causal masks align the
// queries to the end of the keys: query i of n sees keys up to kn - n + i.
//
// One block runs 128 query rows of one request and one head (8 warps of 16
// rows). Each warp keeps its queries in registers, streams 64-key tiles of K
// and V through a two-stage cp.async pipeline in swizzled shared memory, and
// keeps S and P in registers (the S accumulators are the A operand of the PV
// product), FlashAttention 2's scheme; causal blocks past the diagonal are
// skipped. The plan's schedule orders the blocks longest first.

#define DQK 192
#define DVV 128
#define BM 128
#define BKN 64
#define NT 256
// The shared memory of a block, byte offsets: 128 query rows (384 bytes
// each), two stages of 64 key rows, then two of 64 value rows (256 bytes).
#define PF_K (BM * DQK * 2)
#define PF_V (PF_K + 2 * BKN * DQK * 2)
#define PF_SHARED (PF_V + 2 * BKN * DVV * 2)

// The entry's dynamic shared memory, exported beside it (as mla_common.cuh's
// MLA_SHARED does the decode's): the one figure of it, which the planner
// reads from the images' manifest.
extern "C" {
__constant__ int mha_prefill_shared = PF_SHARED;
}

// Schedule items: 4 int32 each (request, first query row of the block within
// the request, pad, pad).
extern "C" __global__ void __launch_bounds__(NT, 1)
    mha_prefill(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                bf16* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_q,
                const int* __restrict__ k_ranges, const int* __restrict__ schedule, int heads, int causal,
                float scale_log2) {
    constexpr int QB = DQK * 2, VB = DVV * 2; // row bytes: 384 (3 lines), 256 (2 lines)
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* sq = smem;                 // 128 x 384
    unsigned char* sk = smem + PF_K;          // 2 x 64 x 384
    unsigned char* sv = smem + PF_V;          // 2 x 64 x 256

    const int req = schedule[4 * blockIdx.x], q0 = schedule[4 * blockIdx.x + 1];
    const int h = blockIdx.y;
    const int qs = cu_q[req], qn = cu_q[req + 1] - qs;
    const int ks = k_ranges[2 * req], kn = k_ranges[2 * req + 1] - ks;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const long long qstride = (long long)heads * DQK, vstride = (long long)heads * DVV;
    const int off = kn - qn; // causal offset of query 0

    // Key tiles this block needs.
    int ntiles = (kn + BKN - 1) / BKN;
    if (causal) ntiles = min(ntiles, max(0, (off + q0 + BM + BKN - 1) / BKN));

    const u32 sq_a = smem_addr(sq), sk_a = smem_addr(sk), sv_a = smem_addr(sv);
    // Queries (zero past the request's rows).
#pragma unroll
    for (int i = 0; i < (BM * (DQK / 8)) / NT; i++) { // 12
        int c = tid + i * NT;
        int r = c / (DQK / 8), ch = c - r * (DQK / 8);
        bool ok = q0 + r < qn;
        const bf16* src = q + (long long)(qs + q0 + (ok ? r : 0)) * qstride + (long long)h * DQK + ch * 8;
        cp_async16(sq_a + swz(r, ch, QB), src, ok ? 16 : 0);
    }
    auto load_kv = [&](int t, int slot) {
        const int j0 = t * BKN;
#pragma unroll
        for (int i = 0; i < (BKN * (DQK / 8)) / NT; i++) { // 6
            int c = tid + i * NT;
            int r = c / (DQK / 8), ch = c - r * (DQK / 8);
            bool ok = j0 + r < kn;
            const bf16* src = k + (long long)(ks + (ok ? j0 + r : 0)) * qstride + (long long)h * DQK + ch * 8;
            cp_async16(sk_a + slot * BKN * QB + swz(r, ch, QB), src, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < (BKN * (DVV / 8)) / NT; i++) { // 4
            int c = tid + i * NT;
            int r = c / (DVV / 8), ch = c - r * (DVV / 8);
            bool ok = j0 + r < kn;
            const bf16* src = v + (long long)(ks + (ok ? j0 + r : 0)) * vstride + (long long)h * DVV + ch * 8;
            cp_async16(sv_a + slot * BKN * VB + swz(r, ch, VB), src, ok ? 16 : 0);
        }
    };
    if (ntiles > 0) load_kv(0, 0);
    cp_commit();

    // This warp's 16 rows: queries in registers once they land.
    const int wr = warp * 16;
    const int r0 = q0 + wr + (lane >> 2), r1 = r0 + 8; // query rows within the request
    const int lim0 = causal ? off + r0 : kn - 1, lim1 = causal ? off + r1 : kn - 1;
    u32 qa[DQK / 16][4];
    float o[DVV / 8][4];
#pragma unroll
    for (int n = 0; n < DVV / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;

    for (int t = 0; t < ntiles; t++) {
        cp_wait<0>();
        __syncthreads();
        if (t == 0) {
#pragma unroll
            for (int kk = 0; kk < DQK / 16; kk++)
                ldsm_x4(sq_a + swz(wr + (lane & 15), kk * 2 + (lane >> 4), QB), qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);
        }
        if (t + 1 < ntiles) load_kv(t + 1, (t + 1) & 1);
        cp_commit();
        const u32 kt = sk_a + (t & 1) * BKN * QB, vt = sv_a + (t & 1) * BKN * VB;
        const int j0 = t * BKN;
        // Rows of this warp whose keys all lie before j0 + 64 need no mask.
        float s[BKN / 8][4];
#pragma unroll
        for (int n = 0; n < BKN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        const bool skip = causal && j0 > off + q0 + wr + 15; // all 16 rows of the warp are before this tile
        if (!skip) {
#pragma unroll
            for (int kk = 0; kk < DQK / 16; kk++) {
#pragma unroll
                for (int n = 0; n < BKN / 8; n += 2) {
                    u32 b0, b1, b2, b3;
                    ldsm_x4(kt + swz(n * 8 + (lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1), QB), b0, b1, b2,
                            b3);
                    mma16816(s[n], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b0, b1);
                    mma16816(s[n + 1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b2, b3);
                }
            }
            float mx0 = m0, mx1 = m1;
            const bool edge = j0 + BKN - 1 > min(lim0, lim1) || j0 + BKN > kn;
#pragma unroll
            for (int n = 0; n < BKN / 8; n++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int j = j0 + n * 8 + (lane & 3) * 2 + e;
                    float a = s[n][e] * scale_log2, b = s[n][2 + e] * scale_log2;
                    if (edge) {
                        if (j > lim0 || j >= kn) a = NEG_INF;
                        if (j > lim1 || j >= kn) b = NEG_INF;
                    }
                    s[n][e] = a;
                    s[n][2 + e] = b;
                    mx0 = fmaxf(mx0, a);
                    mx1 = fmaxf(mx1, b);
                }
            }
            mx0 = quad_max(mx0);
            mx1 = quad_max(mx1);
            const float mu0 = mx0 == NEG_INF ? 0.f : mx0, mu1 = mx1 == NEG_INF ? 0.f : mx1;
            const float al0 = fast_exp2(m0 - mu0), al1 = fast_exp2(m1 - mu1);
            m0 = mx0;
            m1 = mx1;
            float sum0 = 0.f, sum1 = 0.f;
            u32 pa[BKN / 16][4];
#pragma unroll
            for (int n = 0; n < BKN / 8; n++) {
                float p0 = fast_exp2(s[n][0] - mu0), p1 = fast_exp2(s[n][1] - mu0);
                float p2 = fast_exp2(s[n][2] - mu1), p3 = fast_exp2(s[n][3] - mu1);
                sum0 += p0 + p1;
                sum1 += p2 + p3;
                pa[n >> 1][(n & 1) * 2 + 0] = pack_bf16(p0, p1);
                pa[n >> 1][(n & 1) * 2 + 1] = pack_bf16(p2, p3);
            }
            l0 = l0 * al0 + sum0;
            l1 = l1 * al1 + sum1;
#pragma unroll
            for (int n = 0; n < DVV / 8; n++) {
                o[n][0] *= al0;
                o[n][1] *= al0;
                o[n][2] *= al1;
                o[n][3] *= al1;
            }
#pragma unroll
            for (int kk = 0; kk < BKN / 16; kk++) {
#pragma unroll
                for (int n = 0; n < DVV / 8; n += 2) {
                    u32 b0, b1, b2, b3;
                    ldsm_x4_t(vt + swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, n + (lane >> 4), VB), b0, b1, b2, b3);
                    mma16816(o[n], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b0, b1);
                    mma16816(o[n + 1], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b2, b3);
                }
            }
        }
    }
    cp_wait<0>();
    // Row sums across the quad, then the output.
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    if (r0 < qn) {
        bf16* dst = out + (long long)(qs + r0) * vstride + (long long)h * DVV + (lane & 3) * 2;
#pragma unroll
        for (int n = 0; n < DVV / 8; n++) *(u32*)(dst + n * 8) = pack_bf16(o[n][0] * inv0, o[n][1] * inv0);
        if ((lane & 3) == 0)
            lse[(long long)(qs + r0) * heads + h] = l0 > 0.f ? (m0 + __log2f(l0)) * 0.6931471805599453f : NEG_INF;
    }
    if (r1 < qn) {
        bf16* dst = out + (long long)(qs + r1) * vstride + (long long)h * DVV + (lane & 3) * 2;
#pragma unroll
        for (int n = 0; n < DVV / 8; n++) *(u32*)(dst + n * 8) = pack_bf16(o[n][2] * inv1, o[n][3] * inv1);
        if ((lane & 3) == 0)
            lse[(long long)(qs + r1) * heads + h] = l1 > 0.f ? (m1 + __log2f(l1)) * 0.6931471805599453f : NEG_INF;
    }
}

// merge_state, in place: (o, lse) becomes the attention over the keys of
// both states, from (o, lse) and (o2, lse2), row by row ([rows, 128] bf16
// and [rows] f32). 16 threads a row, 16 bytes each.
extern "C" __global__ void __launch_bounds__(256)
    merge_state(bf16* __restrict__ o, float* __restrict__ lse, const bf16* __restrict__ o2,
                const float* __restrict__ lse2, long long rows) {
    long long row = (long long)blockIdx.x * 16 + (threadIdx.x >> 4);
    int part = threadIdx.x & 15;
    if (row >= rows) return;
    float a = lse[row], b = lse2[row];
    float m = fmaxf(a, b);
    float wa = a == NEG_INF ? 0.f : __expf(a - m), wb = b == NEG_INF ? 0.f : __expf(b - m);
    float sw = wa + wb, inv = sw > 0.f ? 1.f / sw : 0.f;
    wa *= inv;
    wb *= inv;
    uint4 x = *(const uint4*)(o + row * DVV + part * 8);
    uint4 y = *(const uint4*)(o2 + row * DVV + part * 8);
    u32 xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w}, rs[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float x0 = __uint_as_float(xs[i] << 16), x1 = __uint_as_float(xs[i] & 0xffff0000u);
        float y0 = __uint_as_float(ys[i] << 16), y1 = __uint_as_float(ys[i] & 0xffff0000u);
        rs[i] = pack_bf16(wa * x0 + wb * y0, wa * x1 + wb * y1);
    }
    *(uint4*)(o + row * DVV + part * 8) = make_uint4(rs[0], rs[1], rs[2], rs[3]);
    if (part == 0) lse[row] = sw > 0.f ? m + __logf(sw) : NEG_INF;
}
