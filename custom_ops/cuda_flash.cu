// com.meganeura.FlashAttention / FlashAttentionGrad on CUDA, flash-attention style: no S x S matrix.
//
// Threads: NS = D / 16 adjacent lanes share one row (query row in the forward and dQ kernels, key
// row in the dK/dV kernel; kRows rows per thread), each owning 16 of the D >= head_dim dimensions in
// registers; a dot product is a 16-term partial sum and log2(NS) shuffles. The other operand streams
// through shared memory in tiles (the lanes of a row read adjacent chunks, the row groups the same
// addresses: one conflict-free pass per read).
//   forward: per query row, keys tile by tile with an online softmax (running max m, sum l, fp32
//            accumulator); writes Y = acc / l and LSE = m + log(l) (natural log).
//   dQ:      per query row, D_i = dY_i . Y_i, then p = exp(s - LSE_i), ds = p (dY_i . v_j - D_i),
//            dq += ds k_j.
//   dK, dV:  per key row of one KV head, the queries of all its query heads (GQA) tile by tile:
//            dv += p dY_i, dk += ds q_i. One block owns its keys' rows: no atomics, deterministic.
//            D_i comes from the dQ kernel through a stream-ordered scratch buffer (cudaMallocAsync:
//            allowed inside CUDA-graph capture).
// Scores are kept in the log2 domain (q pre-scaled by log2(e) / sqrt(hd), exp2f); accumulation is fp32.
// Templated on the element type (float, or float16/bfloat16 loaded and stored through ToF/FromF) and
// NS. Every type runs on tensor cores where it can (cuda_flash_mma.cuh: float16/bfloat16 MMAs,
// float32 as 3xTF32, whose error stays at float32's order); these SIMT kernels take the rest (other
// head sizes, unaligned tensors, GPUs older than sm_80) and, with MEGANEURA_FLASH_FP32=simt in the
// environment (read at each launch), every float32 problem: exact float32 on CUDA cores, for comparison.
#include "cuda_common.cuh"
#include "flash_attention.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <type_traits>

