// CUDA kernels of com.meganeura CachedAttention (decode and prefill against the KV cache) and their
// per-kernel-instance scratch. Built by nvcc; called through cuda_kernels.h.
#include "cuda_common.cuh"

// One buffer per (stream, device): work on one stream is ordered, so a buffer reused by the next
// call on that stream is never in use; concurrent runs (other streams) get their own.
struct MnScratch {
  struct Entry {
    void* stream;
    int device;
    void* ptr;
    size_t bytes;
  };
  std::mutex mu;
  std::vector<Entry> entries;
};

// The current device's buffer for `stream`, at least `bytes` long. Allocates only when a larger size
// is first needed (a new shape); the old buffer is freed after the stream drained it.
static int ScratchGet(MnScratch* sc, cudaStream_t stream, size_t bytes, void** out) {
  if (sc == nullptr) return cudaErrorInvalidValue;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  std::lock_guard<std::mutex> lock(sc->mu);
  MnScratch::Entry* entry = nullptr;
  for (auto& x : sc->entries)
    if (x.stream == static_cast<void*>(stream) && x.device == dev) entry = &x;
  if (entry == nullptr) {
    sc->entries.push_back({static_cast<void*>(stream), dev, nullptr, 0});
    entry = &sc->entries.back();
  }
  if (entry->bytes < bytes) {
    if (entry->ptr != nullptr) {
      if (cudaError_t e = cudaStreamSynchronize(stream)) return e;
      cudaFree(entry->ptr);
      entry->ptr = nullptr;
      entry->bytes = 0;
    }
    if (cudaError_t e = cudaMalloc(&entry->ptr, bytes)) return e;
    entry->bytes = bytes;
  }
  *out = entry->ptr;
  return 0;
}

