// com.meganeura.FlashAttention / FlashAttentionGrad on CUDA, flash-attention style: no S x S matrix.
//
// Threads: NS = D / 16 adjacent lanes share one row (query row in the forward and dQ kernels, key
// row in the dK/dV kernel), each owning 16 of the D >= head_dim dimensions in registers; a dot
// product is a 16-term partial sum and log2(NS) shuffles. The other operand streams through shared
// memory in tiles (every lane of a row group reads the same addresses: broadcasts).
//   forward: per query row, keys tile by tile with an online softmax (running max m, sum l, fp32
//            accumulator); writes Y = acc / l and LSE = m + log(l) (natural log).
//   dQ:      per query row, D_i = dY_i . Y_i, then p = exp(s - LSE_i), ds = p (dY_i . v_j - D_i),
//            dq += ds k_j.
//   dK, dV:  per key row of one KV head, the queries of all its query heads (GQA) tile by tile:
//            dv += p dY_i, dk += ds q_i. One block owns its keys' rows: no atomics, deterministic.
// Scores are kept in the log2 domain (q pre-scaled by log2(e) / sqrt(hd), exp2f); accumulation is fp32.
// Templated on the element type (float here; half types load/store through ToF/FromF) and NS.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "flash_attention.h"

namespace {

constexpr int kThreads = 128;
constexpr int kSlice = 16;  // dimensions of a row per thread
constexpr int kU = 4;       // rows of a tile per inner step (multiple of it divide every tile)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename T>
__device__ __forceinline__ float ToF(T x) {
  return static_cast<float>(x);
}
template <typename T>
__device__ __forceinline__ T FromF(float x) {
  return static_cast<T>(x);
}

struct Dims {
  int64_t B, T, S, H, KVH, hd;
  int causal;
  float scale;  // 1 / sqrt(hd)
};

template <int NS>
struct Shape {
  static constexpr int D = NS * kSlice;                // padded head_dim
  static constexpr int R = kThreads / NS;              // rows per block
  static constexpr int KT = D <= 128 ? 32 : 16;        // rows per shared-memory tile (<= 32 KB per operand pair)
  static constexpr int TPR = kThreads / KT;            // threads per tile row (dK/dV's D_i)
};

// Sum over the NS adjacent lanes of a row; every lane of the warp must call it (full mask).
template <int NS>
__device__ __forceinline__ float RowSum(float x) {
#pragma unroll
  for (int off = NS / 2; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

template <typename T>
__device__ __forceinline__ void LoadSlice(float (&r)[kSlice], const T* row, int d0, int64_t hd, bool ok, float mul) {
#pragma unroll
  for (int e = 0; e < kSlice; ++e) r[e] = (ok && d0 + e < hd) ? ToF(row[d0 + e]) * mul : 0.f;
}

template <typename T>
__device__ __forceinline__ void StoreSlice(T* row, const float (&r)[kSlice], int d0, int64_t hd, float mul) {
#pragma unroll
  for (int e = 0; e < kSlice; ++e)
    if (d0 + e < hd) row[d0 + e] = FromF<T>(r[e] * mul);
}

__device__ __forceinline__ float Dot(const float (&r)[kSlice], const float* tile_row) {
  const float4* t = reinterpret_cast<const float4*>(tile_row);
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int e = 0; e < kSlice / 4; ++e) {
    const float4 x = t[e];
    s0 += r[4 * e] * x.x + r[4 * e + 2] * x.z;
    s1 += r[4 * e + 1] * x.y + r[4 * e + 3] * x.w;
  }
  return s0 + s1;
}

__device__ __forceinline__ void Axpy(float (&acc)[kSlice], float a, const float* tile_row) {
  const float4* t = reinterpret_cast<const float4*>(tile_row);
#pragma unroll
  for (int e = 0; e < kSlice / 4; ++e) {
    const float4 x = t[e];
    acc[4 * e] += a * x.x;
    acc[4 * e + 1] += a * x.y;
    acc[4 * e + 2] += a * x.z;
    acc[4 * e + 3] += a * x.w;
  }
}

// Rows [r0, r0 + KT) of head `head` of a [B, rows, heads*hd] tensor into tile[KT][D] (zeros past
// r_end and hd). All loads are issued before the stores: the global latency is paid once per tile.
template <typename T, int NS>
__device__ __forceinline__ void LoadTile(float* tile, const T* x, int64_t b, int64_t rows, int64_t heads, int64_t head,
                                         int64_t hd, int64_t r0, int64_t r_end) {
  using Sh = Shape<NS>;
  constexpr int kPer = Sh::KT * Sh::D / kThreads;
  float buf[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int idx = threadIdx.x + u * kThreads, r = idx / Sh::D, d = idx % Sh::D;
    const int64_t row = r0 + r;
    buf[u] = (row < r_end && d < hd) ? ToF(x[((b * rows + row) * heads + head) * hd + d]) : 0.f;
  }
#pragma unroll
  for (int u = 0; u < kPer; ++u) tile[threadIdx.x + u * kThreads] = buf[u];
}

template <typename T, int NS>
__global__ void __launch_bounds__(kThreads) FlashForward(const T* __restrict__ q, const T* __restrict__ k,
                                                         const T* __restrict__ v, T* __restrict__ y, float* __restrict__ lse,
                                                         Dims p) {
  using Sh = Shape<NS>;
  __shared__ __align__(16) float Ks[Sh::KT * Sh::D], Vs[Sh::KT * Sh::D];
  const int sl = threadIdx.x % NS, d0 = sl * kSlice;
  const int64_t bh = blockIdx.x, b = bh / p.H, h = bh % p.H, kh = h / (p.H / p.KVH);
  const int64_t i0 = int64_t(gridDim.y - 1 - blockIdx.y) * Sh::R;  // the longest causal rows start first
  const int64_t i = i0 + threadIdx.x / NS;
  const bool ok = i < p.T;
  const int64_t qrow = ((b * p.T + (ok ? i : 0)) * p.H + h) * p.hd;
  float qr[kSlice], acc[kSlice];
  LoadSlice(qr, q + qrow, d0, p.hd, ok, p.scale * kLog2e);
#pragma unroll
  for (int e = 0; e < kSlice; ++e) acc[e] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t kend = p.causal ? min(p.S, i0 + Sh::R) : p.S;
  for (int64_t j0 = 0; j0 < kend; j0 += Sh::KT) {
    __syncthreads();
    LoadTile<T, NS>(Ks, k, b, p.S, p.KVH, kh, p.hd, j0, kend);
    LoadTile<T, NS>(Vs, v, b, p.S, p.KVH, kh, p.hd, j0, kend);
    __syncthreads();
    const int64_t n = kend - j0;
    for (int r = 0; r < n && r < Sh::KT; r += kU) {  // kU keys at a time: independent dot/shuffle chains
      float s[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) s[u] = Dot(qr, Ks + (r + u) * Sh::D + d0);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        s[u] = RowSum<NS>(s[u]);
        const int64_t j = j0 + r + u;
        if (j >= kend || (p.causal && j > i)) s[u] = -INFINITY;  // hidden or past the end
      }
      const float mx = fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3]));
      if (mx > m) {  // new running max: rescale what was summed so far
        const float a = exp2f(m - mx);
        l *= a;
#pragma unroll
        for (int e = 0; e < kSlice; ++e) acc[e] *= a;
        m = mx;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const float pr = s[u] == -INFINITY ? 0.f : exp2f(s[u] - m);
        l += pr;
        Axpy(acc, pr, Vs + (r + u) * Sh::D + d0);
      }
    }
  }
  if (!ok) return;
  StoreSlice(y + qrow, acc, d0, p.hd, 1.f / l);
  if (sl == 0) lse[(b * p.H + h) * p.T + i] = (m + log2f(l)) * kLn2;
}

