// CUDA kernels of the com.meganeura ops. Built by nvcc; called through cuda_kernels.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdint.h>

#include "cuda_kernels.h"

namespace {

cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }

// This library links its own (static) CUDA runtime, whose current device is independent of
// ORT's: select the device that owns the tensors before launching.
int UseDeviceOf(const void* p) {
  cudaPointerAttributes attr;
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) return e;
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return cudaErrorInvalidDevicePointer;
  return cudaSetDevice(attr.device);
}

// Stream-ordered scratch memory; the pool keeps freed blocks (no release on every sync).
int ScratchAlloc(void** p, size_t bytes, cudaStream_t s) {
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

int NumSMs() {
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 80;
  return n;
}


// ------------------------------------------------------------------ Rope
struct InvFreq {
  float v[MN_ROPE_MAX_HALF];
};

__global__ void RopeKernel(const float* __restrict__ x, float* __restrict__ y, int64_t S, int64_t D, int half,
                           int64_t pos0, InvFreq inv) {
  const int64_t pairs_per_row = D / 2;
  const int64_t n = S * pairs_per_row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / pairs_per_row, k = i % pairs_per_row;
    const int64_t h = k / half;
    const int j = static_cast<int>(k % half);
    const float ang = static_cast<float>(pos0 + r) * inv.v[j];
    float sn, cs;
    sincosf(ang, &sn, &cs);
    const int64_t base = r * D + h * 2 * half + j;
    const float a = x[base], b = x[base + half];
    y[base] = a * cs - b * sn;
    y[base + half] = b * cs + a * sn;
  }
}

// ------------------------------------------------------------------ ScatterAdd
__global__ void ScatterAddKernel(const int64_t* __restrict__ idx, const float* __restrict__ src, float* __restrict__ out,
                                 int64_t N, int64_t D) {
  const int64_t n = N * D;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / D, d = e % D;
    atomicAdd(out + idx[i] * D + d, src[e]);
  }
}

// ------------------------------------------------------------------ CachedAttention
// Split-K ("flash decoding"): block (split, kv head x head group, query row) reads its slice of
// K/V once for all query heads of the group, keeps an online softmax per lane group, and writes
// (m, l, acc[hd]) partials; AttnCombine merges the splits.
constexpr int kWarps = 4;
constexpr int kUnroll = 4;

__device__ __forceinline__ float Dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ __forceinline__ float4 Fma4(float4 acc, float c, float p, float4 v) {
  return make_float4(acc.x * c + p * v.x, acc.y * c + p * v.y, acc.z * c + p * v.z, acc.w * c + p * v.w);
}

template <int HD, int GB>
__global__ void __launch_bounds__(kWarps * 32)
    AttnPartial(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                float* __restrict__ ws, int H, int KVH, int G, int ngroups, int64_t kv_pos, int64_t chunk, int splits,
                float scale) {
  constexpr int C = HD >= 128 ? HD / 128 : 1;  // float4s per lane per row
  constexpr int LPR = HD / (4 * C);            // lanes per row
  constexpr int R = 32 / LPR;                  // rows per warp step
  const int split = blockIdx.x;
  const int kvh = blockIdx.y / ngroups, g0 = (blockIdx.y % ngroups) * GB;
  const int t = blockIdx.z;
  const int64_t L = kv_pos + t + 1;
  const int64_t start = split * chunk;
  const int64_t end = min(start + chunk, L);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / LPR, sl = lane % LPR;
  const int64_t kvw = (int64_t)KVH * HD;

  float4 qr[GB][C];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    const bool ok = g0 + g < G;
    const float* qp = q + ((int64_t)t * H + (int64_t)kvh * G + g0 + g) * HD;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      float4 val = ok ? *reinterpret_cast<const float4*>(qp + (c * LPR + sl) * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
      qr[g][c] = make_float4(val.x * scale, val.y * scale, val.z * scale, val.w * scale);
    }
  }
  float m[GB], l[GB];
  float4 acc[GB][C];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int c = 0; c < C; ++c) acc[g][c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }

  const float* kb = k + (int64_t)kvh * HD + (int64_t)sl * 4;
  const float* vb = v + (int64_t)kvh * HD + (int64_t)sl * 4;
  constexpr int kStep = kWarps * R;
  for (int64_t wbase = start + warp * R; wbase < end; wbase += kStep * kUnroll) {  // uniform per warp
    float4 kr[kUnroll][C], vr[kUnroll][C];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t row = wbase + sub + u * kStep;
      valid[u] = row < end;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        kr[u][c] = valid[u] ? __ldg(reinterpret_cast<const float4*>(kb + row * kvw + c * LPR * 4)) : make_float4(0.f, 0.f, 0.f, 0.f);
        vr[u][c] = valid[u] ? __ldg(reinterpret_cast<const float4*>(vb + row * kvw + c * LPR * 4)) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      float s[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float d = 0.f;
#pragma unroll
        for (int c = 0; c < C; ++c) d += Dot4(qr[g][c], kr[u][c]);
#pragma unroll
        for (int off = LPR / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
        s[u] = valid[u] ? d : -INFINITY;
      }
      float mn = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mn = fmaxf(mn, s[u]);
      if (mn == -INFINITY) continue;  // nothing valid yet for this lane group
      const float corr = expf(m[g] - mn);
      float lsum = l[g] * corr;
#pragma unroll
      for (int c = 0; c < C; ++c) acc[g][c] = make_float4(acc[g][c].x * corr, acc[g][c].y * corr, acc[g][c].z * corr, acc[g][c].w * corr);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = expf(s[u] - mn);  // 0 for invalid rows
        lsum += p;
#pragma unroll
        for (int c = 0; c < C; ++c) acc[g][c] = Fma4(acc[g][c], 1.f, p, vr[u][c]);
      }
      m[g] = mn;
      l[g] = lsum;
    }
  }

  // merge the R lane groups of the warp (same sl, different sub)