namespace {

// ------------------------------------------------------------------ CachedAttention
// Split-K ("flash decoding"). Grid (KV head x head group, split, query row): a block streams its
// slice [start, end) of the cache rows of one KV head once, for all query heads of the group
// (GQA: K/V are read once per group), and writes a partial (m, l, acc[hd]) per head; AttnCombine
// merges the splits. Inside the block each warp runs its own cp.async pipeline: NST stages of TR
// rows of K and V (4 KiB per stage) in shared memory, so every warp keeps ~8 KiB of loads in
// flight while it computes; no block barrier in the main loop.
//   QK: lanes (sub, sl) = (row of the step, float4 slice): C float4 per lane, 8-16 lanes per row,
//       shuffle-reduced dots; online softmax per tile in base 2 (q pre-scaled by log2(e)/sqrt(hd)).
//   PV: lanes over head_dim (PL lanes per row), p broadcast by shuffle, acc in registers.
constexpr int kWarps = 4;
constexpr int kStages = 3;
int g_attn_waves = 1;           // split-K grid = waves x resident blocks (tuning knob for attn_check)
bool g_attn_skip_combine = false;  // attn_check times the partial kernel alone (output then invalid)
constexpr int kStageBytes = 4096;  // per warp and stage: TR rows of K + TR rows of V

template <int HD>
struct AttnCfg {
  static constexpr int F4 = HD / 4;                  // float4 per row
  static constexpr int C = HD >= 128 ? 4 : HD / 32;  // QK: float4 per lane
  static constexpr int LPR = F4 / C;                 // QK: lanes per row (8 or 16)
  static constexpr int R = 32 / LPR;                 // QK: rows per step
  static constexpr int TR = kStageBytes / (2 * HD * 4);  // rows per stage
  static constexpr int STEPS = TR / R;
  static constexpr int PL = F4 < 32 ? F4 : 32;       // PV: lanes per row
  static constexpr int RV = 32 / PL;                 // PV: rows in parallel
  static constexpr int CV = F4 / PL;                 // PV: float4 per lane
  static constexpr int STAGE_F4 = 2 * TR * F4;       // float4 per stage (K then V)
  static_assert(TR % R == 0 && R % RV == 0 && (TR * F4) % 32 == 0, "attention tile shape");
};

__device__ __forceinline__ float Dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ __forceinline__ float4 Axpy4(float4 acc, float p, float4 v) {
  return make_float4(acc.x + p * v.x, acc.y + p * v.y, acc.z + p * v.z, acc.w + p * v.w);
}
__device__ __forceinline__ float4 Scale4(float4 a, float c) { return make_float4(a.x * c, a.y * c, a.z * c, a.w * c); }

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int HD, int GB>
__global__ void __launch_bounds__(kWarps * 32)
    AttnPartial(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                float* __restrict__ ws_acc, float2* __restrict__ ws_ml, float* __restrict__ out, int H, int KVH, int G,
                int ngroups, MnPos pos, int64_t max_seq, int splits, float qscale) {
  using Cfg = AttnCfg<HD>;
  constexpr int C = Cfg::C, LPR = Cfg::LPR, R = Cfg::R, TR = Cfg::TR, STEPS = Cfg::STEPS;
  constexpr int PL = Cfg::PL, RV = Cfg::RV, CV = Cfg::CV, F4 = Cfg::F4;
  __shared__ float4 smem[kWarps * kStages * Cfg::STAGE_F4];  // 48 KiB; reused for the warp merge

  const int kvh = blockIdx.x / ngroups, g0 = (blockIdx.x % ngroups) * GB;
  const int split = blockIdx.y;
  const int t = blockIdx.z;
  // The grid is sized for max_seq; each block finds its slice of the rows actually attended to.
  const int64_t kv_pos = LoadPos(pos);
  const bool valid = kv_pos >= 0 && kv_pos <= max_seq - (int64_t)gridDim.z;
  const int64_t L = valid ? kv_pos + t + 1 : 0;  // query row t attends to cache rows [0, L)
  constexpr int64_t kRowsPerPass = (int64_t)kWarps * Cfg::TR;
  const int64_t chunk = ((L + splits - 1) / splits + kRowsPerPass - 1) / kRowsPerPass * kRowsPerPass;
  const int64_t start = (int64_t)split * chunk;
  const int64_t end = min(start + chunk, L);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / LPR, sl = lane % LPR;  // QK layout
  const int rv = lane / PL, pl = lane % PL;     // PV layout
  const int64_t kvw = (int64_t)KVH * HD;

  float4 qr[GB][C];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    const bool ok = g0 + g < G;
    const float* qp = q + ((int64_t)t * H + (int64_t)kvh * G + g0 + g) * HD;
#pragma unroll
    for (int c = 0; c < C; ++c)
      qr[g][c] = ok ? Scale4(*reinterpret_cast<const float4*>(qp + (c * LPR + sl) * 4), qscale) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m[GB], l[GB];  // m: running max (base 2, warp-uniform); l: this lane's rows only
  float4 acc[GB][CV];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int c = 0; c < CV; ++c) acc[g][c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }

  const int64_t nrows = end > start ? end - start : 0;
  const int ntiles = static_cast<int>((nrows + TR - 1) / TR);
  const int my_tiles = ntiles > warp ? (ntiles - warp + kWarps - 1) / kWarps : 0;
  float4* wsm = smem + warp * kStages * Cfg::STAGE_F4;
  const float* kb = k + (int64_t)kvh * HD;
  const float* vb = v + (int64_t)kvh * HD;

