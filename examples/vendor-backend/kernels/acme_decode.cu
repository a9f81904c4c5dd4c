// acme_decode: acme_mla's absorbed-MLA decode and target verify over
// sglang's paged latent cache, in the layout of attnplug's docs/device.md
// (launch.Tensors):
//
//   q          [tokens, heads, 576]             bf16  absorbed queries
//   kv_cache   [num_pages, page_size, 576]      bf16  the latent cache; the
//                                                     first 512 columns are
//                                                     also the values
//   kv_indptr  [batch+1]                        i32   request i's pages are
//   kv_indices [pages]                          i32   kv_indices[kv_indptr[i]:kv_indptr[i+1]]
//   seq_lens   [batch]                          i32   request i's keys
//   qo_indptr  [batch+1]                        i32   request i's queries are the rows
//                                                     qo_indptr[i]:qo_indptr[i+1]
//   out        [tokens, heads, 512]             bf16  output
//   lse        [tokens, heads]                  f32   natural log of the sum of
//                                                     exp(scale * q.k)
//
// Query t of a request's n (in order) sees its keys 0 .. seq_len - n + t:
// one query in decode, the draft tokens in target verify.
//
// Work: one block of THREADS threads per (request, head): grid (batch,
// heads). The block loops over its request's query rows; for each row it
// holds the query in shared memory in float and runs an online softmax
// over the visible keys, one key at a time: the 576-wide dot product is
// split over the threads and summed by a block reduction (warp shuffles,
// then the warps' sums through shared memory), and every thread rescales
// and accumulates the output columns it owns (COLS of the 512: columns
// tid, tid + THREADS, ...). Arithmetic in float; the output is rounded to
// bf16 once.
//
// This kernel is written to be obviously right, not fast: no tiles, no
// tensor cores, two barriers per key. It reads nothing the host does not
// bind, so one plan serves every step of a batch size (the lengths are
// read here, on the device, at each launch).
//
// Build: go generate ./kernels (nvcc -ptx -arch=compute_80), from the
// module's root; the PTX is committed and embedded in the plugin.

#include <cuda_bf16.h>

#define HEAD_DIM_QK 576
#define HEAD_DIM_V 512
#define THREADS 128
#define WARPS (THREADS / 32)
#define COLS (HEAD_DIM_V / THREADS)

// block_sum returns the sum of every thread's v, to every thread. red is
// WARPS floats of shared memory; the barrier at the end lets the next call
// write it again.
__device__ __forceinline__ float block_sum(float v, float* red) {
    for (int off = 16; off > 0; off >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, off);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        red[warp] = v;
    }
    __syncthreads();
    float s = 0.f;
    for (int w = 0; w < WARPS; w++) {
        s += red[w];
    }
    __syncthreads();
    return s;
}

// One block of THREADS (128) threads per (request, head). Request i's keys
// are its seq_lens[i] tokens, in the pages kv_indices[kv_indptr[i]:kv_indptr[i+1]]
// of page_size tokens each; its queries are the rows qo_indptr[i]:qo_indptr[i+1]
// of q, out and lse: one in decode, several in target verify, where query t
// of n sees the keys up to seq_len - n + t.
extern "C" __global__ void __launch_bounds__(THREADS) acme_decode(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv_cache,
    const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices,
    const int* __restrict__ seq_lens, const int* __restrict__ qo_indptr,
    __nv_bfloat16* __restrict__ out, float* __restrict__ lse,
    int heads, int page_size, float scale) {
    __shared__ float q_s[HEAD_DIM_QK];
    __shared__ float red[WARPS];

    if (blockDim.x != THREADS) {
        return; // launched wrong: the plan says THREADS
    }
    const int req = blockIdx.x, head = blockIdx.y, tid = threadIdx.x;
    const int row0 = qo_indptr[req], rows = qo_indptr[req + 1] - row0;
    if (rows <= 0) {
        return; // a request without queries writes nothing
    }
    const int page0 = kv_indptr[req];
    // The keys the request's pages hold: a guard against a page table
    // shorter than seq_lens says, which would read past it.
    const long long held = (long long)(kv_indptr[req + 1] - page0) * page_size;
    const long long seq_len = min((long long)seq_lens[req], held);

    for (int r = 0; r < rows; r++) {
        const long long row = (long long)(row0 + r) * heads + head; // of q, out and lse
        __syncthreads(); // every thread is done with the last row's q_s
        for (int d = tid; d < HEAD_DIM_QK; d += THREADS) {
            q_s[d] = __bfloat162float(q[row * HEAD_DIM_QK + d]);
        }
        __syncthreads();

        // Query r of rows sees the keys 0 .. seq_lens[req] - rows + r.
        const long long visible = min((long long)seq_lens[req] - rows + r + 1, seq_len);
        float m = -INFINITY; // the largest scaled score so far
        float l = 0.f;       // the sum of exp(score - m) so far
        float acc[COLS];
        for (int c = 0; c < COLS; c++) {
            acc[c] = 0.f;
        }
        for (long long j = 0; j < visible; j++) {
            const int page = kv_indices[page0 + j / page_size];
            const __nv_bfloat16* k = kv_cache + ((long long)page * page_size + j % page_size) * HEAD_DIM_QK;
            float part = 0.f;
            for (int d = tid; d < HEAD_DIM_QK; d += THREADS) {
                part += q_s[d] * __bfloat162float(k[d]);
            }
            const float s = block_sum(part, red) * scale; // the same in every thread
            const float m_new = fmaxf(m, s);
            const float corr = expf(m - m_new); // 0 at the first key (m is -inf)
            const float p = expf(s - m_new);
            l = l * corr + p;
            for (int c = 0; c < COLS; c++) {
                acc[c] = acc[c] * corr + p * __bfloat162float(k[tid + c * THREADS]);
            }
            m = m_new;
        }

        // A row that sees no key (only a malformed batch has one): zeros,
        // and the log of an empty sum.
        const float inv = visible > 0 ? 1.f / l : 0.f;
        for (int c = 0; c < COLS; c++) {
            out[row * HEAD_DIM_V + tid + c * THREADS] = __float2bfloat16(acc[c] * inv);
        }
        if (tid == 0) {
            lse[row] = visible > 0 ? m + logf(l) : -INFINITY;
        }
    }
}
