// CUDA kernels of the fused ops SwiGLU, SwiGLUGrad, RMSNormGrad and RopeCacheWrite; called through cuda_fused.h.
// Templated over the element type (float, __half, __nv_bfloat16: Elem<T> of cuda_common.cuh), float32 math.
#include "cuda_common.cuh"
#include "cuda_fused.h"

namespace {

template <class T>
__global__ void SwiGLUKernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float g = Elem<T>::ToF(gate[i]);
    out[i] = Elem<T>::FromF(g / (1.0f + expf(-g)) * Elem<T>::ToF(up[i]));
  }
}

// SwiGLU's backward: s = sigmoid(g), dgate = dy * up * s * (1 + g * (1 - s)), dup = dy * g * s.
__device__ __forceinline__ void SwiGLUGradValue(float g, float u, float d, float* dg, float* du) {
  const float s = 1.0f / (1.0f + expf(-g));  // expf(+large) = inf gives s = 0, as it should; the kernel is memory-bound
  *dg = d * u * (s * (1.0f + g * (1.0f - s)));
  *du = d * (g * s);
}

// Five streams of n elements: 16-byte loads and stores (EPC elements per thread and step) when every
// pointer is 16-byte aligned, the tail (n % EPC, or everything when not aligned) element by element.
template <class T>
__global__ void SwiGLUGradKernel(const T* __restrict__ gate, const T* __restrict__ up, const T* __restrict__ dy, T* __restrict__ dgate,
                                 T* __restrict__ dup, int64_t n, bool vec) {
  constexpr int V = Elem<T>::EPC;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t chunks = vec ? n / V : 0;
  for (int64_t c = first; c < chunks; c += stride) {
    float g[V], u[V], d[V], dg[V], du[V];
    Elem<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(gate) + c), g);
    Elem<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(up) + c), u);
    Elem<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(dy) + c), d);
#pragma unroll
    for (int k = 0; k < V; ++k) SwiGLUGradValue(g[k], u[k], d[k], &dg[k], &du[k]);
    reinterpret_cast<uint4*>(dgate)[c] = Elem<T>::Pack(dg);
    reinterpret_cast<uint4*>(dup)[c] = Elem<T>::Pack(du);
  }
  for (int64_t i = chunks * V + first; i < n; i += stride) {
    float dg, du;
    SwiGLUGradValue(Elem<T>::ToF(gate[i]), Elem<T>::ToF(up[i]), Elem<T>::ToF(dy[i]), &dg, &du);
    dgate[i] = Elem<T>::FromF(dg);
    dup[i] = Elem<T>::FromF(du);
  }
}

// RMSNorm's dx, one block of kRmsThreads per row: the row's sum(x^2) and sum(dy * w * x) in float32
// (warp shuffles, then one warp over the warps' sums), then dx = r * dy * w - x * r^3 * mean(dy * w * x).
constexpr int kRmsThreads = 256;

__device__ __forceinline__ float2 BlockSum2(float2 v) {
  __shared__ float2 warp_sums[kRmsThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < kRmsThreads / 32 ? warp_sums[lane] : make_float2(0.0f, 0.0f);
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  return v;  // every thread holds the block's sums
}

template <class T>
__global__ void __launch_bounds__(kRmsThreads) RMSNormGradKernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy,
                                                                 T* __restrict__ dx, int64_t n, float eps) {
  const T* xr = x + blockIdx.x * n;
  const T* dr = dy + blockIdx.x * n;
  float2 acc = make_float2(0.0f, 0.0f);
  for (int64_t i = threadIdx.x; i < n; i += kRmsThreads) {
    const float xi = Elem<T>::ToF(xr[i]);
    acc.x += xi * xi;
    acc.y += Elem<T>::ToF(dr[i]) * Elem<T>::ToF(w[i]) * xi;
  }
  acc = BlockSum2(acc);
  const float inv_n = 1.0f / static_cast<float>(n);
  const float r = rsqrtf(acc.x * inv_n + eps);
  const float c = r * r * r * acc.y * inv_n;
  T* out = dx + blockIdx.x * n;
  for (int64_t i = threadIdx.x; i < n; i += kRmsThreads)  // the second read of the row hits L1/L2
    out[i] = Elem<T>::FromF(r * (Elem<T>::ToF(dr[i]) * Elem<T>::ToF(w[i])) - Elem<T>::ToF(xr[i]) * c);
}

struct FusedInvFreq {
  float v[MN_ROPE_MAX_HALF];
};

// One thread per (row, head, j < hd/2) pair: reads x[j] and x[j + hd/2], writes both rotated values
// straight into the cache row kv_pos + r (the Rope kernel's arithmetic, the CacheWrite kernel's guard).
template <class T>
__global__ void RopeCacheWriteKernel(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t dim, int half,
                                     int64_t max_seq, MnPos pos, FusedInvFreq inv) {
  const int64_t kv = LoadPos(pos);
  if (kv < 0 || kv > max_seq - rows) return;
  const int64_t pairs_per_row = dim / 2, n = rows * pairs_per_row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / pairs_per_row, k = i % pairs_per_row;
    const int64_t h = k / half;
    const int j = static_cast<int>(k % half);
    const int64_t col = h * 2 * half + j;
    const float ang = static_cast<float>(kv + r) * inv.v[j];
    float sn, cs;
    sincosf(ang, &sn, &cs);
    const float a = Elem<T>::ToF(x[r * dim + col]), b = Elem<T>::ToF(x[r * dim + col + half]);
    T* row = out + (kv + r) * dim;
    row[col] = Elem<T>::FromF(a * cs - b * sn);
    row[col + half] = Elem<T>::FromF(b * cs + a * sn);
  }
}

