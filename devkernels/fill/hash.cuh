// The hash every test tensor is generated from: element i of a tensor of
// seed s is a bf16 value drawn from mix(s + i * golden), so that the
// float64 reference on the host (devicecheck's hashValue) recomputes any
// element without copying the tensor back. The values are bf16 numbers of
// magnitude in [1/16, 1): sign, an exponent of 126 - e (e in 0..3), seven
// random mantissa bits.
__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
__device__ __forceinline__ unsigned short hash_bf16(unsigned long long seed, long long i) {
    unsigned long long h = mix(seed + (unsigned long long)i * 0x9e3779b97f4a7c15ULL);
    unsigned int sign = (unsigned int)(h >> 63);
    unsigned int e = (unsigned int)(h >> 60) & 3u;
    unsigned int m = (unsigned int)(h >> 53) & 127u;
    return (unsigned short)((sign << 15) | ((126u - e) << 7) | m);
}
