// CUDA kernels of com.meganeura CachedAttention (decode and prefill against the KV cache, float32,
// float16 and bfloat16) and their per-kernel-instance scratch. Built by nvcc; called through cuda_kernels.h.
#include "cuda_common.cuh"

// One buffer per (stream, device): work on one stream is ordered, so a buffer reused by the next
// call on that stream is never in use; concurrent runs (other streams) get their own.
struct MnScratch {
  struct Entry {
    void* stream;
    int device;
    void* ptr;
    size_t bytes;
    uint64_t layout;  // what the caller keeps in the buffer (a changed layout must re-initialise it)
  };
  std::mutex mu;
  std::vector<Entry> entries;
};

// The current device's buffer for `stream`, at least `bytes` long. Allocates only when a larger size
// is first needed (a new shape); the old buffer is freed after the stream drained it. *fresh: the buffer
// is new or was last used with another `layout`, so the caller must initialise what it keeps there.
static int ScratchGet(MnScratch* sc, cudaStream_t stream, size_t bytes, void** out, bool* fresh, uint64_t layout = 0) {
  *fresh = false;
  if (sc == nullptr) return cudaErrorInvalidValue;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  std::lock_guard<std::mutex> lock(sc->mu);
  MnScratch::Entry* entry = nullptr;
  for (auto& x : sc->entries)
    if (x.stream == static_cast<void*>(stream) && x.device == dev) entry = &x;
  if (entry == nullptr) {
    sc->entries.push_back({static_cast<void*>(stream), dev, nullptr, 0, 0});
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
    *fresh = true;
  }
  if (entry->layout != layout) *fresh = true;
  entry->layout = layout;
  *out = entry->ptr;
  return 0;
}

