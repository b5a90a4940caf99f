// CUDA kernels of the com.meganeura ops Rope, CacheWrite and ScatterAdd, and the position/index read-back.
// Built by nvcc; called through cuda_kernels.h. CachedAttention lives in cuda_attention.cu.
#include "cuda_common.cuh"

namespace {

// ------------------------------------------------------------------ Rope
struct InvFreq {
  float v[MN_ROPE_MAX_HALF];
};

__global__ void RopeKernel(const float* __restrict__ x, float* __restrict__ y, int64_t S, int64_t D, int half,
                           int64_t offset, MnPos dyn_pos, InvFreq inv) {
  const int64_t pairs_per_row = D / 2;
  const int64_t n = S * pairs_per_row;
  const int64_t dyn = LoadPos(dyn_pos);
  const bool valid = dyn >= 0 && dyn <= MN_ROPE_MAX_OFFSET;
  const int64_t pos0 = offset + dyn;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / pairs_per_row, k = i % pairs_per_row;
    const int64_t h = k / half;
    const int j = static_cast<int>(k % half);
    const int64_t base = r * D + h * 2 * half + j;
    if (!valid) {  // an invalid position is made visible, never silently wrong
      y[base] = y[base + half] = __int_as_float(0x7fc00000);
      continue;
    }
    const float ang = static_cast<float>(pos0 + r) * inv.v[j];
    float sn, cs;
    sincosf(ang, &sn, &cs);
    const float a = x[base], b = x[base + half];
    y[base] = a * cs - b * sn;
    y[base + half] = b * cs + a * sn;
  }
}

// ------------------------------------------------------------------ CacheWrite
// out[kv_pos + r] = new[r] for r < T; nothing when kv_pos is outside [0, max_seq - T].
template <typename V>
__global__ void CacheWriteKernel(const V* __restrict__ nw, V* __restrict__ out, int64_t n, int64_t row, int64_t T,
                                 int64_t max_seq, MnPos pos) {
  const int64_t kv = LoadPos(pos);
  if (kv < 0 || kv > max_seq - T) return;
  V* dst = out + kv * row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) dst[i] = nw[i];
}

// ------------------------------------------------------------------ ScatterAdd
// Indices in device memory (any of the MN_POS_* integer types). An index outside [0, rows) adds
// nothing and sets *bad; PoisonIfBad then fills the whole output with NaN (visible, never silent).
__global__ void ScatterAddKernel(MnPos idx, const float* __restrict__ src, float* __restrict__ out, int64_t N, int64_t D,
                                 int64_t rows, int* __restrict__ bad) {
  const int64_t n = N * D;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / D, d = e % D;
    const int64_t r = LoadPos(MnPos{static_cast<const char*>(idx.ptr) + i * (idx.type == MN_POS_I64 ? 8 : 4), idx.type});
    if (r < 0 || r >= rows) {
      *bad = 1;
      continue;
    }
    atomicAdd(out + r * D + d, src[e]);
  }
}

__global__ void PoisonIfBad(const int* __restrict__ bad, float* __restrict__ out, int64_t n) {
  if (!*bad) return;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = __int_as_float(0x7fc00000);
}

}  // namespace

extern "C" {

const char* mn_cuda_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int mn_cuda_read_pos(MnPos pos, void* stream, int64_t* value, int* captured) {
  *value = 0;
  *captured = 0;
  if (pos.type == MN_POS_NONE) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaError_t e = cudaStreamIsCapturing(s, &status)) return e;
  if (status != cudaStreamCaptureStatusNone) {
    *captured = 1;
    return 0;
  }
  union {
    int64_t i64;
    int32_t i32;
    uint32_t u32;
  } v{};
  const size_t bytes = pos.type == MN_POS_I64 ? sizeof(int64_t) : sizeof(int32_t);
  if (cudaError_t e = cudaMemcpyAsync(&v, pos.ptr, bytes, cudaMemcpyDeviceToHost, s)) return e;
  if (cudaError_t e = cudaStreamSynchronize(s)) return e;
  *value = pos.type == MN_POS_I64 ? v.i64 : pos.type == MN_POS_I32 ? static_cast<int64_t>(v.i32) : static_cast<int64_t>(v.u32);
  return 0;
}