namespace {

#ifndef MN_FLASH_THREADS
#define MN_FLASH_THREADS 128
#endif
constexpr int kThreads = MN_FLASH_THREADS;  // per block (a tuning knob for flash_check, as MN_FLASH_ROWS)
constexpr int kSlice = 16;  // dimensions of a row per thread
constexpr int kUnroll = 4;  // tile rows x rows per thread per inner step (kUnroll / RB divides every tile)
// Rows per thread: each shared-memory read feeds kRows rows. On an H200 (flash_check, batch 8,
// 9 heads / 3 KV heads, head_dim 64, causal): 1 is faster at seq 256 (forward 70 us, backward
// 278 us; 2: 78 / 331 us), 2 at seq 1024 (743 / 2086 us; 1: 853 / 2694 us). 64-thread blocks were slower.
#ifndef MN_FLASH_ROWS
#define MN_FLASH_ROWS 1
#endif
constexpr int kRows = MN_FLASH_ROWS;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename T>
__device__ __forceinline__ float ToF(T x) {
  return Elem<T>::ToF(x);
}
template <typename T>
__device__ __forceinline__ T FromF(float x) {
  return Elem<T>::FromF(x);
}

struct Dims {
  int64_t B, T, S, H, KVH, hd;
  int causal;
  float scale;  // 1 / sqrt(hd)
  // A KV cache (mn_cuda_flash_cached_attention; tensor-core forward only): K and V hold S = max_seq rows
  // per sequence, query row i of sequence b sits at position pos[b] + i and sees the rows [0, pos[b] + i].
  // pos.ptr == nullptr: no cache (key j is hidden from query i where j > i).
  MnPos pos;
  // Key splits of the cache form (cuda_flash_keysplit.cuh): grid z; > 1: the splits' partials in the
  // workspace ([B*H*T][ks] acc[hd] and (m, l)), merged by a second kernel.
  int ks = 1;
  float* ws_acc = nullptr;
  float2* ws_ml = nullptr;
};

template <int NS, int RB>
struct Shape {
  static constexpr int D = NS * kSlice;                // padded head_dim
  static constexpr int G = kThreads / NS;              // row groups of a block
  static constexpr int R = RB * G;                     // rows per block (RB per thread)
  static constexpr int KT = D <= 128 ? 32 : 16;        // rows per shared-memory tile (<= 32 KB per operand pair)
};

// Sum over the NS adjacent lanes of a row; every lane of the warp must call it (full mask).
template <int NS>
__device__ __forceinline__ float RowSum(float x) {
#pragma unroll
  for (int off = NS / 2; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// Thread `sl` of a row owns the float4 chunks sl, sl + NS, sl + 2 NS, sl + 3 NS of it (dims 4 * chunk ..
// 4 * chunk + 3): the NS lanes of a row read NS adjacent chunks of a tile row, one conflict-free pass.
template <int NS>
__device__ __forceinline__ int DimOf(int sl, int e) {
  return 4 * (sl + NS * (e / 4)) + e % 4;
}

template <int NS, typename T>
__device__ __forceinline__ void LoadSlice(float (&r)[kSlice], const T* row, int sl, int64_t hd, bool ok, float mul) {
#pragma unroll
  for (int e = 0; e < kSlice; ++e) {
    const int d = DimOf<NS>(sl, e);
    r[e] = (ok && d < hd) ? ToF(row[d]) * mul : 0.f;
  }
}

template <int NS, typename T>
__device__ __forceinline__ void StoreSlice(T* row, const float (&r)[kSlice], int sl, int64_t hd, float mul) {
#pragma unroll
  for (int e = 0; e < kSlice; ++e) {
    const int d = DimOf<NS>(sl, e);
    if (d < hd) row[d] = FromF<T>(r[e] * mul);
  }
}

template <int NS>
__device__ __forceinline__ float Dot(const float (&r)[kSlice], const float* tile_row, int sl) {
  const float4* t = reinterpret_cast<const float4*>(tile_row) + sl;
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int e = 0; e < kSlice / 4; ++e) {
    const float4 x = t[NS * e];
    s0 += r[4 * e] * x.x + r[4 * e + 2] * x.z;
    s1 += r[4 * e + 1] * x.y + r[4 * e + 3] * x.w;
  }
  return s0 + s1;
}

template <int NS>
__device__ __forceinline__ void Axpy(float (&acc)[kSlice], float a, const float* tile_row, int sl) {
  const float4* t = reinterpret_cast<const float4*>(tile_row) + sl;
#pragma unroll
  for (int e = 0; e < kSlice / 4; ++e) {
    const float4 x = t[NS * e];
    acc[4 * e] += a * x.x;
    acc[4 * e + 1] += a * x.y;
    acc[4 * e + 2] += a * x.z;
    acc[4 * e + 3] += a * x.w;
  }
}

// RB dot products with one shared-memory row: each chunk read serves the RB rows of the thread.
template <int NS, int RB>
__device__ __forceinline__ void Dots(float (&out)[RB], const float (&r)[RB][kSlice], const float* tile_row, int sl) {
  const float4* t = reinterpret_cast<const float4*>(tile_row) + sl;
#pragma unroll
  for (int g = 0; g < RB; ++g) out[g] = 0.f;
#pragma unroll
  for (int e = 0; e < kSlice / 4; ++e) {
    const float4 x = t[NS * e];
#pragma unroll
    for (int g = 0; g < RB; ++g) out[g] += r[g][4 * e] * x.x + r[g][4 * e + 1] * x.y + r[g][4 * e + 2] * x.z + r[g][4 * e + 3] * x.w;
  }
}

template <int NS, int RB>
__device__ __forceinline__ void Axpys(float (&acc)[RB][kSlice], const float (&a)[RB], const float* tile_row, int sl) {
  const float4* t = reinterpret_cast<const float4*>(tile_row) + sl;
#pragma unroll
  for (int e = 0; e < kSlice / 4; ++e) {
    const float4 x = t[NS * e];
#pragma unroll
    for (int g = 0; g < RB; ++g) {
      acc[g][4 * e] += a[g] * x.x;
      acc[g][4 * e + 1] += a[g] * x.y;
      acc[g][4 * e + 2] += a[g] * x.z;
      acc[g][4 * e + 3] += a[g] * x.w;
    }
  }
}

// Rows [r0, r0 + KT) of head `head` of a [B, rows, heads*hd] tensor into tile[KT][D] (zeros past
// r_end and hd). All loads are issued before the stores: the global latency is paid once per tile.
template <typename T, int NS, int RB>
__device__ __forceinline__ void LoadTile(float* tile, const T* x, int64_t b, int64_t rows, int64_t heads, int64_t head,
                                         int64_t hd, int64_t r0, int64_t r_end) {
  using Sh = Shape<NS, RB>;
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

template <typename T, int NS, int RB>
__global__ void __launch_bounds__(kThreads) FlashForward(const T* __restrict__ q, const T* __restrict__ k,
                                                         const T* __restrict__ v, T* __restrict__ y, float* __restrict__ lse,
                                                         Dims p) {
  using Sh = Shape<NS, RB>;
  constexpr int kU = kUnroll / RB > 0 ? kUnroll / RB : 1;  // tile rows per inner step
  __shared__ __align__(16) float Ks[Sh::KT * Sh::D], Vs[Sh::KT * Sh::D];
  const int sl = threadIdx.x % NS;
  const int64_t bh = blockIdx.x, b = bh / p.H, h = bh % p.H, kh = h / (p.H / p.KVH);
  const int64_t i0 = int64_t(gridDim.y - 1 - blockIdx.y) * Sh::R;  // the longest causal rows start first
  int64_t i[RB], qrow[RB];
  float qr[RB][kSlice], acc[RB][kSlice], m[RB], l[RB];
#pragma unroll
  for (int g = 0; g < RB; ++g) {
    i[g] = i0 + threadIdx.x / NS + g * Sh::G;
    qrow[g] = ((b * p.T + (i[g] < p.T ? i[g] : 0)) * p.H + h) * p.hd;
    LoadSlice<NS>(qr[g], q + qrow[g], sl, p.hd, i[g] < p.T, p.scale * kLog2e);
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < kSlice; ++e) acc[g][e] = 0.f;
  }
  const int64_t kend = p.causal ? min(p.S, i0 + Sh::R) : p.S;
  for (int64_t j0 = 0; j0 < kend; j0 += Sh::KT) {
    __syncthreads();
    LoadTile<T, NS, RB>(Ks, k, b, p.S, p.KVH, kh, p.hd, j0, kend);
    LoadTile<T, NS, RB>(Vs, v, b, p.S, p.KVH, kh, p.hd, j0, kend);
    __syncthreads();
    const int64_t n = kend - j0;
    for (int r = 0; r < n && r < Sh::KT; r += kU) {  // kU keys at a time: independent dot/shuffle chains
      float s[kU][RB];
#pragma unroll
      for (int u = 0; u < kU; ++u) Dots<NS, RB>(s[u], qr, Ks + (r + u) * Sh::D, sl);
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int g = 0; g < RB; ++g) {
          s[u][g] = RowSum<NS>(s[u][g]);
          const int64_t j = j0 + r + u;
          if (j >= kend || (p.causal && j > i[g])) s[u][g] = -INFINITY;  // hidden or past the end
        }
#pragma unroll
      for (int g = 0; g < RB; ++g) {
        float mx = s[0][g];
#pragma unroll
        for (int u = 1; u < kU; ++u) mx = fmaxf(mx, s[u][g]);
        if (mx > m[g]) {  // new running max: rescale what was summed so far
          const float a = exp2f(m[g] - mx);
          l[g] *= a;
#pragma unroll
          for (int e = 0; e < kSlice; ++e) acc[g][e] *= a;
          m[g] = mx;
        }
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        float pr[RB];
#pragma unroll
        for (int g = 0; g < RB; ++g) {
          pr[g] = s[u][g] == -INFINITY ? 0.f : exp2f(s[u][g] - m[g]);
          l[g] += pr[g];
        }
        Axpys<NS, RB>(acc, pr, Vs + (r + u) * Sh::D, sl);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < RB; ++g) {
    if (i[g] >= p.T) continue;
    StoreSlice<NS>(y + qrow[g], acc[g], sl, p.hd, 1.f / l[g]);
    if (sl == 0) lse[(b * p.H + h) * p.T + i[g]] = (m[g] + log2f(l[g])) * kLn2;
  }
}

// dQ, and D_i = dY_i . Y_i (= sum_j p_ij dp_ij) into dsum for the dK/dV kernel.
template <typename T, int NS, int RB>
__global__ void __launch_bounds__(kThreads) FlashGradQ(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                       const T* __restrict__ y, const T* __restrict__ dy,
                                                       const float* __restrict__ lse, T* __restrict__ dq,
                                                       float* __restrict__ dsum, Dims p) {
  using Sh = Shape<NS, RB>;
  constexpr int kU = kUnroll / RB > 0 ? kUnroll / RB : 1;  // tile rows per inner step
  __shared__ __align__(16) float Ks[Sh::KT * Sh::D], Vs[Sh::KT * Sh::D];
  const int sl = threadIdx.x % NS;
  const int64_t bh = blockIdx.x, b = bh / p.H, h = bh % p.H, kh = h / (p.H / p.KVH);
  const int64_t i0 = int64_t(gridDim.y - 1 - blockIdx.y) * Sh::R;
  int64_t i[RB], qrow[RB];
  float qr[RB][kSlice], dor[RB][kSlice], acc[RB][kSlice], di[RB], lse2[RB];
#pragma unroll
  for (int g = 0; g < RB; ++g) {
    i[g] = i0 + threadIdx.x / NS + g * Sh::G;
    const bool ok = i[g] < p.T;
    qrow[g] = ((b * p.T + (ok ? i[g] : 0)) * p.H + h) * p.hd;
    LoadSlice<NS>(qr[g], q + qrow[g], sl, p.hd, ok, p.scale * kLog2e);
    LoadSlice<NS>(dor[g], dy + qrow[g], sl, p.hd, ok, 1.f);
    LoadSlice<NS>(acc[g], y + qrow[g], sl, p.hd, ok, 1.f);
    float d = 0.f;
#pragma unroll
    for (int e = 0; e < kSlice; ++e) d += dor[g][e] * acc[g][e];
    di[g] = RowSum<NS>(d);
#pragma unroll
    for (int e = 0; e < kSlice; ++e) acc[g][e] = 0.f;
    const int64_t row = (b * p.H + h) * p.T + i[g];
    lse2[g] = ok ? lse[row] * kLog2e : 0.f;
    if (ok && sl == 0) dsum[row] = di[g];
  }
  const int64_t kend = p.causal ? min(p.S, i0 + Sh::R) : p.S;
  for (int64_t j0 = 0; j0 < kend; j0 += Sh::KT) {
    __syncthreads();
    LoadTile<T, NS, RB>(Ks, k, b, p.S, p.KVH, kh, p.hd, j0, kend);
    LoadTile<T, NS, RB>(Vs, v, b, p.S, p.KVH, kh, p.hd, j0, kend);
    __syncthreads();
    const int64_t n = kend - j0;
    for (int r = 0; r < n && r < Sh::KT; r += kU) {
      float s[kU][RB], dp[kU][RB];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        Dots<NS, RB>(s[u], qr, Ks + (r + u) * Sh::D, sl);
        Dots<NS, RB>(dp[u], dor, Vs + (r + u) * Sh::D, sl);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int g = 0; g < RB; ++g) {
          s[u][g] = RowSum<NS>(s[u][g]);
          dp[u][g] = RowSum<NS>(dp[u][g]);
        }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t j = j0 + r + u;
        float ds[RB];
#pragma unroll
        for (int g = 0; g < RB; ++g)
          ds[g] = (j >= kend || (p.causal && j > i[g])) ? 0.f : exp2f(s[u][g] - lse2[g]) * (dp[u][g] - di[g]);
        Axpys<NS, RB>(acc, ds, Ks + (r + u) * Sh::D, sl);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < RB; ++g)
    if (i[g] < p.T) StoreSlice<NS>(dq + qrow[g], acc[g], sl, p.hd, p.scale);
}

template <typename T, int NS, int RB>
__global__ void __launch_bounds__(kThreads) FlashGradKV(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                        const T* __restrict__ dy, const float* __restrict__ lse,
                                                        const float* __restrict__ dsum, T* __restrict__ dk, T* __restrict__ dv,
                                                        Dims p) {
  using Sh = Shape<NS, RB>;
  constexpr int kU = kUnroll / RB > 0 ? kUnroll / RB : 1;  // tile rows per inner step
  __shared__ __align__(16) float Qs[Sh::KT * Sh::D], dOs[Sh::KT * Sh::D];
  __shared__ float Ls[Sh::KT], Ds[Sh::KT];
  const int sl = threadIdx.x % NS;
  const int64_t bkh = blockIdx.x, b = bkh / p.KVH, kh = bkh % p.KVH, rep = p.H / p.KVH;
  const int64_t j0 = int64_t(blockIdx.y) * Sh::R;  // causal: the first key tiles see the most queries
  int64_t j[RB], krow[RB];
  float kr[RB][kSlice], vr[RB][kSlice], dka[RB][kSlice], dva[RB][kSlice];
#pragma unroll
  for (int g = 0; g < RB; ++g) {
    j[g] = j0 + threadIdx.x / NS + g * Sh::G;
    const bool ok = j[g] < p.S;
    krow[g] = ((b * p.S + (ok ? j[g] : 0)) * p.KVH + kh) * p.hd;
    LoadSlice<NS>(kr[g], k + krow[g], sl, p.hd, ok, p.scale * kLog2e);
    LoadSlice<NS>(vr[g], v + krow[g], sl, p.hd, ok, 1.f);
#pragma unroll
    for (int e = 0; e < kSlice; ++e) dka[g][e] = dva[g][e] = 0.f;
  }
  const int64_t istart = p.causal ? j0 : 0;  // queries before j0 see none of these keys
  for (int64_t hh = 0; hh < rep; ++hh) {
    const int64_t h = kh * rep + hh;
    for (int64_t i0 = istart; i0 < p.T; i0 += Sh::KT) {
      __syncthreads();
      LoadTile<T, NS, RB>(Qs, q, b, p.T, p.H, h, p.hd, i0, p.T);
      LoadTile<T, NS, RB>(dOs, dy, b, p.T, p.H, h, p.hd, i0, p.T);
      if (threadIdx.x < Sh::KT) {
        const int64_t i = i0 + threadIdx.x, row = (b * p.H + h) * p.T + i;
        Ls[threadIdx.x] = i < p.T ? lse[row] * kLog2e : 0.f;
        Ds[threadIdx.x] = i < p.T ? dsum[row] : 0.f;
      }
      __syncthreads();
      const int64_t n = p.T - i0;
      for (int r = 0; r < n && r < Sh::KT; r += kU) {
        float s[kU][RB], dp[kU][RB];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          Dots<NS, RB>(s[u], kr, Qs + (r + u) * Sh::D, sl);
          Dots<NS, RB>(dp[u], vr, dOs + (r + u) * Sh::D, sl);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u)
#pragma unroll
          for (int g = 0; g < RB; ++g) {
            s[u][g] = RowSum<NS>(s[u][g]);
            dp[u][g] = RowSum<NS>(dp[u][g]);
          }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t i = i0 + r + u;
          float pr[RB], ds[RB];
#pragma unroll
          for (int g = 0; g < RB; ++g) {
            pr[g] = (i >= p.T || (p.causal && j[g] > i)) ? 0.f : exp2f(s[u][g] - Ls[r + u]);
            ds[g] = pr[g] * (dp[u][g] - Ds[r + u]);
          }
          Axpys<NS, RB>(dva, pr, dOs + (r + u) * Sh::D, sl);
          Axpys<NS, RB>(dka, ds, Qs + (r + u) * Sh::D, sl);
        }
      }
    }
  }
#pragma unroll
  for (int g = 0; g < RB; ++g) {
    if (j[g] >= p.S) continue;
    StoreSlice<NS>(dk + krow[g], dka[g], sl, p.hd, p.scale);
    StoreSlice<NS>(dv + krow[g], dva[g], sl, p.hd, 1.f);
  }
}

int SlicesFor(int64_t hd) {
  for (int ns = 1; ns <= 16; ns *= 2)
    if (hd <= ns * kSlice) return ns;
  return 0;
}

bool GridFits(int64_t x, int64_t y) { return x >= 1 && x <= 0x7fffffff && y >= 1 && y <= 65535; }

template <typename T, int NS, int RB = kRows>
int LaunchForward(const T* q, const T* k, const T* v, T* y, float* lse, const Dims& p, cudaStream_t st) {
  const int64_t gx = p.B * p.H, gy = (p.T + Shape<NS, RB>::R - 1) / Shape<NS, RB>::R;
  if (!GridFits(gx, gy)) return cudaErrorInvalidConfiguration;
  FlashForward<T, NS, RB><<<dim3((unsigned)gx, (unsigned)gy), kThreads, 0, st>>>(q, k, v, y, lse, p);
  return cudaGetLastError();
}

template <typename T, int NS, int RB = kRows>
int LaunchGrad(const T* q, const T* k, const T* v, const T* y, const T* dy, const float* lse, T* dq, T* dk, T* dv,
               const Dims& p, cudaStream_t st) {
  const int64_t qx = p.B * p.H, qy = (p.T + Shape<NS, RB>::R - 1) / Shape<NS, RB>::R;
  const int64_t kx = p.B * p.KVH, ky = (p.S + Shape<NS, RB>::R - 1) / Shape<NS, RB>::R;
  if (!GridFits(qx, qy) || !GridFits(kx, ky)) return cudaErrorInvalidConfiguration;
  float* dsum = nullptr;  // D_i per query row: stream-ordered scratch (capturable in a CUDA graph)
  if (cudaError_t e = cudaMallocAsync(&dsum, sizeof(float) * p.B * p.H * p.T, st)) return e;
  FlashGradQ<T, NS, RB><<<dim3((unsigned)qx, (unsigned)qy), kThreads, 0, st>>>(q, k, v, y, dy, lse, dq, dsum, p);
  FlashGradKV<T, NS, RB><<<dim3((unsigned)kx, (unsigned)ky), kThreads, 0, st>>>(q, k, v, dy, lse, dsum, dk, dv, p);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t freed = cudaFreeAsync(dsum, st);
  return launch ? launch : freed;
}

// Inside this file's anonymous namespace, like the rest: it uses Dims, kLog2e, GridFits.
#include "cuda_flash_mma.cuh"

// float32 on the SIMT kernels only (MEGANEURA_FLASH_FP32=simt); any other value or none: tensor cores.
bool Fp32OnSimt() {
  const char* choice = std::getenv("MEGANEURA_FLASH_FP32");
  return choice != nullptr && std::strcmp(choice, "simt") == 0;
}

// Tensor cores where the shape allows (float32 unless MEGANEURA_FLASH_FP32=simt), else the SIMT
// kernels for any head_dim: NS = lanes per row.
template <typename T>
int Forward(const void* q, const void* k, const void* v, void* y, float* lse, const Dims& p, cudaStream_t st) {
  const T *tq = static_cast<const T*>(q), *tk = static_cast<const T*>(k), *tv = static_cast<const T*>(v);
  T* ty = static_cast<T*>(y);
  if (!std::is_same<T, float>::value || !Fp32OnSimt()) {
    const int e = mma::LaunchForwardMma<T>(tq, tk, tv, ty, lse, p, st);
    if (e >= 0) return e;
  }
  switch (SlicesFor(p.hd)) {
    case 1: return LaunchForward<T, 1>(tq, tk, tv, ty, lse, p, st);
    case 2: return LaunchForward<T, 2>(tq, tk, tv, ty, lse, p, st);
    case 4: return LaunchForward<T, 4>(tq, tk, tv, ty, lse, p, st);
    case 8: return LaunchForward<T, 8>(tq, tk, tv, ty, lse, p, st);
    case 16: return LaunchForward<T, 16>(tq, tk, tv, ty, lse, p, st);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
int Grad(const void* q, const void* k, const void* v, const void* y, const void* dy, const float* lse, void* dq, void* dk,
         void* dv, const Dims& p, cudaStream_t st) {
  const T *tq = static_cast<const T*>(q), *tk = static_cast<const T*>(k), *tv = static_cast<const T*>(v);
  const T *ty = static_cast<const T*>(y), *tdy = static_cast<const T*>(dy);
  T *tdq = static_cast<T*>(dq), *tdk = static_cast<T*>(dk), *tdv = static_cast<T*>(dv);
  if (!std::is_same<T, float>::value || !Fp32OnSimt()) {
    const int e = mma::LaunchGradMma<T>(tq, tk, tv, ty, tdy, lse, tdq, tdk, tdv, p, st);
    if (e >= 0) return e;
  }
  switch (SlicesFor(p.hd)) {
    case 1: return LaunchGrad<T, 1>(tq, tk, tv, ty, tdy, lse, tdq, tdk, tdv, p, st);
    case 2: return LaunchGrad<T, 2>(tq, tk, tv, ty, tdy, lse, tdq, tdk, tdv, p, st);
    case 4: return LaunchGrad<T, 4>(tq, tk, tv, ty, tdy, lse, tdq, tdk, tdv, p, st);
    case 8: return LaunchGrad<T, 8>(tq, tk, tv, ty, tdy, lse, tdq, tdk, tdv, p, st);
    case 16: return LaunchGrad<T, 16>(tq, tk, tv, ty, tdy, lse, tdq, tdk, tdv, p, st);
    default: return cudaErrorInvalidValue;
  }
}

Dims MakeDims(int64_t B, int64_t T, int64_t S, int64_t H, int64_t KVH, int64_t hd, int causal, MnPos pos = {nullptr, MN_POS_NONE, 0}) {
  return Dims{B, T, S, H, KVH, hd, causal, 1.f / sqrtf((float)hd), pos};
}

// How many key splits a chunk's grid gets (cuda_flash_keysplit.cuh): `want` > 0 as asked, else enough
// for two waves of resident blocks over the GPU (1 where the row blocks fill them already; on an H200,
// batch 8 x 128 rows from position 3968: 182 us without splits, 125 with one wave's, 100 with 8); at
// most one per kMinTiles tiles of the cache.
template <typename T, int D>
int KeySplits(const Dims& p, int want) {
  constexpr int W = 4, BC = mma::Tiles<T, D>::BC;
  const int64_t blocks = p.B * p.H * ((p.T + 16 * W - 1) / (16 * W));
  if (want <= 0) {
    static int occ[64] = {};  // per device
    int dev = 0;
    cudaGetDevice(&dev);
    int& o = occ[dev & 63];
    if (o == 0 && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, mma::Forward<T, D, W>, 32 * W, 0) != cudaSuccess) o = 1;
    const int64_t slots = 2 * (int64_t)std::max(o, 1) * NumSMs();
    want = blocks >= slots ? 1 : static_cast<int>((slots + blocks - 1) / blocks);
  }
  const int64_t most = ((p.S + BC - 1) / BC + mma::kMinTiles - 1) / mma::kMinTiles;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({(int64_t)want, most, 65535})));
}