namespace {

// ------------------------------------------------------------------ CachedAttention
// Split-K ("flash decoding"). Grid (KV head x head group, split, sequence x query row): a block streams
// its slice [start, end) of the cache rows of one KV head of one sequence once, for all query heads of
// the group (GQA: K/V are read once per group), and keeps a partial (m, l, acc[hd]) per head. The last
// block of a (sequence, row, KV head, group) to finish (an atomic counter per group, reset by that
// block) merges the splits' partials and writes the output: one kernel, no combine launch.
// Inside a block each warp runs its own cp.async pipeline: NST stages of TR rows of K and V (STB bytes
// per stage) in shared memory, 16-byte loads, no block barrier in the main loop.
//   QK: lanes (sub, sl) = (row of the step, 16-byte slice): C chunks (16 elements) per lane, LPR lanes
//       per row, shuffle-reduced dots; online softmax per tile in base 2 (q pre-scaled by log2(e)/sqrt(hd)).
//   PV: lanes over head_dim (PL lanes per row), p broadcast by shuffle, acc in float registers.
// float16/bfloat16 caches are read as such (half the bytes) and computed in float32.
int g_attn_waves = 1;           // split-K grid = waves x resident blocks (tuning knob for attn_check)
bool g_attn_skip_merge = false;  // attn_check times the split pass alone (output then invalid)
int g_attn_last_splits = 0;      // the split count of the last launch (reported by attn_check)

template <class T, int HD, int NW_, int NST_, int STB_>
struct AttnCfg {
  static constexpr int NW = NW_, NST = NST_, STB = STB_;
  static constexpr int EPC = Elem<T>::EPC;
  static constexpr int C16 = HD / EPC;             // 16-byte chunks per row
  static constexpr int C = 16 / EPC;               // QK: chunks per lane (16 elements)
  static constexpr int LPR = C16 / C;              // QK: lanes per row
  static constexpr int R = 32 / LPR;               // QK: rows per step
  static constexpr int TR = STB / (2 * HD * (int)sizeof(T));  // rows per stage
  static constexpr int STEPS = TR / R;
  static constexpr int PL = C16 < 32 ? C16 : 32;   // PV: lanes per row
  static constexpr int RV = 32 / PL;               // PV: rows in parallel
  static constexpr int CV = C16 / PL;              // PV: chunks per lane
  static constexpr int AV = CV * EPC;              // PV: accumulators per lane and head
  static constexpr int STAGE16 = 2 * TR * C16;     // chunks per stage (K then V)
  static constexpr int SMEM = NW * NST * STB;
  static_assert(LPR >= 1 && LPR <= 32 && TR % R == 0 && R % RV == 0 && (TR * C16) % 32 == 0, "attention tile shape");
};

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

struct AttnArgs {
  int T, H, KVH, G, ngroups, splits;
  MnPos pos;
  int64_t max_seq;
  float qscale;
  float* ws_acc;         // [B*T*H][splits][hd] partial sums (splits > 1)
  float2* ws_ml;         // [B*T*H][splits] (m, l)
  unsigned* counters;    // [B*T][KVH*ngroups] finished splits, reset to 0 by the last one
  int skip_merge;        // timing only (attn_check): stop after the split pass
};

template <class T, int HD, int GB, class Cfg>
__global__ void __launch_bounds__(Cfg::NW * 32)
    AttnSplit(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, AttnArgs a) {
  using E = Elem<T>;
  constexpr int NW = Cfg::NW, NST = Cfg::NST, C = Cfg::C, LPR = Cfg::LPR, R = Cfg::R, TR = Cfg::TR, STEPS = Cfg::STEPS;
  constexpr int PL = Cfg::PL, RV = Cfg::RV, CV = Cfg::CV, AV = Cfg::AV, C16 = Cfg::C16, EPC = Cfg::EPC;
  extern __shared__ uint4 smem[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kvh = blockIdx.x / a.ngroups, g0 = (blockIdx.x % a.ngroups) * GB;
  const int split = blockIdx.y, splits = a.splits;
  const int bt = blockIdx.z, b = bt / a.T, t = bt % a.T;
  // The grid is sized for max_seq; each block finds its slice of the rows its sequence attends to.
  const int64_t kv_pos = LoadPos(a.pos, b);
  const bool valid = kv_pos >= 0 && kv_pos <= a.max_seq - a.T;
  const int64_t L = valid ? kv_pos + t + 1 : 0;  // query row t attends to cache rows [0, L)
  constexpr int64_t kRowsPerPass = (int64_t)NW * TR;
  const int64_t chunk = ((L + splits - 1) / splits + kRowsPerPass - 1) / kRowsPerPass * kRowsPerPass;
  const int64_t start = (int64_t)split * chunk;
  const int64_t end = min(start + chunk, L);
  const int sub = lane / LPR, sl = lane % LPR;  // QK layout
  const int rv = lane / PL, pl = lane % PL;     // PV layout
  const int64_t kvw = (int64_t)a.KVH * HD;
  const int64_t head0 = (int64_t)bt * a.H + (int64_t)kvh * a.G + g0;  // (sequence, row, first head of the group)

  float qr[GB][C * EPC];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    const bool ok = g0 + g < a.G;
    const uint4* qp = reinterpret_cast<const uint4*>(q + (head0 + g) * HD);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (ok) {
        E::Unpack(qp[c * LPR + sl], &qr[g][c * EPC]);
#pragma unroll
        for (int e = 0; e < EPC; ++e) qr[g][c * EPC + e] *= a.qscale;
      } else {
#pragma unroll
        for (int e = 0; e < EPC; ++e) qr[g][c * EPC + e] = 0.f;
      }
    }
  }
  float m[GB], l[GB];  // m: running max (base 2, warp-uniform); l: this lane's rows only
  float acc[GB][AV];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int c = 0; c < AV; ++c) acc[g][c] = 0.f;
  }

  const int64_t nrows = end > start ? end - start : 0;
  const int ntiles = static_cast<int>((nrows + TR - 1) / TR);
  const int my_tiles = ntiles > warp ? (ntiles - warp + NW - 1) / NW : 0;
  uint4* wsm = smem + warp * NST * Cfg::STAGE16;
  const int64_t seq_off = (int64_t)b * a.max_seq * kvw;
  const uint4* kb = reinterpret_cast<const uint4*>(k + seq_off + (int64_t)kvh * HD);
  const uint4* vb = reinterpret_cast<const uint4*>(v + seq_off + (int64_t)kvh * HD);
  const int64_t kvw16 = kvw / EPC;  // row stride in chunks

  auto issue = [&](int i) {  // local tile i -> stage i % NST (always commits a group)
    if (i < my_tiles) {
      const int64_t row0 = start + (int64_t)(warp + i * NW) * TR;
      uint4* st = wsm + (i % NST) * Cfg::STAGE16;
#pragma unroll
      for (int j = 0; j < TR * C16 / 32; ++j) {
        const int e = j * 32 + lane, r = e / C16, col = e % C16;
        if (row0 + r < end) {
          CpAsync16(st + r * C16 + col, kb + (row0 + r) * kvw16 + col);
          CpAsync16(st + TR * C16 + r * C16 + col, vb + (row0 + r) * kvw16 + col);
        }
      }
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int i = 0; i < NST - 1; ++i) issue(i);

  for (int i = 0; i < my_tiles; ++i) {
    issue(i + NST - 1);  // into the stage consumed in iteration i - 1
    CpAsyncWait<NST - 1>();
    __syncwarp();
    const uint4* Ks = wsm + (i % NST) * Cfg::STAGE16;
    const uint4* Vs = Ks + TR * C16;
    const int64_t row0 = start + (int64_t)(warp + i * NW) * TR;

    float s[STEPS][GB];
#pragma unroll
    for (int stp = 0; stp < STEPS; ++stp) {
      const int r = stp * R + sub;
      float kf[C * EPC];
#pragma unroll
      for (int c = 0; c < C; ++c) E::Unpack(Ks[r * C16 + c * LPR + sl], &kf[c * EPC]);
#pragma unroll
      for (int g = 0; g < GB; ++g) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < C * EPC; ++e) d = fmaf(qr[g][e], kf[e], d);
#pragma unroll
        for (int off = LPR / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
        s[stp][g] = row0 + r < end ? d : -INFINITY;
      }
    }
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
      for (int c = 0; c < AV; ++c) acc[g][c] *= corr;
    }
