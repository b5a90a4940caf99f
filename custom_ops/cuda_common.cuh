// Internal helpers shared by the CUDA kernel files (cuda_kernels.cu, cuda_attention.cu); each
// translation unit gets its own copy (anonymous namespace).
#pragma once
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

// Positions in device memory. An absent position reads as 0.
__device__ __forceinline__ int64_t LoadPos(MnPos p) {
  switch (p.type) {
    case MN_POS_I64: return *static_cast<const int64_t*>(p.ptr);
    case MN_POS_I32: return *static_cast<const int32_t*>(p.ptr);
    case MN_POS_U32: return *static_cast<const uint32_t*>(p.ptr);
    default: return 0;
  }
}

inline int NumSMs() {
  static int cached[64] = {};
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  if (dev >= 0 && dev < 64 && cached[dev] > 0) return cached[dev];
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 80;
  if (dev >= 0 && dev < 64) cached[dev] = n;
  return n;
}

}  // namespace