  auto issue = [&](int i) {  // local tile i -> stage i % kStages (always commits a group)
    if (i < my_tiles) {
      const int64_t row0 = start + (int64_t)(warp + i * kWarps) * TR;
      float4* st = wsm + (i % kStages) * Cfg::STAGE_F4;
#pragma unroll
      for (int j = 0; j < TR * F4 / 32; ++j) {
        const int e = j * 32 + lane, r = e / F4, col = e % F4;
        if (row0 + r < end) {
          CpAsync16(st + r * F4 + col, kb + (row0 + r) * kvw + col * 4);
          CpAsync16(st + TR * F4 + r * F4 + col, vb + (row0 + r) * kvw + col * 4);
        }
      }
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i);

  for (int i = 0; i < my_tiles; ++i) {
    issue(i + kStages - 1);  // into the stage consumed in iteration i - 1
    CpAsyncWait<kStages - 1>();
    __syncwarp();
    const float4* Ks = wsm + (i % kStages) * Cfg::STAGE_F4;
    const float4* Vs = Ks + TR * F4;
    const int64_t row0 = start + (int64_t)(warp + i * kWarps) * TR;

    // scores of this lane's row in each step
    float s[STEPS][GB];
#pragma unroll
    for (int stp = 0; stp < STEPS; ++stp) {
      const int r = stp * R + sub;
      float4 kf[C];
#pragma unroll
      for (int c = 0; c < C; ++c) kf[c] = Ks[r * F4 + c * LPR + sl];
#pragma unroll
      for (int g = 0; g < GB; ++g) {
        float d = 0.f;
#pragma unroll
        for (int c = 0; c < C; ++c) d += Dot4(qr[g][c], kf[c]);
#pragma unroll
        for (int off = LPR / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
        s[stp][g] = row0 + r < end ? d : -INFINITY;
      }
    }
    // online softmax update, one rescale per tile
    float p[STEPS][GB];
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      float mt = s[0][g];
#pragma unroll
      for (int stp = 1; stp < STEPS; ++stp) mt = fmaxf(mt, s[stp][g]);
#pragma unroll
      for (int off = LPR; off < 32; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float mn = fmaxf(m[g], mt);
      const float mu = mn == -INFINITY ? 0.f : mn;  // avoids (-inf) - (-inf)
      const float corr = exp2f(m[g] - mu);
      float ls = l[g] * corr;
#pragma unroll
      for (int stp = 0; stp < STEPS; ++stp) {
        p[stp][g] = exp2f(s[stp][g] - mu);
        ls += p[stp][g];
      }
      l[g] = ls;
      m[g] = mn;
#pragma unroll
      for (int c = 0; c < CV; ++c) acc[g][c] = Scale4(acc[g][c], corr);
    }
    // PV: this lane's rows r = j * RV + rv of the tile
#pragma unroll
    for (int j = 0; j < TR / RV; ++j) {
      const int stp = (j * RV) / R;                      // compile-time after unrolling
      const int src = ((j * RV) % R + rv) * LPR;         // a QK lane that holds row r's score
      const int r = j * RV + rv;
      float pr[GB];
#pragma unroll
      for (int g = 0; g < GB; ++g) pr[g] = __shfl_sync(0xffffffffu, p[stp][g], src);
      if (row0 + r < end) {
#pragma unroll
        for (int c = 0; c < CV; ++c) {
          const float4 vf = Vs[r * F4 + c * PL + pl];
#pragma unroll
          for (int g = 0; g < GB; ++g) acc[g][c] = Axpy4(acc[g][c], pr[g], vf);
        }
      }
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
  CpAsyncWait<0>();

  // warp totals: l over the QK row groups, acc over the PV row groups (m is warp-uniform)
#pragma unroll
  for (int g = 0; g < GB; ++g) {
#pragma unroll
    for (int off = LPR; off < 32; off <<= 1) l[g] += __shfl_xor_sync(0xffffffffu, l[g], off);
#pragma unroll
    for (int off = PL; off < 32; off <<= 1) {
#pragma unroll
      for (int c = 0; c < CV; ++c) {
        acc[g][c].x += __shfl_xor_sync(0xffffffffu, acc[g][c].x, off);
        acc[g][c].y += __shfl_xor_sync(0xffffffffu, acc[g][c].y, off);
        acc[g][c].z += __shfl_xor_sync(0xffffffffu, acc[g][c].z, off);
        acc[g][c].w += __shfl_xor_sync(0xffffffffu, acc[g][c].w, off);
      }
    }
  }

  // merge the warps through shared memory (the stage buffers are free now)
  __syncthreads();
  float4* sm_acc = smem;                                            // [kWarps][GB][F4]
  float* sm_ml = reinterpret_cast<float*>(smem + kWarps * GB * F4);  // [kWarps][GB][2]
  static_assert(kWarps * GB * F4 + (kWarps * GB * 2 + 3) / 4 <= kWarps * kStages * AttnCfg<HD>::STAGE_F4, "merge area");
  if (rv == 0) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
#pragma unroll
      for (int c = 0; c < CV; ++c) sm_acc[(warp * GB + g) * F4 + c * PL + pl] = acc[g][c];
      if (lane == 0) {
        sm_ml[(warp * GB + g) * 2] = m[g];
        sm_ml[(warp * GB + g) * 2 + 1] = l[g];
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < GB * HD; e += blockDim.x) {
    const int g = e / HD, d = e % HD;
    if (g0 + g >= G) continue;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_ml[(w * GB + g) * 2]);
    float lt = 0.f, at = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float mw = sm_ml[(w * GB + g) * 2];
        if (mw == -INFINITY) continue;
        const float c = exp2f(mw - M);
        lt += sm_ml[(w * GB + g) * 2 + 1] * c;
        at += reinterpret_cast<const float*>(sm_acc + (w * GB + g) * F4)[d] * c;
      }
    }
    const int64_t th = (int64_t)t * H + (int64_t)kvh * G + g0 + g;
    if (splits == 1) {  // no combine pass: split 0 covers every row
      out[th * HD + d] = valid ? at / lt : __int_as_float(0x7fc00000);
    } else {
      ws_acc[(th * splits + split) * HD + d] = at;
      if (d == 0) ws_ml[th * splits + split] = make_float2(M, lt);
    }
  }
}

// Merges the split partials of one (t, h): out = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M).
// kCombineWarps warps split the partials between them (lanes over float4s of head_dim), so each
// thread has only splits / kCombineWarps independent loads in flight; then a shared-memory sum.
constexpr int kCombineWarps = 8;
__global__ void __launch_bounds__(kCombineWarps * 32)
    AttnCombine(const float* __restrict__ ws_acc, const float2* __restrict__ ws_ml, float* __restrict__ out, int hd, int splits,
                MnPos pos, int64_t max_seq, int64_t T) {
  extern __shared__ float4 csm[];  // [kCombineWarps][hd / 4] partial sums, then [splits] weights
  __shared__ float red[kCombineWarps];
  const int64_t th = blockIdx.x;  // t * H + h
  const float2* ml = ws_ml + th * splits;
  const float4* acc = reinterpret_cast<const float4*>(ws_acc + th * splits * hd);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, f4 = hd / 4;
  const int64_t kv_pos = LoadPos(pos);
  if (kv_pos < 0 || kv_pos > max_seq - T) {  // invalid position: NaN output (the partials are empty)
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[th * hd + d] = __int_as_float(0x7fc00000);
    return;
  }
  float* wsh = reinterpret_cast<float*>(csm + kCombineWarps * f4);
  float M = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) M = fmaxf(M, ml[s].x);
  for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
  if (lane == 0) red[warp] = M;
  __syncthreads();
  M = red[0];
  for (int w = 1; w < kCombineWarps; ++w) M = fmaxf(M, red[w]);
  __syncthreads();
  float lsum = 0.f;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) {
    const float2 x = ml[s];
    const float w = x.x == -INFINITY ? 0.f : exp2f(x.x - M);
    wsh[s] = w;
    lsum += x.y * w;
  }
  for (int off = 16; off > 0; off >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
  if (lane == 0) red[warp] = lsum;
  __syncthreads();
  float lt = 0.f;
  for (int w = 0; w < kCombineWarps; ++w) lt += red[w];
  for (int d4 = lane; d4 < f4; d4 += 32) {
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = warp; s < splits; s += kCombineWarps) {
      const float w = wsh[s];
      if (w == 0.f) continue;  // a split past the attended rows (or fully underflowed)
      const float4 x = acc[(int64_t)s * f4 + d4];
      a = make_float4(a.x + w * x.x, a.y + w * x.y, a.z + w * x.z, a.w + w * x.w);
    }
    csm[warp * f4 + d4] = a;
  }
  __syncthreads();
  const float inv = 1.f / lt;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) a += reinterpret_cast<const float*>(csm + w * f4)[d];
    out[th * hd + d] = a * inv;
  }
}