#pragma unroll
    for (int j = 0; j < TR / RV; ++j) {
      const int stp = (j * RV) / R;               // compile-time after unrolling
      const int src = ((j * RV) % R + rv) * LPR;  // a QK lane that holds row r's score
      const int r = j * RV + rv;
      float pr[GB];
#pragma unroll
      for (int g = 0; g < GB; ++g) pr[g] = __shfl_sync(0xffffffffu, p[stp][g], src);
      if (row0 + r < end) {
#pragma unroll
        for (int c = 0; c < CV; ++c) {
          float vf[EPC];
          E::Unpack(Vs[r * C16 + c * PL + pl], vf);
#pragma unroll
          for (int g = 0; g < GB; ++g)
#pragma unroll
            for (int e = 0; e < EPC; ++e) acc[g][c * EPC + e] = fmaf(pr[g], vf[e], acc[g][c * EPC + e]);
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
    for (int off = PL; off < 32; off <<= 1)
#pragma unroll
      for (int c = 0; c < AV; ++c) acc[g][c] += __shfl_xor_sync(0xffffffffu, acc[g][c], off);
  }

  // merge the warps through shared memory (the stage buffers are free now)
  __syncthreads();
  float* sm_acc = reinterpret_cast<float*>(smem);  // [NW][GB][HD]; then the split merge's weights
  float* sm_ml = sm_acc + NW * GB * HD;            // [NW][GB][2]
  static_assert((NW * GB * HD + NW * GB * 2) * 4 <= Cfg::SMEM, "merge area");
  if (rv == 0) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
#pragma unroll
      for (int c = 0; c < CV; ++c)
#pragma unroll
        for (int e = 0; e < EPC; ++e) sm_acc[(warp * GB + g) * HD + (c * PL + pl) * EPC + e] = acc[g][c * EPC + e];
      if (lane == 0) {
        sm_ml[(warp * GB + g) * 2] = m[g];
        sm_ml[(warp * GB + g) * 2 + 1] = l[g];
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < GB * HD; e += blockDim.x) {
    const int g = e / HD, d = e % HD;
    if (g0 + g >= a.G) continue;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, sm_ml[(w * GB + g) * 2]);
    float lt = 0.f, at = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        const float mw = sm_ml[(w * GB + g) * 2];
        if (mw == -INFINITY) continue;
        const float c = exp2f(mw - M);
        lt += sm_ml[(w * GB + g) * 2 + 1] * c;
        at += sm_acc[(w * GB + g) * HD + d] * c;
      }
    }
    const int64_t th = head0 + g;
    if (splits == 1) {  // split 0 covers every row
      out[th * HD + d] = E::FromF(valid ? at / lt : __int_as_float(0x7fc00000));
    } else {
      a.ws_acc[(th * splits + split) * HD + d] = at;
      if (d == 0) a.ws_ml[th * splits + split] = make_float2(M, lt);
    }
  }
  if (splits == 1) return;

  // The last split of this group to finish merges all splits: out = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M).
  if (a.skip_merge) return;  // attn_check times the split pass alone (the output is then invalid)
  __shared__ bool last;
  __threadfence();  // this block's partials are visible device-wide before it counts itself
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* counter = a.counters + (int64_t)bt * gridDim.x + blockIdx.x;
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(splits - 1);
    if (last) *counter = 0u;  // ready for the next launch (or CUDA-graph replay)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Slots: the block's GB heads; slot -> its (sequence, row, head) index, or -1 past the group.
  auto slot_head = [&](int slot) -> int64_t { return g0 + slot < a.G ? head0 + slot : -1; };
  constexpr int SLOTS = GB;
  float* wsh = sm_acc;  // [SLOTS][splits] weights, then [SLOTS] 1 / l
  for (int slot = warp; slot < SLOTS; slot += NW) {  // a warp per head: the split weights
    const int64_t th = slot_head(slot);
    if (th < 0) continue;
    const float2* ml = a.ws_ml + th * splits;
    float M = -INFINITY;
    for (int sp = lane; sp < splits; sp += 32) M = fmaxf(M, __ldcg(&ml[sp].x));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float lsum = 0.f;
    for (int sp = lane; sp < splits; sp += 32) {
      const float2 x = __ldcg(&ml[sp]);
      const float w = x.x == -INFINITY ? 0.f : exp2f(x.x - M);
      wsh[slot * splits + sp] = w;
      lsum += x.y * w;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
    if (lane == 0) wsh[SLOTS * splits + slot] = valid ? 1.f / lsum : __int_as_float(0x7fc00000);
  }
  __syncthreads();
  // A thread per (head, 16-byte column): a straight run of independent L2 loads over the splits (an
  // empty split's partial is 0 with weight 0, so no branch breaks the run).
  constexpr int COLS = HD / 4;
  for (int e = threadIdx.x; e < SLOTS * COLS; e += NW * 32) {
    const int slot = e / COLS, c = e % COLS;
    const int64_t th = slot_head(slot);
    if (th < 0) continue;
    const float* w = wsh + slot * splits;
    const float4* src = reinterpret_cast<const float4*>(a.ws_acc + th * splits * HD) + c;
    float4 s4 = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 16
    for (int sp = 0; sp < splits; ++sp) {
      const float4 x = __ldcg(src + (int64_t)sp * COLS);
      const float ww = w[sp];
      s4 = make_float4(fmaf(ww, x.x, s4.x), fmaf(ww, x.y, s4.y), fmaf(ww, x.z, s4.z), fmaf(ww, x.w, s4.w));
    }
    const float inv = wsh[SLOTS * splits + slot];
    T* o = out + th * HD + c * 4;
    o[0] = E::FromF(s4.x * inv);
    o[1] = E::FromF(s4.y * inv);
    o[2] = E::FromF(s4.z * inv);
    o[3] = E::FromF(s4.w * inv);
  }
}

