// Internal helpers shared by the CUDA kernel files (cuda_kernels.cu, cuda_attention.cu); each
// translation unit gets its own copy (anonymous namespace).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <mutex>
#include <stdint.h>
#include <vector>

#include "cuda_kernels.h"

namespace {

inline cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }

// This library links its own (static) CUDA runtime, whose current device is independent of
// ORT's: select the device that owns the tensors before launching.
inline int UseDeviceOf(const void* p) {
  cudaPointerAttributes attr;
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) return e;
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return cudaErrorInvalidDevicePointer;
  return cudaSetDevice(attr.device);
}

// Stream-ordered scratch for ScatterAdd's bad-index flag (training only); the pool keeps freed blocks.
inline int ScratchAlloc(void** p, size_t bytes, cudaStream_t s) {
  static bool configured[64] = {};
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev >= 0 && dev < 64 && !configured[dev]) {
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
      uint64_t threshold = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
    configured[dev] = true;
  }
  return cudaMallocAsync(p, bytes < 16 ? 16 : bytes, s);
}

// Positions in device memory: entry `i` (sequence i of a batch), or entry 0 when the tensor holds a
// single position shared by every sequence (p.count == 1). An absent position reads as 0.
__device__ __forceinline__ int64_t LoadPos(MnPos p, int64_t i = 0) {
  if (p.count <= 1) i = 0;
  switch (p.type) {
    case MN_POS_I64: return static_cast<const int64_t*>(p.ptr)[i];
    case MN_POS_I32: return static_cast<const int32_t*>(p.ptr)[i];
    case MN_POS_U32: return static_cast<const uint32_t*>(p.ptr)[i];
    default: return 0;
  }
}

// Element types in device memory: EPC elements per 16-byte chunk, converted to and from float32.
// One rotate-half pair of RoPE: (a, b) -> (a cos - b sin, b cos + a sin), each product and sum rounded on
// its own (no fused multiply-add). The compiler contracts a * cs - b * sn differently in different kernels,
// so without this the prefill's Rope, RopeCacheWrite and QKVRopeCacheWrite could differ in the last bit.
__device__ __forceinline__ void RotatePair(float a, float b, float cs, float sn, float* ya, float* yb) {
  *ya = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
  *yb = __fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
}

template <class T>
struct Elem;
template <>
struct Elem<float> {
  static constexpr int EPC = 4;  // elements per 16-byte chunk
  __device__ static __forceinline__ void Unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  }
  __device__ static __forceinline__ uint4 Pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
  }
  __device__ static __forceinline__ float ToF(float x) { return x; }
  __device__ static __forceinline__ float FromF(float x) { return x; }
};
template <>
struct Elem<__half> {
  static constexpr int EPC = 8;
  __device__ static __forceinline__ void Unpack(const uint4& u, float* f) {
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __half22float2(h[i]);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
  __device__ static __forceinline__ uint4 Pack(const float* f) {
    uint4 u;
    __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
    return u;
  }
  __device__ static __forceinline__ float ToF(__half x) { return __half2float(x); }
  __device__ static __forceinline__ __half FromF(float x) { return __float2half_rn(x); }
};
template <>
struct Elem<__nv_bfloat16> {
  static constexpr int EPC = 8;
  __device__ static __forceinline__ void Unpack(const uint4& u, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __bfloat1622float2(h[i]);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
  __device__ static __forceinline__ uint4 Pack(const float* f) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return u;
  }
  __device__ static __forceinline__ float ToF(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __forceinline__ __nv_bfloat16 FromF(float x) { return __float2bfloat16_rn(x); }
};

inline int NumSMs() {
  static int cached[64] = {};
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  if (dev >= 0 && dev < 64 && cached[dev] > 0) return cached[dev];
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 80;
  if (dev >= 0 && dev < 64) cached[dev] = n;
  return n;
}

// One split's partial (its maximum and sum in ml, its weighted values in part) folded into a running
// online-softmax state (M, l, s), in base 2: the split attention's merge and DecodeLayer's heads' merge.
// A split with no rows (ml.x = -inf) leaves the state as it is.
__device__ __forceinline__ void FoldPartial(float2 ml, float4 part, float& M, float& l, float4& s) {
  const float mn = fmaxf(M, ml.x);
  const float mu = mn == -INFINITY ? 0.f : mn;
  const float old = exp2f(M - mu), wt = exp2f(ml.x - mu);
  l = fmaf(l, old, ml.y * wt);
  s = make_float4(fmaf(s.x, old, part.x * wt), fmaf(s.y, old, part.y * wt), fmaf(s.z, old, part.z * wt), fmaf(s.w, old, part.w * wt));
  M = mn;
}

// Programmatic dependent launch (sm_90+): a grid launched with the ProgrammaticStreamSerialization
// attribute may start while the previous kernel on the stream drains. GridDependencyWait blocks until
// that kernel has finished and its writes are visible (a no-op when launched normally);
// GridDependentsRelease lets the next such grid start its blocks as SMs free up. What a kernel does
// before the wait must not read what the previous kernel writes (weights and old cache rows: yes).
__device__ __forceinline__ void GridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void GridDependentsRelease() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether this device takes programmatic dependent launch (compute capability 9.0; asked once per device).
inline bool HasPdl() {
  static int cc[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (cc[dev] == 0 && cudaDeviceGetAttribute(&cc[dev], cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) cc[dev] = -1;
  return cc[dev] >= 9;
}

}  // namespace