// Any head_dim: one block per (t, h); scores go through a global scratch row.
__global__ void AttnGeneric(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                            float* __restrict__ out, float* __restrict__ scores, int T, int H, int KVH, int hd,
                            MnPos pos, int64_t max_L, float scale) {
  const int t = blockIdx.x / H, h = blockIdx.x % H;
  const int kvh = h / (H / KVH);
  const int64_t kv_pos = LoadPos(pos);
  if (kv_pos < 0 || kv_pos > max_L - T) {  // invalid position: NaN output, nothing read
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[((int64_t)t * H + h) * hd + d] = __int_as_float(0x7fc00000);
    return;
  }
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
int LaunchAttn(const float* q, const float* k, const float* v, float* out, int T, int H, int KVH, int64_t max_seq, MnPos pos,
               MnScratch* scratch, cudaStream_t s) {
  using Cfg = AttnCfg<HD>;
  static int occ = 0;  // resident blocks per SM (smem/register bound), asked once
  if (occ <= 0) {
    // cp.async.cg bypasses L1: give the SM's unified memory to shared memory (4 blocks of 48 KiB)
    cudaFuncSetAttribute(AttnPartial<HD, GB>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, AttnPartial<HD, GB>, kWarps * 32, 0) != cudaSuccess || occ <= 0) occ = 2;
    cudaGetLastError();  // clear a refused attribute
  }
  const int G = H / KVH;
  const int ngroups = (G + GB - 1) / GB;
  const int64_t rows_per_pass = (int64_t)kWarps * Cfg::TR;  // one tile per warp
  const int64_t base_blocks = (int64_t)KVH * ngroups * T;
  // Static shapes only (the position is on the device): one wave of resident blocks over the whole
  // GPU, at most one split per rows_per_pass rows of the cache. Each block derives its chunk from
  // the actual position; splits past the attended rows exit at once.
  int64_t splits = ((int64_t)occ * NumSMs() * g_attn_waves + base_blocks - 1) / base_blocks;
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, (max_seq + rows_per_pass - 1) / rows_per_pass));
  if (splits > 65535 || (int64_t)KVH * ngroups > 0x7fffffff || T > 65535) return cudaErrorInvalidConfiguration;
  float* ws_acc = nullptr;
  float2* ws_ml = nullptr;
  if (splits > 1) {
    const size_t n = (size_t)T * H * splits;
    void* p = nullptr;
    if (int e = ScratchGet(scratch, s, sizeof(float) * n * HD + sizeof(float2) * n, &p)) return e;
    ws_acc = static_cast<float*>(p);
    ws_ml = reinterpret_cast<float2*>(ws_acc + n * HD);
  }
  dim3 grid(static_cast<unsigned>(KVH * ngroups), static_cast<unsigned>(splits), static_cast<unsigned>(T));
  const float qscale = 1.4426950408889634f / sqrtf(static_cast<float>(HD));  // log2(e) / sqrt(hd)
  AttnPartial<HD, GB><<<grid, kWarps * 32, 0, s>>>(q, k, v, ws_acc, ws_ml, out, H, KVH, G, ngroups, pos, max_seq,
                                                   static_cast<int>(splits), qscale);
  int e = cudaGetLastError();
  if (splits > 1 && e == cudaSuccess && !g_attn_skip_combine) {
    const size_t smem = sizeof(float4) * kCombineWarps * (HD / 4) + sizeof(float) * splits;
    if (smem > 48 * 1024) return cudaErrorInvalidConfiguration;
    AttnCombine<<<T * H, kCombineWarps * 32, smem, s>>>(ws_acc, ws_ml, out, HD, static_cast<int>(splits), pos, max_seq, T);
    e = cudaGetLastError();
  }
  return e;
}

