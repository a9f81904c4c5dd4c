// Tile helpers shared by the device kernels of package devkernels (the Go
// side puts this text before each kernel source it compiles): PTX for
// shared-memory addresses, cp.async copies, ldmatrix loads, the bf16
// mma.sync m16n8k16 and bf16 packing, a quad's sum and maximum, and the XOR
// swizzle of 16-byte chunks.

#define NEG_INF (-__int_as_float(0x7f800000))

typedef unsigned int u32;
typedef unsigned short bf16;

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(u32 addr, u32& r0, u32& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

__device__ __forceinline__ void mma16816(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// A body's output rows, and a split item's partial output rows (part_o; its
// LSE, part_lse, is fp32), are bf16. In the accumulators of mma.sync and
// wgmma, lane q4 of a quad holds columns 2 q4 and 2 q4 + 1 of each 8-column
// group of a row: 16 bytes of a group a store, half of a 32-byte sector,
// which the DRAM must read back to write (measured on an H100: 1.18x the
// time of a 128-head batch 1 whose partials took half stores). quad_store16
// writes groups j and j + 1 (g: the row at group j's first column; a, b:
// this lane's packed pair of each) as one whole sector: the quad's even
// lanes trade their pair of group j + 1 for the odd ones' pair of group j,
// then each lane writes four columns. The exchange is the quad's own, so
// ok (the row exists) may differ between quads, not within one.
__device__ __forceinline__ void quad_store16(bf16* g, u32 a, u32 b, int q4, bool ok) {
    const bool even = (q4 & 1) == 0;
    const u32 r = __shfl_xor_sync(0xffffffff, even ? b : a, 1);
    if (ok) *(uint2*)(g + (even ? 0 : 8) + 4 * (q4 >> 1)) = even ? make_uint2(a, r) : make_uint2(r, b);
}
// Four bf16 columns of a partial output row, as loaded (8 bytes, held
// packed until used), and as floats.
__device__ __forceinline__ uint2 part_load4(const bf16* p) { return *(const uint2*)p; }
__device__ __forceinline__ float4 part_float4(uint2 u) {
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}
// The sum and the maximum of x over the four lanes of a quad (the lanes
// that hold one row of an MMA accumulator).
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
}
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Byte offset of 16-byte chunk ch of row r in a swizzled tile whose rows are
// rowbytes long (a multiple of 128).
__device__ __forceinline__ u32 swz(int r, int ch, int rowbytes) {
    return (u32)(r * rowbytes + (((ch & ~7) | ((ch ^ r) & 7)) << 4));
}