// The splits' partials in `scratch` ([B*H*T][ks] acc[hd], then (m, l)); nothing kept between launches.
int KeySplitWorkspace(Dims* p, MnScratch* scratch, cudaStream_t st) {
  const size_t n = (size_t)(p->B * p->H * p->T) * p->ks;
  const size_t acc_bytes = sizeof(float) * n * p->hd, ml_bytes = sizeof(float2) * n;
  void* buf = nullptr;
  int fresh = 0;
  if (int e = mn_cuda_scratch_get(scratch, st, acc_bytes + ml_bytes, 0, &buf, &fresh)) return e;
  p->ws_acc = static_cast<float*>(buf);
  p->ws_ml = reinterpret_cast<float2*>(static_cast<char*>(buf) + acc_bytes);
  return 0;
}

template <typename T>
int CachedForward(const void* q, const void* k, const void* v, void* y, Dims p, int key_splits, MnScratch* scratch, cudaStream_t st) {
  if (std::is_same<T, float>::value && Fp32OnSimt()) return -1;  // exact float32: the caller's own kernel
  if (!mma::MmaApplies<T>(p, {q, k, v, y})) return -1;
  p.ks = p.hd <= 32 ? KeySplits<T, 32>(p, key_splits) : p.hd <= 64 ? KeySplits<T, 64>(p, key_splits) : KeySplits<T, 128>(p, key_splits);
  if (p.ks > 1)
    if (int e = KeySplitWorkspace(&p, scratch, st)) return e;
  return mma::LaunchForwardMma<T>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(y),
                                  nullptr, p, st);
}

}  // namespace