template <int HD>
int LaunchAttnHD(const float* q, const float* k, const float* v, float* out, int T, int H, int KVH, int64_t max_seq, MnPos pos,
                 MnScratch* scratch, cudaStream_t s) {
  const int G = H / KVH;  // head groups of more than 4 run as several blocks (K/V then come from L2)
  if (G <= 1) return LaunchAttn<HD, 1>(q, k, v, out, T, H, KVH, max_seq, pos, scratch, s);
  if (G <= 2) return LaunchAttn<HD, 2>(q, k, v, out, T, H, KVH, max_seq, pos, scratch, s);
  if (G == 3) return LaunchAttn<HD, 3>(q, k, v, out, T, H, KVH, max_seq, pos, scratch, s);
  return LaunchAttn<HD, 4>(q, k, v, out, T, H, KVH, max_seq, pos, scratch, s);
}

}  // namespace

extern "C" {

MnScratch* mn_cuda_scratch_new(void) { return new MnScratch(); }

void mn_cuda_scratch_free(MnScratch* sc) {
  if (sc == nullptr) return;
  int prev = 0;
  cudaGetDevice(&prev);
  for (auto& x : sc->entries) {
    if (x.ptr == nullptr) continue;
    cudaSetDevice(x.device);
    cudaFree(x.ptr);  // synchronizes with the device: no pending work still uses it
  }
  cudaSetDevice(prev);
  delete sc;
}

int mn_cuda_cached_attention_f32(const float* q, const float* k, const float* v, float* out, int64_t T, int64_t H,
                                 int64_t KVH, int64_t head_dim, int64_t max_seq, MnPos kv_pos, MnScratch* scratch,
                                 void* stream) {
  if (T == 0) return 0;
  if (int e = UseDeviceOf(q)) return e;
  cudaStream_t s = S(stream);
  const int t = static_cast<int>(T), h = static_cast<int>(H), kvh = static_cast<int>(KVH);
  const bool aligned = ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) == 0;
  switch (aligned ? head_dim : 0) {  // the fast path reads float4s (cp.async 16 B)
    case 32: return LaunchAttnHD<32>(q, k, v, out, t, h, kvh, max_seq, kv_pos, scratch, s);
    case 64: return LaunchAttnHD<64>(q, k, v, out, t, h, kvh, max_seq, kv_pos, scratch, s);
    case 128: return LaunchAttnHD<128>(q, k, v, out, t, h, kvh, max_seq, kv_pos, scratch, s);
    case 256: return LaunchAttnHD<256>(q, k, v, out, t, h, kvh, max_seq, kv_pos, scratch, s);
    default: break;
  }
  void* scores = nullptr;  // [T * H, max_seq] (static size: the position is on the device)
  if (int e = ScratchGet(scratch, s, sizeof(float) * (size_t)T * H * std::max<int64_t>(max_seq, 1), &scores)) return e;
  AttnGeneric<<<t * h, 256, 0, s>>>(q, k, v, out, static_cast<float*>(scores), t, h, kvh, static_cast<int>(head_dim), kv_pos,
                                    max_seq, 1.0f / sqrtf(static_cast<float>(head_dim)));
  return cudaGetLastError();
}

}  // extern "C"
