package devicehost

import "math"

// fillSource generates test tensors on the device: every element is a
// hash of (seed, index), so the CPU reference recomputes any element
// without copying the tensor back.
const fillSource = `
__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
extern "C" __global__ void fill_bf16(unsigned short* p, long long n, unsigned long long seed) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned long long h = mix(seed + (unsigned long long)i * 0x9e3779b97f4a7c15ULL);
        unsigned int sign = (unsigned int)(h >> 63);
        unsigned int e = (unsigned int)(h >> 60) & 3u;
        unsigned int m = (unsigned int)(h >> 53) & 127u;
        p[i] = (unsigned short)((sign << 15) | ((126u - e) << 7) | m);
    }
}
extern "C" __global__ void advance_i32(int* p, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}
`

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// hashBF16 is fill_bf16's element i for seed, as bf16 bits.
func hashBF16(seed uint64, i int64) uint16 {
	h := mix(seed + uint64(i)*0x9e3779b97f4a7c15)
	sign := uint16(h >> 63)
	e := uint16(h>>60) & 3
	m := uint16(h>>53) & 127
	return sign<<15 | (126-e)<<7 | m
}

// bf16 returns the value of bf16 bits.
func BF16(b uint16) float64 { return float64(math.Float32frombits(uint32(b) << 16)) }

// hashValue is fill_bf16's element i for seed, as a number.
func hashValue(seed uint64, i int64) float64 { return BF16(hashBF16(seed, i)) }