// Any head_dim, any alignment: one block per (sequence, row, head); scores go through a global scratch row.
template <class T>
__global__ void AttnGeneric(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
                            float* __restrict__ scores, int T_, int H, int KVH, int hd, MnPos pos, int64_t max_L, float scale) {
  using E = Elem<T>;
  const int64_t bth = blockIdx.x;
  const int h = static_cast<int>(bth % H);
  const int64_t bt = bth / H, b = bt / T_;
  const int t = static_cast<int>(bt % T_);
  const int kvh = h / (H / KVH);
  const int64_t kv_pos = LoadPos(pos, b);
  if (kv_pos < 0 || kv_pos > max_L - T_) {  // invalid position: NaN output, nothing read
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[bth * hd + d] = E::FromF(__int_as_float(0x7fc00000));
    return;
  }
  const int64_t L = kv_pos + t + 1;
  const int64_t kvw = (int64_t)KVH * hd;
  const T* qp = q + bth * hd;
  const T* kc = k + b * max_L * kvw + (int64_t)kvh * hd;
  const T* vc = v + b * max_L * kvw + (int64_t)kvh * hd;
  float* sc = scores + bth * max_L;
  __shared__ float red[256];
  float lmax = -INFINITY;
  for (int64_t p = threadIdx.x; p < L; p += blockDim.x) {
    const T* kp = kc + p * kvw;
    float s = 0.f;
    for (int d = 0; d < hd; ++d) s += E::ToF(qp[d]) * E::ToF(kp[d]);
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
    float acc = 0.f;
    for (int64_t p = 0; p < L; ++p) acc += sc[p] * E::ToF(vc[p * kvw + d]);
    out[bth * hd + d] = E::FromF(acc * inv);
  }
}