#pragma unroll
  for (int off = LPR; off < 32; off <<= 1) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
      float4 ao[C];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        ao[c].x = __shfl_xor_sync(0xffffffffu, acc[g][c].x, off);
        ao[c].y = __shfl_xor_sync(0xffffffffu, acc[g][c].y, off);
        ao[c].z = __shfl_xor_sync(0xffffffffu, acc[g][c].z, off);
        ao[c].w = __shfl_xor_sync(0xffffffffu, acc[g][c].w, off);
      }
      const float mn = fmaxf(m[g], mo);
      if (mn == -INFINITY) continue;
      const float ca = expf(m[g] - mn), cb = expf(mo - mn);
      l[g] = l[g] * ca + lo * cb;
#pragma unroll
      for (int c = 0; c < C; ++c) acc[g][c] = Fma4(acc[g][c], ca, cb, ao[c]);
      m[g] = mn;
    }
  }

  // merge the warps through shared memory
  __shared__ float sm_m[kWarps][GB], sm_l[kWarps][GB];
  __shared__ float4 sm_acc[kWarps][GB][HD / 4];
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      if (sl == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
#pragma unroll
      for (int c = 0; c < C; ++c) sm_acc[warp][g][c * LPR + sl] = acc[g][c];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < GB * HD; e += blockDim.x) {
    const int g = e / HD, d = e % HD;
    if (g0 + g >= G) continue;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w][g]);
    float lt = 0.f, at = 0.f;
    if (M != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        if (sm_m[w][g] == -INFINITY) continue;
        const float c = expf(sm_m[w][g] - M);
        lt += sm_l[w][g] * c;
        at += reinterpret_cast<const float*>(&sm_acc[w][g][0])[d] * c;
      }
    }
    const int head = kvh * G + g0 + g;
    float* part = ws + (((int64_t)t * H + head) * splits + split) * (HD + 2);
    part[d] = at;
    if (d == 0) {
      part[HD] = M;
      part[HD + 1] = lt;
    }
  }
}

// Merges the split partials of one (t, h): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void AttnCombine(const float* __restrict__ ws, float* __restrict__ out, int H, int hd, int splits) {
  const int th = blockIdx.x;  // t * H + h
  const float* base = ws + (int64_t)th * splits * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, base[s * (hd + 2) + hd]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float lt = 0.f, at = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float* p = base + s * (hd + 2);
      if (p[hd] == -INFINITY) continue;
      const float c = expf(p[hd] - M);
      lt += p[hd + 1] * c;
      at += p[d] * c;
    }
    out[(int64_t)th * hd + d] = at / lt;
  }
}

