// Hopper's own instructions (sm_90a), shared by the modules built for it
// (mla_decode_sm90.cu, mha_prefill_sm90.cu; the Go side puts this text after
// tile.cuh): wgmma's shared-memory matrix descriptors over the 128-byte
// swizzle, its fence, commit and wait, the proxy fence that hands generic
// shared-memory writes to it, mbarriers, TMA loads, and the register fence
// that keeps the compiler from moving accesses of its accumulators.

typedef unsigned long long u64;

// A shared-memory matrix descriptor: start address, leading and stride
// byte offsets (each >> 4), 128-byte swizzle.
__device__ __forceinline__ u64 wg_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr >> 4) & 0x3fff) | ((u64)((lbo >> 4) & 0x3fff) << 16) | ((u64)((sbo >> 4) & 0x3fff) << 32) |
           (1ull << 62);
}
// K-major operand (rows of 128 bytes, 8-row groups 1024 apart): the
// leading offset is unused within a 128-byte swizzle. A k-step of 16
// two-byte values moves the start address by 32 bytes within a 64-column
// block.
__device__ __forceinline__ u64 kmajor(u32 addr) { return wg_desc(addr, 16, 1024); }

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Orders this thread's generic-proxy shared-memory writes (cp.async,
// stores) before the async proxy's reads (wgmma) that follow a barrier.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// mbarriers in shared memory (addresses from smem_addr): count arrivals
// complete a phase.
__device__ __forceinline__ void mbar_init(u32 bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on bar once every cp.async this thread has issued so far has
// landed (the arrival is one of the count).
__device__ __forceinline__ void cp_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Whether the phase of bar whose parity is parity has completed (waiting a
// while for it).
__device__ __forceinline__ bool mbar_try(u32 bar, u32 parity) {
    u32 done;
    asm volatile(
        "{\n.reg .pred P1;\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%1], %2;\nselp.u32 %0, 1, 0, P1;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}
// Waits for the phase of bar whose parity is parity to complete.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    while (!mbar_try(bar, parity)) {
    }
}
// Arrives on bar, whose phase then also waits for bytes more to land.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// A CUtensorMap, as a kernel parameter (const __grid_constant__), whose
// address the TMA loads take.
struct __align__(64) TmaMap {
    unsigned long long opaque[16];
};

// One TMA load of the box of map at (col, row) (innermost first) into dst,
// completing on bar with the box's bytes. With the 128-byte swizzle a box
// of 64 two-byte columns lands as rows of 128 bytes whose 16-byte chunks
// are XOR-swizzled by the row within the 1024-byte atom: the column blocks
// of wgmma's layout, when dst is 1024-byte aligned.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaMap* map, int col, int row, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
        "l"(map), "r"(col), "r"(row), "r"(bar)
        : "memory");
}

// Keeps the compiler from moving accesses of accumulator registers across
// the asynchronous MMAs that own them.
template <int N>
__device__ __forceinline__ void reg_fence(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