// The configuration per element type and head_dim: 8 warps, 4 stages of 4 KiB (128 KiB per block, one
// block per SM). attn_check's sweep on an H200 (decode, 32/8 heads, hd 128): 8192 cached 28.2 us
// float32 / 18.6 us float16, against 31.3 / 20.9 us with 4 warps and 3 stages (4 blocks per SM);
// more warps, stages or splits, and a warp per KV head, left the split pass at the same ~57%.
template <class T, int HD>
using DefaultCfg = AttnCfg<T, HD, 8, 4, 4096>;

template <class T, int HD, int GB, class Cfg>
int LaunchAttn(const T* q, const T* k, const T* v, T* out, int B, int T_, int H, int KVH, int64_t max_seq, MnPos pos,
               MnScratch* scratch, cudaStream_t s, int waves) {
  static int occ = 0;  // resident blocks per SM (smem/register bound), asked once per instantiation
  if (occ <= 0) {
    // cp.async.cg bypasses L1: give the SM's unified memory to shared memory
    cudaFuncSetAttribute(AttnSplit<T, HD, GB, Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM);
    cudaFuncSetAttribute(AttnSplit<T, HD, GB, Cfg>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, AttnSplit<T, HD, GB, Cfg>, Cfg::NW * 32, Cfg::SMEM) != cudaSuccess ||
        occ <= 0)
      occ = 1;
    cudaGetLastError();  // clear a refused attribute
  }
  const int G = H / KVH;
  const int ngroups = (G + GB - 1) / GB;
  const int64_t gx = (int64_t)KVH * ngroups;  // (KV head, head group) pairs: blocks per (sequence, row, split)
  const int64_t rows_per_pass = (int64_t)Cfg::NW * Cfg::TR;  // one tile per warp
  const int64_t base_blocks = gx * B * T_;
  // Static shapes only (the positions are on the device): one wave of resident blocks over the whole
  // GPU, at most one split per rows_per_pass rows of the cache. Each block derives its chunk from
  // its sequence's position; splits past the attended rows only count themselves done.
  int64_t splits = (int64_t)occ * NumSMs() * waves / base_blocks;  // at most `waves` waves (a partial second wave costs a whole one)
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, (max_seq + rows_per_pass - 1) / rows_per_pass));
  constexpr int kSlots = GB;
  splits = std::min<int64_t>(splits, (Cfg::SMEM / 4 - kSlots) / (kSlots + 1));  // the merge's weights fit in shared memory
  if (splits > 65535 || gx > 0x7fffffff || (int64_t)B * T_ > 65535) return cudaErrorInvalidConfiguration;
  AttnArgs args{T_, H, KVH, G, ngroups, static_cast<int>(splits), pos, max_seq,
                1.4426950408889634f / sqrtf(static_cast<float>(HD)),  // log2(e) / sqrt(hd)
                nullptr, nullptr, nullptr, g_attn_skip_merge ? 1 : 0};
  g_attn_last_splits = static_cast<int>(splits);
  if (splits > 1) {
    const size_t n = (size_t)B * T_ * H * splits;
    const size_t ncount = (size_t)B * T_ * gx;
    void* p = nullptr;
    const size_t acc_bytes = sizeof(float) * n * HD, ml_bytes = sizeof(float2) * n;
    bool fresh = false;
    const uint64_t layout = (static_cast<uint64_t>(acc_bytes + ml_bytes) << 24) ^ ncount;  // where the counters are
    if (int e = ScratchGet(scratch, s, acc_bytes + ml_bytes + sizeof(unsigned) * ncount, &p, &fresh, layout)) return e;
    args.ws_acc = static_cast<float*>(p);
    args.ws_ml = reinterpret_cast<float2*>(static_cast<char*>(p) + acc_bytes);
    args.counters = reinterpret_cast<unsigned*>(static_cast<char*>(p) + acc_bytes + ml_bytes);
    // Counters start at 0 in a new buffer; every launch leaves them at 0 again.
    if (fresh)
      if (cudaError_t e = cudaMemsetAsync(args.counters, 0, sizeof(unsigned) * ncount, s)) return e;
  }
  dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(splits), static_cast<unsigned>(B * T_));
  AttnSplit<T, HD, GB, Cfg><<<grid, Cfg::NW * 32, Cfg::SMEM, s>>>(q, k, v, out, args);
  return cudaGetLastError();
}