// dQ, and D_i = dY_i . Y_i (= sum_j p_ij dp_ij) into dsum for the dK/dV kernel.
template <typename T, int NS>
__global__ void __launch_bounds__(kThreads) FlashGradQ(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                       const T* __restrict__ y, const T* __restrict__ dy,
                                                       const float* __restrict__ lse, T* __restrict__ dq,
                                                       float* __restrict__ dsum, Dims p) {
  using Sh = Shape<NS>;
  __shared__ __align__(16) float Ks[Sh::KT * Sh::D], Vs[Sh::KT * Sh::D];
  const int sl = threadIdx.x % NS, d0 = sl * kSlice;
  const int64_t bh = blockIdx.x, b = bh / p.H, h = bh % p.H, kh = h / (p.H / p.KVH);
  const int64_t i0 = int64_t(gridDim.y - 1 - blockIdx.y) * Sh::R;
  const int64_t i = i0 + threadIdx.x / NS;
  const bool ok = i < p.T;
  const int64_t qrow = ((b * p.T + (ok ? i : 0)) * p.H + h) * p.hd;
  float qr[kSlice], dor[kSlice], acc[kSlice];
  LoadSlice(qr, q + qrow, d0, p.hd, ok, p.scale * kLog2e);
  LoadSlice(dor, dy + qrow, d0, p.hd, ok, 1.f);
  LoadSlice(acc, y + qrow, d0, p.hd, ok, 1.f);
  float di = 0.f;
#pragma unroll
  for (int e = 0; e < kSlice; ++e) di += dor[e] * acc[e];
  di = RowSum<NS>(di);
#pragma unroll
  for (int e = 0; e < kSlice; ++e) acc[e] = 0.f;
  const int64_t row = (b * p.H + h) * p.T + i;
  const float lse2 = ok ? lse[row] * kLog2e : 0.f;
  if (ok && sl == 0) dsum[row] = di;
  const int64_t kend = p.causal ? min(p.S, i0 + Sh::R) : p.S;
  for (int64_t j0 = 0; j0 < kend; j0 += Sh::KT) {
    __syncthreads();
    LoadTile<T, NS>(Ks, k, b, p.S, p.KVH, kh, p.hd, j0, kend);
    LoadTile<T, NS>(Vs, v, b, p.S, p.KVH, kh, p.hd, j0, kend);
    __syncthreads();
    const int64_t n = kend - j0;
    for (int r = 0; r < n && r < Sh::KT; r += kU) {
      float s[kU], dp[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        s[u] = Dot(qr, Ks + (r + u) * Sh::D + d0);
        dp[u] = Dot(dor, Vs + (r + u) * Sh::D + d0);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        s[u] = RowSum<NS>(s[u]);
        dp[u] = RowSum<NS>(dp[u]);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t j = j0 + r + u;
        const bool hidden = j >= kend || (p.causal && j > i);
        Axpy(acc, hidden ? 0.f : exp2f(s[u] - lse2) * (dp[u] - di), Ks + (r + u) * Sh::D + d0);
      }
    }
  }
  if (ok) StoreSlice(dq + qrow, acc, d0, p.hd, p.scale);
}