int mn_cuda_rope_f32(const float* x, float* y, int64_t Srows, int64_t D, int64_t head_dim, int64_t offset, MnPos dyn,
                     const float* inv_freq, void* stream) {
  const int64_t n = Srows * (D / 2);
  if (n == 0) return 0;
  if (head_dim / 2 > MN_ROPE_MAX_HALF) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(x)) return e;
  InvFreq inv;
  for (int64_t j = 0; j < head_dim / 2; ++j) inv.v[j] = inv_freq[j];
  const int threads = 256;
  const int blocks = static_cast<int>(n / threads + 1 < 65536 * 16 ? n / threads + 1 : 65536 * 16);
  RopeKernel<<<blocks, threads, 0, S(stream)>>>(x, y, Srows, D, static_cast<int>(head_dim / 2), offset, dyn, inv);
  return cudaGetLastError();
}

int mn_cuda_cache_write_f32(const float* new_rows, const float* cache, float* out, int64_t T, int64_t dim,
                            int64_t max_seq, MnPos kv_pos, void* stream) {
  if (max_seq * dim == 0) return 0;
  if (int e = UseDeviceOf(cache)) return e;
  cudaStream_t s = S(stream);
  cudaError_t e = cudaSuccess;
  if (out != cache) e = cudaMemcpyAsync(out, cache, sizeof(float) * max_seq * dim, cudaMemcpyDeviceToDevice, s);
  if (e != cudaSuccess || T * dim == 0 || T > max_seq) return e;  // T > max_seq: no position is valid
  const bool vec = dim % 4 == 0 && ((reinterpret_cast<uintptr_t>(new_rows) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  const int64_t n = vec ? T * dim / 4 : T * dim;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  if (vec)
    CacheWriteKernel<float4><<<blocks, threads, 0, s>>>(reinterpret_cast<const float4*>(new_rows), reinterpret_cast<float4*>(out), n,
                                                        dim / 4, T, max_seq, kv_pos);
  else
    CacheWriteKernel<float><<<blocks, threads, 0, s>>>(new_rows, out, n, dim, T, max_seq, kv_pos);
  return cudaGetLastError();
}

int mn_cuda_read_indices(const void* idx, size_t bytes, void* host, void* stream, int* captured) {
  *captured = 0;
  if (bytes == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaError_t e = cudaStreamIsCapturing(s, &status)) return e;
  if (status != cudaStreamCaptureStatusNone) {
    *captured = 1;
    return 0;
  }
  if (cudaError_t e = cudaMemcpyAsync(host, idx, bytes, cudaMemcpyDeviceToHost, s)) return e;
  return cudaStreamSynchronize(s);
}

int mn_cuda_scatter_add_f32(MnPos idx, const float* src, float* out, int64_t N, int64_t D, int64_t num_rows, void* stream) {
  if (num_rows * D == 0) return 0;
  if (int e = UseDeviceOf(out)) return e;
  cudaStream_t s = S(stream);
  cudaError_t e = cudaMemsetAsync(out, 0, sizeof(float) * num_rows * D, s);
  if (e != cudaSuccess || N * D == 0) return e;
  int* bad = nullptr;  // stream-ordered: a graph allocation node under capture, freed in the same graph
  if (int r = ScratchAlloc(reinterpret_cast<void**>(&bad), sizeof(int), s)) return r;
  e = cudaMemsetAsync(bad, 0, sizeof(int), s);
  if (e == cudaSuccess) {
    const int64_t n = N * D;
    const int blocks = static_cast<int>(n / 256 + 1 < 65536 * 16 ? n / 256 + 1 : 65536 * 16);
    ScatterAddKernel<<<blocks, 256, 0, s>>>(idx, src, out, N, D, num_rows, bad);
    const int64_t m = num_rows * D;
    PoisonIfBad<<<static_cast<int>(std::min<int64_t>((m + 255) / 256, 4096)), 256, 0, s>>>(bad, out, m);
    e = cudaGetLastError();
  }
  cudaFreeAsync(bad, s);
  return e;
}

}  // extern "C"