template <class T, int HD, class Cfg = DefaultCfg<T, HD>>
int LaunchAttnHD(const T* q, const T* k, const T* v, T* out, int B, int T_, int H, int KVH, int64_t max_seq, MnPos pos,
                 MnScratch* scratch, cudaStream_t s, int waves = 0) {
  if (waves <= 0) waves = g_attn_waves;
  const int G = H / KVH;  // head groups of more than 4 run as several blocks (K/V then come from L2)
  if (G <= 1) return LaunchAttn<T, HD, 1, Cfg>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, waves);
  if (G <= 2) return LaunchAttn<T, HD, 2, Cfg>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, waves);
  if (G == 3) return LaunchAttn<T, HD, 3, Cfg>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, waves);
  return LaunchAttn<T, HD, 4, Cfg>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, waves);
}

template <class T>
int CachedAttention(const T* q, const T* k, const T* v, T* out, int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t head_dim,
                    int64_t max_seq, MnPos kv_pos, MnScratch* scratch, cudaStream_t s) {
  const int b = static_cast<int>(B), t = static_cast<int>(T_), h = static_cast<int>(H), kvh = static_cast<int>(KVH);
  const bool aligned = ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) == 0;
  switch (aligned ? head_dim : 0) {  // the fast path reads 16-byte chunks (cp.async 16 B)
    case 32: return LaunchAttnHD<T, 32>(q, k, v, out, b, t, h, kvh, max_seq, kv_pos, scratch, s);
    case 64: return LaunchAttnHD<T, 64>(q, k, v, out, b, t, h, kvh, max_seq, kv_pos, scratch, s);
    case 128: return LaunchAttnHD<T, 128>(q, k, v, out, b, t, h, kvh, max_seq, kv_pos, scratch, s);
    case 256: return LaunchAttnHD<T, 256>(q, k, v, out, b, t, h, kvh, max_seq, kv_pos, scratch, s);
    default: break;
  }
  void* scores = nullptr;  // [B * T * H, max_seq] (static size: the positions are on the device)
  bool fresh = false;
  if (int e = ScratchGet(scratch, s, sizeof(float) * (size_t)B * T_ * H * std::max<int64_t>(max_seq, 1), &scores, &fresh)) return e;
  AttnGeneric<T><<<static_cast<unsigned>(B * T_ * H), 256, 0, s>>>(q, k, v, out, static_cast<float*>(scores), t, h, kvh,
                                                                   static_cast<int>(head_dim), kv_pos, max_seq,
                                                                   1.0f / sqrtf(static_cast<float>(head_dim)));
  return cudaGetLastError();
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

int mn_cuda_cached_attention(int dtype, const void* q, const void* k, const void* v, void* out, int64_t B, int64_t T, int64_t H,
                             int64_t KVH, int64_t head_dim, int64_t max_seq, MnPos kv_pos, MnScratch* scratch, void* stream) {
  if (T == 0 || B == 0) return 0;
  if (int e = UseDeviceOf(q)) return e;
  cudaStream_t s = S(stream);
  switch (dtype) {
    case MN_F16:
      return CachedAttention(static_cast<const __half*>(q), static_cast<const __half*>(k), static_cast<const __half*>(v),
                             static_cast<__half*>(out), B, T, H, KVH, head_dim, max_seq, kv_pos, scratch, s);
    case MN_BF16:
      return CachedAttention(static_cast<const __nv_bfloat16*>(q), static_cast<const __nv_bfloat16*>(k),
                             static_cast<const __nv_bfloat16*>(v), static_cast<__nv_bfloat16*>(out), B, T, H, KVH, head_dim,
                             max_seq, kv_pos, scratch, s);
    default:
      return CachedAttention(static_cast<const float*>(q), static_cast<const float*>(k), static_cast<const float*>(v),
                             static_cast<float*>(out), B, T, H, KVH, head_dim, max_seq, kv_pos, scratch, s);
  }
}

}  // extern "C"