// Any head_dim: one block per (t, h); scores go through a global scratch row.
__global__ void AttnGeneric(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                            float* __restrict__ out, float* __restrict__ scores, int H, int KVH, int hd,
                            int64_t kv_pos, int64_t max_L, float scale) {
  const int t = blockIdx.x / H, h = blockIdx.x % H;
  const int kvh = h / (H / KVH);
  const int64_t L = kv_pos + t + 1;
  const int64_t kvw = (int64_t)KVH * hd;
  const float* qp = q + ((int64_t)t * H + h) * hd;
  float* sc = scores + (int64_t)blockIdx.x * max_L;
  __shared__ float red[256];
  float lmax = -INFINITY;
  for (int64_t p = threadIdx.x; p < L; p += blockDim.x) {
    const float* kp = k + p * kvw + (int64_t)kvh * hd;
    float s = 0.f;
    for (int d = 0; d < hd; ++d) s += qp[d] * kp[d];
    s *= scale;
    sc[p] = s;
    lmax = fmaxf(lmax, s);
  }
  red[threadIdx.x] = lmax;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + o]);
    __syncthreads();
  }
  const float M = red[0];
  __syncthreads();
  float lsum = 0.f;
  for (int64_t p = threadIdx.x; p < L; p += blockDim.x) {
    const float e = expf(sc[p] - M);
    sc[p] = e;
    lsum += e;
  }
  red[threadIdx.x] = lsum;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
    for (int64_t p = 0; p < L; ++p) a += sc[p] * v[p * kvw + (int64_t)kvh * hd + d];
    out[((int64_t)t * H + h) * hd + d] = a * inv;
  }
}

template <int HD, int GB>
int LaunchAttn(const float* q, const float* k, const float* v, float* out, int T, int H, int KVH, int64_t kv_pos,
               cudaStream_t s) {
  constexpr int C = HD >= 128 ? HD / 128 : 1;
  constexpr int R = 32 / (HD / (4 * C));
  const int G = H / KVH;
  const int ngroups = (G + GB - 1) / GB;
  const int64_t maxL = kv_pos + T;
  const int64_t step = (int64_t)kWarps * R * kUnroll;
  const int64_t base_blocks = (int64_t)KVH * ngroups * T;
  int64_t splits = (4LL * NumSMs() + base_blocks - 1) / base_blocks;
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, (maxL + step - 1) / step));
  int64_t chunk = (maxL + splits - 1) / splits;
  chunk = (chunk + kWarps * R - 1) / (kWarps * R) * (kWarps * R);
  splits = (maxL + chunk - 1) / chunk;
  if (splits > 65535 || (int64_t)KVH * ngroups > 65535 || T > 65535) return cudaErrorInvalidConfiguration;
  float* ws = nullptr;
  int e = ScratchAlloc(reinterpret_cast<void**>(&ws), sizeof(float) * (size_t)T * H * splits * (HD + 2), s);
  if (e) return e;
  dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(KVH * ngroups), static_cast<unsigned>(T));
  AttnPartial<HD, GB><<<grid, kWarps * 32, 0, s>>>(q, k, v, ws, H, KVH, G, ngroups, kv_pos, chunk,
                                                   static_cast<int>(splits), 1.0f / sqrtf(static_cast<float>(HD)));
  AttnCombine<<<T * H, HD < 32 ? 32 : HD, 0, s>>>(ws, out, H, HD, static_cast<int>(splits));
  e = cudaGetLastError();
  cudaFreeAsync(ws, s);
  return e;
}

template <int HD>
int LaunchAttnHD(const float* q, const float* k, const float* v, float* out, int T, int H, int KVH, int64_t kv_pos,
                 cudaStream_t s) {
  const int G = H / KVH;
  if (G <= 1) return LaunchAttn<HD, 1>(q, k, v, out, T, H, KVH, kv_pos, s);
  if (G <= 2) return LaunchAttn<HD, 2>(q, k, v, out, T, H, KVH, kv_pos, s);
  if (G <= 4) return LaunchAttn<HD, 4>(q, k, v, out, T, H, KVH, kv_pos, s);
  return LaunchAttn<HD, 8>(q, k, v, out, T, H, KVH, kv_pos, s);
}

}  // namespace