int Blocks(int64_t n, int threads) { return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65536)); }

template <class T>
int SwiGLU(const void* gate, const void* up, void* out, int64_t n, cudaStream_t s) {
  SwiGLUKernel<T><<<Blocks(n, 256), 256, 0, s>>>(static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), n);
  return cudaGetLastError();
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <class T>
int SwiGLUGrad(const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n, cudaStream_t s) {
  const bool vec = Aligned16(gate) && Aligned16(up) && Aligned16(dy) && Aligned16(dgate) && Aligned16(dup);
  const int64_t work = vec ? n / Elem<T>::EPC + n % Elem<T>::EPC : n;
  SwiGLUGradKernel<T><<<Blocks(work, 256), 256, 0, s>>>(static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(dy),
                                                        static_cast<T*>(dgate), static_cast<T*>(dup), n, vec);
  return cudaGetLastError();
}

template <class T>
int RMSNormGrad(const void* x, const void* w, const void* dy, void* dx, int64_t rows, int64_t n, float eps, cudaStream_t s) {
  RMSNormGradKernel<T><<<static_cast<unsigned>(rows), kRmsThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                                           static_cast<const T*>(dy), static_cast<T*>(dx), n, eps);
  return cudaGetLastError();
}

template <class T>
int RopeCacheWrite(const void* new_rows, const void* cache, void* out, int64_t rows, int64_t dim, int64_t max_seq, int64_t head_dim,
                   const float* inv_freq, MnPos kv_pos, cudaStream_t s) {
  cudaError_t e = cudaSuccess;
  if (out != cache) e = cudaMemcpyAsync(out, cache, sizeof(T) * max_seq * dim, cudaMemcpyDeviceToDevice, s);
  if (e != cudaSuccess || rows * dim == 0 || rows > max_seq) return e;  // rows > max_seq: no position is valid
  FusedInvFreq inv;
  for (int64_t j = 0; j < head_dim / 2; ++j) inv.v[j] = inv_freq[j];
  RopeCacheWriteKernel<T><<<Blocks(rows * (dim / 2), 256), 256, 0, s>>>(static_cast<const T*>(new_rows), static_cast<T*>(out), rows, dim,
                                                                         static_cast<int>(head_dim / 2), max_seq, kv_pos, inv);
  return cudaGetLastError();
}

}  // namespace

extern "C" {

int mn_cuda_swiglu(int dtype, const void* gate, const void* up, void* out, int64_t n, void* stream) {
  if (n == 0) return 0;
  if (int e = UseDeviceOf(gate)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return SwiGLU<__half>(gate, up, out, n, s);
  if (dtype == MN_BF16) return SwiGLU<__nv_bfloat16>(gate, up, out, n, s);
  return SwiGLU<float>(gate, up, out, n, s);
}

int mn_cuda_swiglu_grad(int dtype, const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n, void* stream) {
  if (n == 0) return 0;
  if (int e = UseDeviceOf(gate)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return SwiGLUGrad<__half>(gate, up, dy, dgate, dup, n, s);
  if (dtype == MN_BF16) return SwiGLUGrad<__nv_bfloat16>(gate, up, dy, dgate, dup, n, s);
  return SwiGLUGrad<float>(gate, up, dy, dgate, dup, n, s);
}

int mn_cuda_rms_norm_grad(int dtype, const void* x, const void* w, const void* dy, void* dx, int64_t rows, int64_t n, float eps,
                          void* stream) {
  if (rows == 0 || n == 0) return 0;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  if (int e = UseDeviceOf(x)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return RMSNormGrad<__half>(x, w, dy, dx, rows, n, eps, s);
  if (dtype == MN_BF16) return RMSNormGrad<__nv_bfloat16>(x, w, dy, dx, rows, n, eps, s);
  return RMSNormGrad<float>(x, w, dy, dx, rows, n, eps, s);
}

int mn_cuda_rope_cache_write(int dtype, const void* new_rows, const void* cache, void* out, int64_t T, int64_t dim, int64_t max_seq,
                             int64_t head_dim, const float* inv_freq, MnPos kv_pos, void* stream) {
  if (max_seq * dim == 0) return 0;
  if (head_dim / 2 > MN_ROPE_MAX_HALF || head_dim < 2) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(cache)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return RopeCacheWrite<__half>(new_rows, cache, out, T, dim, max_seq, head_dim, inv_freq, kv_pos, s);
  if (dtype == MN_BF16) return RopeCacheWrite<__nv_bfloat16>(new_rows, cache, out, T, dim, max_seq, head_dim, inv_freq, kv_pos, s);
  return RopeCacheWrite<float>(new_rows, cache, out, T, dim, max_seq, head_dim, inv_freq, kv_pos, s);
}

}  // extern "C"
