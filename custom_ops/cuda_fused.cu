// CUDA kernels of the fused decode-layer ops SwiGLU and RopeCacheWrite; called through cuda_fused.h.
#include "cuda_common.cuh"
#include "cuda_fused.h"

namespace {

__global__ void SwiGLUKernel(const float* __restrict__ gate, const float* __restrict__ up, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

struct FusedInvFreq {
  float v[MN_ROPE_MAX_HALF];
};

// One thread per (row, head, j < hd/2) pair: reads x[j] and x[j + hd/2], writes both rotated values
// straight into the cache row kv_pos + r (the Rope kernel's arithmetic, the CacheWrite kernel's guard).
__global__ void RopeCacheWriteKernel(const float* __restrict__ x, float* __restrict__ out, int64_t T, int64_t dim, int half,
                                     int64_t max_seq, MnPos pos, FusedInvFreq inv) {
  const int64_t kv = LoadPos(pos);
  if (kv < 0 || kv > max_seq - T) return;
  const int64_t pairs_per_row = dim / 2, n = T * pairs_per_row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / pairs_per_row, k = i % pairs_per_row;
    const int64_t h = k / half;
    const int j = static_cast<int>(k % half);
    const int64_t col = h * 2 * half + j;
    const float ang = static_cast<float>(kv + r) * inv.v[j];
    float sn, cs;
    sincosf(ang, &sn, &cs);
    const float a = x[r * dim + col], b = x[r * dim + col + half];
    float* row = out + (kv + r) * dim;
    row[col] = a * cs - b * sn;
    row[col + half] = b * cs + a * sn;
  }
}

int Blocks(int64_t n, int threads) { return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65536)); }

}  // namespace

extern "C" {

int mn_cuda_swiglu_f32(const float* gate, const float* up, float* out, int64_t n, void* stream) {
  if (n == 0) return 0;
  if (int e = UseDeviceOf(gate)) return e;
  SwiGLUKernel<<<Blocks(n, 256), 256, 0, S(stream)>>>(gate, up, out, n);
  return cudaGetLastError();
}

int mn_cuda_rope_cache_write_f32(const float* new_rows, const float* cache, float* out, int64_t T, int64_t dim,
                                 int64_t max_seq, int64_t head_dim, const float* inv_freq, MnPos kv_pos, void* stream) {
  if (max_seq * dim == 0) return 0;
  if (head_dim / 2 > MN_ROPE_MAX_HALF || head_dim < 2) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(cache)) return e;
  cudaStream_t s = S(stream);
  cudaError_t e = cudaSuccess;
  if (out != cache) e = cudaMemcpyAsync(out, cache, sizeof(float) * max_seq * dim, cudaMemcpyDeviceToDevice, s);
  if (e != cudaSuccess || T * dim == 0 || T > max_seq) return e;  // T > max_seq: no position is valid
  FusedInvFreq inv;
  for (int64_t j = 0; j < head_dim / 2; ++j) inv.v[j] = inv_freq[j];
  RopeCacheWriteKernel<<<Blocks(T * (dim / 2), 256), 256, 0, s>>>(new_rows, out, T, dim, static_cast<int>(head_dim / 2), max_seq,
                                                                  kv_pos, inv);
  return cudaGetLastError();
}

}  // extern "C"