extern "C" {

const char* mn_cuda_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int mn_cuda_rope_f32(const float* x, float* y, int64_t Srows, int64_t D, int64_t head_dim, int64_t pos0,
                     const float* inv_freq, void* stream) {
  const int64_t n = Srows * (D / 2);
  if (n == 0) return 0;
  if (head_dim / 2 > MN_ROPE_MAX_HALF) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(x)) return e;
  InvFreq inv;
  for (int64_t j = 0; j < head_dim / 2; ++j) inv.v[j] = inv_freq[j];
  const int threads = 256;
  const int blocks = static_cast<int>(n / threads + 1 < 65536 * 16 ? n / threads + 1 : 65536 * 16);
  RopeKernel<<<blocks, threads, 0, S(stream)>>>(x, y, Srows, D, static_cast<int>(head_dim / 2), pos0, inv);
  return cudaGetLastError();
}

int mn_cuda_cache_write_f32(const float* new_rows, const float* cache, float* out, int64_t T, int64_t dim,
                            int64_t max_seq, int64_t kv_pos, void* stream) {
  if (max_seq * dim == 0) return 0;
  if (int e = UseDeviceOf(cache)) return e;
  cudaError_t e = cudaSuccess;
  if (out != cache) e = cudaMemcpyAsync(out, cache, sizeof(float) * max_seq * dim, cudaMemcpyDeviceToDevice, S(stream));
  if (e == cudaSuccess && T * dim > 0)
    e = cudaMemcpyAsync(out + kv_pos * dim, new_rows, sizeof(float) * T * dim, cudaMemcpyDeviceToDevice, S(stream));
  return e;
}

int mn_cuda_cached_attention_f32(const float* q, const float* k, const float* v, float* out, int64_t T, int64_t H,
                                 int64_t KVH, int64_t head_dim, int64_t kv_pos, void* stream) {
  if (T == 0) return 0;
  if (int e = UseDeviceOf(q)) return e;
  cudaStream_t s = S(stream);
  const int t = static_cast<int>(T), h = static_cast<int>(H), kvh = static_cast<int>(KVH);
  switch (head_dim) {
    case 32: return LaunchAttnHD<32>(q, k, v, out, t, h, kvh, kv_pos, s);
    case 64: return LaunchAttnHD<64>(q, k, v, out, t, h, kvh, kv_pos, s);
    case 128: return LaunchAttnHD<128>(q, k, v, out, t, h, kvh, kv_pos, s);
    case 256: return LaunchAttnHD<256>(q, k, v, out, t, h, kvh, kv_pos, s);
    default: break;
  }
  const int64_t maxL = kv_pos + T;
  float* scores = nullptr;
  int e = ScratchAlloc(reinterpret_cast<void**>(&scores), sizeof(float) * (size_t)T * H * maxL, s);
  if (e) return e;
  AttnGeneric<<<t * h, 256, 0, s>>>(q, k, v, out, scores, h, kvh, static_cast<int>(head_dim), kv_pos, maxL,
                                    1.0f / sqrtf(static_cast<float>(head_dim)));
  e = cudaGetLastError();
  cudaFreeAsync(scores, s);
  return e;
}

int mn_cuda_scatter_add_f32(const int64_t* idx_host, const float* src, float* out, int64_t N, int64_t D,
                            int64_t num_rows, void* stream) {
  if (num_rows * D == 0) return 0;
  if (int e = UseDeviceOf(out)) return e;
  cudaStream_t s = S(stream);
  cudaError_t e = cudaMemsetAsync(out, 0, sizeof(float) * num_rows * D, s);
  if (e != cudaSuccess || N * D == 0) return e;
  int64_t* idx = nullptr;
  if (int r = ScratchAlloc(reinterpret_cast<void**>(&idx), sizeof(int64_t) * N, s)) return r;
  // pageable source: returns once the data is staged, so the host buffer may go away after this
  e = cudaMemcpyAsync(idx, idx_host, sizeof(int64_t) * N, cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess) {
    const int64_t n = N * D;
    const int blocks = static_cast<int>(n / 256 + 1 < 65536 * 16 ? n / 256 + 1 : 65536 * 16);
    ScatterAddKernel<<<blocks, 256, 0, s>>>(idx, src, out, N, D);
    e = cudaGetLastError();
  }
  cudaFreeAsync(idx, s);
  return e;
}

}  // extern "C"