template <typename T, int NS>
__global__ void __launch_bounds__(kThreads) FlashGradKV(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                        const T* __restrict__ dy, const float* __restrict__ lse,
                                                        const float* __restrict__ dsum, T* __restrict__ dk, T* __restrict__ dv,
                                                        Dims p) {
  using Sh = Shape<NS>;
  __shared__ __align__(16) float Qs[Sh::KT * Sh::D], dOs[Sh::KT * Sh::D];
  __shared__ float Ls[Sh::KT], Ds[Sh::KT];
  const int sl = threadIdx.x % NS, d0 = sl * kSlice;
  const int64_t bkh = blockIdx.x, b = bkh / p.KVH, kh = bkh % p.KVH, rep = p.H / p.KVH;
  const int64_t j0 = int64_t(blockIdx.y) * Sh::R;  // causal: the first key tiles see the most queries
  const int64_t j = j0 + threadIdx.x / NS;
  const bool ok = j < p.S;
  const int64_t krow = ((b * p.S + (ok ? j : 0)) * p.KVH + kh) * p.hd;
  float kr[kSlice], vr[kSlice], dka[kSlice], dva[kSlice];
  LoadSlice(kr, k + krow, d0, p.hd, ok, p.scale * kLog2e);
  LoadSlice(vr, v + krow, d0, p.hd, ok, 1.f);
#pragma unroll
  for (int e = 0; e < kSlice; ++e) dka[e] = dva[e] = 0.f;
  const int64_t istart = p.causal ? j0 : 0;  // queries before j0 see none of these keys
  for (int64_t hh = 0; hh < rep; ++hh) {
    const int64_t h = kh * rep + hh;
    for (int64_t i0 = istart; i0 < p.T; i0 += Sh::KT) {
      __syncthreads();
      LoadTile<T, NS>(Qs, q, b, p.T, p.H, h, p.hd, i0, p.T);
      LoadTile<T, NS>(dOs, dy, b, p.T, p.H, h, p.hd, i0, p.T);
      if (threadIdx.x < Sh::KT) {
        const int64_t i = i0 + threadIdx.x, row = (b * p.H + h) * p.T + i;
        Ls[threadIdx.x] = i < p.T ? lse[row] * kLog2e : 0.f;
        Ds[threadIdx.x] = i < p.T ? dsum[row] : 0.f;
      }
      __syncthreads();
      const int64_t n = p.T - i0;
      for (int r = 0; r < n && r < Sh::KT; r += kU) {
        float s[kU], dp[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          s[u] = Dot(kr, Qs + (r + u) * Sh::D + d0);
          dp[u] = Dot(vr, dOs + (r + u) * Sh::D + d0);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          s[u] = RowSum<NS>(s[u]);
          dp[u] = RowSum<NS>(dp[u]);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t i = i0 + r + u;
          const float pr = (i >= p.T || (p.causal && j > i)) ? 0.f : exp2f(s[u] - Ls[r + u]);
          Axpy(dva, pr, dOs + (r + u) * Sh::D + d0);
          Axpy(dka, pr * (dp[u] - Ds[r + u]), Qs + (r + u) * Sh::D + d0);
        }
      }
    }
  }
  if (!ok) return;
  StoreSlice(dk + krow, dka, d0, p.hd, p.scale);
  StoreSlice(dv + krow, dva, d0, p.hd, 1.f);
}