extern "C" int mn_cuda_flash_attention(int dtype, const void* q, const void* k, const void* v, void* y, float* lse, int64_t B,
                                       int64_t T, int64_t S, int64_t H, int64_t KVH, int64_t hd, int causal, void* stream) {
  if (B == 0 || T == 0 || H == 0) return 0;
  if (int e = UseDeviceOf(q)) return e;
  const Dims p = MakeDims(B, T, S, H, KVH, hd, causal);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case MN_F32: return Forward<float>(q, k, v, y, lse, p, st);
    case MN_F16: return Forward<__half>(q, k, v, y, lse, p, st);
    case MN_BF16: return Forward<__nv_bfloat16>(q, k, v, y, lse, p, st);
    default: return cudaErrorInvalidValue;
  }
}

extern "C" int mn_cuda_flash_cached_attention(int dtype, const void* q, const void* k, const void* v, void* y, int64_t B, int64_t T,
                                              int64_t H, int64_t KVH, int64_t hd, int64_t max_seq, MnPos kv_pos, int key_splits,
                                              MnScratch* scratch, void* stream) {
  if (B == 0 || T == 0 || H == 0) return 0;
  if (kv_pos.ptr == nullptr || T > max_seq) return -1;  // (q's device is current: mn_cuda_cached_attention set it)
  const Dims p = MakeDims(B, T, max_seq, H, KVH, hd, 1, kv_pos);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case MN_F32: return CachedForward<float>(q, k, v, y, p, key_splits, scratch, st);
    case MN_F16: return CachedForward<__half>(q, k, v, y, p, key_splits, scratch, st);
    case MN_BF16: return CachedForward<__nv_bfloat16>(q, k, v, y, p, key_splits, scratch, st);
    default: return -1;
  }
}

extern "C" int mn_cuda_flash_attention_grad(int dtype, const void* q, const void* k, const void* v, const void* y, const void* dy,
                                            const float* lse, void* dq, void* dk, void* dv, int64_t B, int64_t T, int64_t S,
                                            int64_t H, int64_t KVH, int64_t hd, int causal, void* stream) {
  if (B == 0 || H == 0) return 0;
  if (int e = UseDeviceOf(q)) return e;
  const Dims p = MakeDims(B, T, S, H, KVH, hd, causal);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (T == 0) {  // no queries: zero key/value gradients
    const size_t bytes = (dtype == MN_F32 ? 4 : 2) * size_t(B * S * KVH * hd);
    cudaMemsetAsync(dk, 0, bytes, st);
    cudaMemsetAsync(dv, 0, bytes, st);
    return cudaGetLastError();
  }
  switch (dtype) {
    case MN_F32: return Grad<float>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
    case MN_F16: return Grad<__half>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
    case MN_BF16: return Grad<__nv_bfloat16>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
    default: return cudaErrorInvalidValue;
  }
}
