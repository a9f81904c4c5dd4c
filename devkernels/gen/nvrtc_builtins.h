// What NVRTC gives every source of devkernels without an #include (the
// CUDA qualifiers, vector types and device functions the sources use),
// declared for clang's CUDA front end, which gen -syntax runs with no CUDA
// toolkit: clang checks the sources' C++ (names, types, templates as they
// are instantiated, asm operands), not the PTX inside the asm strings.
// A source that uses another builtin fails with its name; declare it here.
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __host__ __attribute__((host))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __grid_constant__ /* clang without a CUDA version ignores its grid_constant */
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include "__clang_cuda_builtin_vars.h"
struct uint4 { unsigned int x, y, z, w; };
struct uint2 { unsigned int x, y; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct int4 { int x, y, z, w; };
struct int2 { int x, y; };
__device__ uint4 make_uint4(unsigned int, unsigned int, unsigned int, unsigned int);
__device__ uint2 make_uint2(unsigned int, unsigned int);
__device__ float2 make_float2(float, float);
__device__ float4 make_float4(float, float, float, float);
__device__ int4 make_int4(int, int, int, int);
__device__ float __int_as_float(int);
__device__ int __float_as_int(float);
__device__ float __uint_as_float(unsigned int);
__device__ unsigned int __float_as_uint(float);
__device__ float fabsf(float);
__device__ float fminf(float, float);
__device__ float fmaxf(float, float);
__device__ float rintf(float);
__device__ float fmaf(float, float, float);
__device__ float copysignf(float, float);
__device__ float exp2f(float);
__device__ float log2f(float);
__device__ float __logf(float);
__device__ float logf(float);
__device__ float expf(float);
__device__ float __expf(float);
__device__ float __fdividef(float, float);
__device__ float __frcp_rn(float);
__device__ int __float2int_rz(float);
__device__ int __float2int_rn(float);
__device__ float __int2float_rn(int);
__device__ unsigned int __byte_perm(unsigned int, unsigned int, unsigned int);
__device__ void __syncthreads();
__device__ void __syncwarp(unsigned int mask = 0xffffffffu);
__device__ void __threadfence();
__device__ void __threadfence_block();
template <class T> __device__ T __shfl_xor_sync(unsigned int, T, int, int w = 32);
template <class T> __device__ T __shfl_sync(unsigned int, T, int, int w = 32);
template <class T> __device__ T __shfl_up_sync(unsigned int, T, unsigned int, int w = 32);
template <class T> __device__ T __shfl_down_sync(unsigned int, T, unsigned int, int w = 32);
template <class T> __device__ T __ldg(const T*);
__device__ float __log2f(float);
__device__ int atomicAdd(int*, int);
__device__ int atomicExch(int*, int);
__device__ unsigned int atomicAdd(unsigned int*, unsigned int);
__device__ int __any_sync(unsigned int, int);
__device__ int __all_sync(unsigned int, int);
__device__ unsigned int __ballot_sync(unsigned int, int);
__device__ int __popc(unsigned int);
__device__ int __clz(int);
__device__ int min(int, int);
__device__ int max(int, int);
__device__ long long min(long long, long long);
__device__ long long max(long long, long long);
__device__ float min(float, float);
__device__ float max(float, float);