int SlicesFor(int64_t hd) {
  for (int ns = 1; ns <= 16; ns *= 2)
    if (hd <= ns * kSlice) return ns;
  return 0;
}

bool GridFits(int64_t x, int64_t y) { return x >= 1 && x <= 0x7fffffff && y >= 1 && y <= 65535; }

template <typename T, int NS>
int LaunchForward(const T* q, const T* k, const T* v, T* y, float* lse, const Dims& p, cudaStream_t st) {
  const int64_t gx = p.B * p.H, gy = (p.T + Shape<NS>::R - 1) / Shape<NS>::R;
  if (!GridFits(gx, gy)) return cudaErrorInvalidConfiguration;
  FlashForward<T, NS><<<dim3((unsigned)gx, (unsigned)gy), kThreads, 0, st>>>(q, k, v, y, lse, p);
  return cudaGetLastError();
}

template <typename T, int NS>
int LaunchGrad(const T* q, const T* k, const T* v, const T* y, const T* dy, const float* lse, T* dq, T* dk, T* dv,
               const Dims& p, cudaStream_t st) {
  const int64_t qx = p.B * p.H, qy = (p.T + Shape<NS>::R - 1) / Shape<NS>::R;
  const int64_t kx = p.B * p.KVH, ky = (p.S + Shape<NS>::R - 1) / Shape<NS>::R;
  if (!GridFits(qx, qy) || !GridFits(kx, ky)) return cudaErrorInvalidConfiguration;
  float* dsum = nullptr;  // D_i per query row: stream-ordered scratch (capturable in a CUDA graph)
  if (cudaError_t e = cudaMallocAsync(&dsum, sizeof(float) * p.B * p.H * p.T, st)) return e;
  FlashGradQ<T, NS><<<dim3((unsigned)qx, (unsigned)qy), kThreads, 0, st>>>(q, k, v, y, dy, lse, dq, dsum, p);
  FlashGradKV<T, NS><<<dim3((unsigned)kx, (unsigned)ky), kThreads, 0, st>>>(q, k, v, dy, lse, dsum, dk, dv, p);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t freed = cudaFreeAsync(dsum, st);
  return launch ? launch : freed;
}

Dims MakeDims(int64_t B, int64_t T, int64_t S, int64_t H, int64_t KVH, int64_t hd, int causal) {
  return Dims{B, T, S, H, KVH, hd, causal, 1.f / sqrtf((float)hd)};
}

int UseDeviceOf(const void* ptr) {  // this library's static runtime: select the tensors' device
  cudaPointerAttributes attr;
  cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) return e;
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return cudaErrorInvalidDevicePointer;
  return cudaSetDevice(attr.device);
}

}  // namespace

extern "C" int mn_cuda_flash_attention_f32(const float* q, const float* k, const float* v, float* y, float* lse, int64_t B,
                                           int64_t T, int64_t S, int64_t H, int64_t KVH, int64_t hd, int causal,
                                           void* stream) {
  if (B == 0 || T == 0 || H == 0) return 0;
  if (int e = UseDeviceOf(q)) return e;
  const Dims p = MakeDims(B, T, S, H, KVH, hd, causal);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (SlicesFor(hd)) {
    case 1: return LaunchForward<float, 1>(q, k, v, y, lse, p, st);
    case 2: return LaunchForward<float, 2>(q, k, v, y, lse, p, st);
    case 4: return LaunchForward<float, 4>(q, k, v, y, lse, p, st);
    case 8: return LaunchForward<float, 8>(q, k, v, y, lse, p, st);
    case 16: return LaunchForward<float, 16>(q, k, v, y, lse, p, st);
    default: return cudaErrorInvalidValue;
  }
}

extern "C" int mn_cuda_flash_attention_grad_f32(const float* q, const float* k, const float* v, const float* y, const float* dy,
                                                const float* lse, float* dq, float* dk, float* dv, int64_t B, int64_t T,
                                                int64_t S, int64_t H, int64_t KVH, int64_t hd, int causal, void* stream) {
  if (B == 0 || H == 0) return 0;
  if (int e = UseDeviceOf(q)) return e;
  const Dims p = MakeDims(B, T, S, H, KVH, hd, causal);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (T == 0) {  // no queries: zero key/value gradients
    cudaMemsetAsync(dk, 0, sizeof(float) * B * S * KVH * hd, st);
    cudaMemsetAsync(dv, 0, sizeof(float) * B * S * KVH * hd, st);
    return cudaGetLastError();
  }
  switch (SlicesFor(hd)) {
    case 1: return LaunchGrad<float, 1>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
    case 2: return LaunchGrad<float, 2>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
    case 4: return LaunchGrad<float, 4>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
    case 8: return LaunchGrad<float, 8>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
    case 16: return LaunchGrad<float, 16>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
    default: return cudaErrorInvalidValue;
  }
}
