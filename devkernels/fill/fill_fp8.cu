// fill_fp8: the FP8 caches of the verification layer's batches, from the
// same hashes as fill_bf16 (hash.cuh), converted by the hardware's
// saturating e4m3 conversion (sm_90 and newer).
//
// fill_e4m3 writes e4m3(v * inv_scale) for n values of a flat cache:
// sglang's MLA pool in fp8_e4m3, 576 values a token, dequantised with the
// layer's scale. fill_dsa writes DeepSeek-V3.2's 656-byte tokens: 512 e4m3
// of v / s, s a hashed scale per 128 values, then the 4 scales in float32,
// then the 64 rope values in bf16 (of seed + 1).
__device__ __forceinline__ float bits_bf16(unsigned short b) { return __int_as_float((int)b << 16); }
__device__ __forceinline__ unsigned char to_e4m3(float v) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.f), "f"(v));
    return (unsigned char)(r & 0xff);
}
// The scale of tile t of token tok: (0.5 + u) / 448, u uniform in [0, 1).
__device__ __forceinline__ float dsa_scale(unsigned long long seed, long long tok, int t) {
    unsigned long long h = mix(seed ^ 0x5ca1eULL + (unsigned long long)(tok * 4 + t) * 0x9e3779b97f4a7c15ULL);
    return (0.5f + (float)(h >> 40) * (1.0f / 16777216.0f)) / 448.0f;
}
extern "C" __global__ void fill_e4m3(unsigned char* p, long long n, unsigned long long seed, float inv_scale) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = to_e4m3(bits_bf16(hash_bf16(seed, i)) * inv_scale);
}
extern "C" __global__ void fill_dsa(unsigned char* p, long long tokens, unsigned long long seed) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < tokens * 656; i += stride) {
        long long tok = i / 656;
        int b = (int)(i - tok * 656);
        unsigned char v;
        if (b < 512) {
            v = to_e4m3(bits_bf16(hash_bf16(seed, tok * 512 + b)) / dsa_scale(seed, tok, b >> 7));
        } else if (b < 528) {
            float s = dsa_scale(seed, tok, (b - 512) >> 2);
            v = (unsigned char)(__float_as_uint(s) >> (8 * ((b - 512) & 3)));
        } else {
            unsigned short r = hash_bf16(seed + 1, tok * 64 + ((b - 528) >> 1));
            v = (unsigned char)(r >> (8 * ((b - 528) & 1)));
        }
        p[i] = v;
    }
}
