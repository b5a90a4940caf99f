// The DecodeLayer megakernel: one persistent cooperative launch per decoder layer (cuda_decode_layer.cu
// launches it). Grid = one block per SM, all co-resident (cooperative launch); five phases separated by
// four grid barriers:
//   1. every block normalises x's rows into shared memory (redundantly: x is a few KB); warps take
//      pairs of q|k|v weight rows (j, j + hd/2 of one head, so RoPE is the epilogue) grid-wide; q is
//      rotated into the workspace, k rotated and v written into the caches at row kv_pos[b] + t.
//   2. attention split-K: a unit = (query row, KV head, group of <= 4 query heads, split of the
//      attended rows); a block per unit, lanes over head_dim, an online softmax per lane slot, the
//      warps merged through shared memory into one (m, l, acc) partial per head in the workspace.
//   3. every block merges all heads' partials into the attention output a (rounded to T) in shared
//      memory, then warps take rows of w_o: x1 = a @ w_o^T + x (rounded to T) into the workspace.
//   4. every block normalises x1; warps take (gate, up) row pairs: h = silu(g) * u into the workspace.
//   5. every block loads h; warps take rows of w_down: y = h @ w_down^T + x1.
// Rounding to T happens exactly where the five-op composition rounds (q, k, v; rotated q and k; a;
// x1; h; y), accumulation in float32, so the result equals the composition within float rounding.
// Latency, not bytes, is the cost (a layer's weights are ~7 MB at 16 bits): each warp's weight rows
// of phases 3-5 are prefetched into L2 at the start, and each phase's first rows are loaded into
// registers before the barrier that precedes it, so the barrier's wait overlaps the loads.
#pragma once
#include <cooperative_groups.h>

#include "cuda_common.cuh"

namespace dl {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxRows = 16;  // R = B * S rows at most (one block holds them all)
constexpr int kGmax = 4;      // query heads of one KV head per attention unit
constexpr int kRT = 4;        // cache rows per lane slot and attention tile
constexpr int kHold = 6;      // 16-byte weight chunks per lane and row held in registers

struct Params {
  const void *x, *attn_norm, *w_q, *w_k, *w_v, *w_o, *mlp_norm, *w_gate, *w_up, *w_down;
  void *k, *v, *y;  // the caches (written in place) and the output
  MnPos pos;
  int B, S, R, D, H, KVH, I;
  int64_t max_seq;
  float eps, qscale;
  int max_splits;      // the workspace's partials per head
  int min_split_rows;  // a split covers at least this many cache rows
  int use_cg;          // which grid barrier (GridBarrier)
  unsigned* bar;       // use_cg 0: [0] arrivals, [32] generation; use_cg 2: [64] arrivals, [96] epoch
  float *q, *part, *x1, *h;
  float2* ml;
  float inv[64];  // rope frequencies (head_dim / 2)
};

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

constexpr int kBarriers = 4;  // grid barriers per launch

// Grid barriers, valid only because the launch is cooperative (every block resident); nothing needs
// resetting between launches or CUDA-graph replays. use_cg 0: an arrival count that the last block
// resets and a generation it advances (each block waits for the generation to move: two round trips,
// the arrival's and the poll's). 2: a count that only grows (arrivals are fire-and-forget reductions)
// and an epoch per launch, read at the start and advanced by block 0 at the end: barrier k of launch e
// is passed when the count reaches (e * kBarriers + k + 1) * blocks (modulo 2^32). 1: cooperative_groups.
__device__ __forceinline__ void GridBarrier(const Params& p, unsigned epoch, int k) {
  if (p.use_cg == 1) {
    cooperative_groups::this_grid().sync();
    return;
  }
  if (p.use_cg == 2) {
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned* count = p.bar + 64;
      const unsigned target = (epoch * kBarriers + k + 1) * gridDim.x;
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
      unsigned cur;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(cur) : "l"(count) : "memory");
      } while (static_cast<int>(cur - target) < 0);
    }
    __syncthreads();
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* count = p.bar;
    unsigned* gen = p.bar + 32;
    unsigned g, old;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(g) : "l"(gen) : "memory");
    __threadfence();  // the block's writes (ordered before this thread by the __syncthreads) before the arrival
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(count) : "memory");
    if (old == gridDim.x - 1) {
      asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(count), "r"(0u) : "memory");
      asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(gen), "r"(g + 1) : "memory");
    } else {
      unsigned cur;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(cur) : "l"(gen) : "memory");
      } while (cur == g);
    }
  }
  __syncthreads();
}

// The sequences' positions and whether each is valid (0 <= kv_pos <= max_seq - S), in shared memory.
struct Seqs {
  int64_t pos[kMaxRows];
  bool valid[kMaxRows];
  int splits;  // attention splits per (row, head): from the longest attended length
};

__device__ void LoadSeqs(const Params& p, Seqs* s) {
  if (threadIdx.x < p.B) {
    const int64_t v = LoadPos(p.pos, threadIdx.x);
    const bool ok = v >= 0 && v <= p.max_seq - p.S;
    s->valid[threadIdx.x] = ok;
    s->pos[threadIdx.x] = ok ? v : 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t L = 1;
    for (int b = 0; b < p.B; ++b)
      if (s->valid[b]) L = max(L, s->pos[b] + p.S);
    const int64_t want = (L + p.min_split_rows - 1) / p.min_split_rows;
    s->splits = static_cast<int>(want < 1 ? 1 : want > p.max_splits ? p.max_splits : want);
  }
  __syncthreads();
}

// act[m][k] (k < K, row stride K) = x / sqrt(mean(x^2) + eps) * gamma for the R rows, float32;
// src(i) gives element i of the rows as float.
template <class T, class Src>
__device__ void NormRows(Src src, const T* __restrict__ gamma, int R, int K, float eps, float* act, float* red) {
  float ss[kMaxRows];
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) ss[m] = 0.f;
  for (int k = threadIdx.x; k < K; k += kThreads) {
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m)
      if (m < R) {
        const float v = src(m * K + k);
        act[m * K + k] = v;
        ss[m] += v * v;
      }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m)
    if (m < R) {
      const float t = WarpSum(ss[m]);
      if (lane == 0) red[warp * kMaxRows + m] = t;
    }
  __syncthreads();
  if (threadIdx.x < R) {
    float t = 0.f;
    for (int w = 0; w < kWarps; ++w) t += red[w * kMaxRows + threadIdx.x];
    red[kWarps * kMaxRows + threadIdx.x] = sqrtf(t / static_cast<float>(K) + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < R * K; i += kThreads) act[i] = act[i] / red[kWarps * kMaxRows + i / K] * Elem<T>::ToF(gamma[i % K]);
  __syncthreads();
}

// NR weight rows of K elements (16-byte chunks), the first kHold chunks per lane held in registers.
template <class T, int NR>
struct Rows {
  static constexpr int EPC = Elem<T>::EPC;
  const uint4* w[NR];
  uint4 held[NR][kHold];
  int chunks;

  __device__ void Load(int lane) {
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int j = 0; j < kHold; ++j)
        if (lane + 32 * j < chunks) held[r][j] = __ldg(w[r] + lane + 32 * j);
  }
  __device__ void Prefetch(int lane) const {  // the rows' 128-byte lines into L2
    for (int r = 0; r < NR; ++r)
      for (int c = lane * 8; c < chunks; c += 32 * 8) PrefetchL2(w[r] + c);
  }
  __device__ static void Dot(const uint4& u, const float* x, float& acc) {
    float f[EPC];
    Elem<T>::Unpack(u, f);
#pragma unroll
    for (int q = 0; q < EPC / 4; ++q) {
      const float4 v = reinterpret_cast<const float4*>(x)[q];
      acc += f[4 * q] * v.x + f[4 * q + 1] * v.y + f[4 * q + 2] * v.z + f[4 * q + 3] * v.w;
    }
  }
  // out[r] (in lane i, for row m0 + i, i < 4) = dot(weight row r, act row m0 + i); act rows of stride K.
  __device__ void Products(const float* act, int m0, int R, int lane, float (&out)[NR]) const {
    float acc[NR][4];
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][i] = 0.f;
    const int K = chunks * EPC;
#pragma unroll
    for (int j = 0; j < kHold; ++j) {
      const int c = lane + 32 * j;
      if (c < chunks)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (m0 + i < R)
#pragma unroll
            for (int r = 0; r < NR; ++r) Dot(held[r][j], act + (m0 + i) * K + c * EPC, acc[r][i]);
    }
    for (int c = lane + 32 * kHold; c < chunks; c += 32) {
      uint4 u[NR];
#pragma unroll
      for (int r = 0; r < NR; ++r) u[r] = __ldg(w[r] + c);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (m0 + i < R)
#pragma unroll
          for (int r = 0; r < NR; ++r) Dot(u[r], act + (m0 + i) * K + c * EPC, acc[r][i]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (m0 + i < R)
#pragma unroll
        for (int r = 0; r < NR; ++r) {
          const float s = WarpSum(acc[r][i]);
          if (lane == i) out[r] = s;
        }
  }
};

// A grid-wide loop over `items` weight-row items: item i is set up by setup(i, rows), its products
// with every act row computed, and epi(i, m, out) called by lane m % 4 for row m. `first` holds the
// warp's first item, already set up and loaded (before the barrier that precedes the phase).
template <class T, int NR, class Setup, class Epi>
__device__ void ItemLoop(Rows<T, NR>& first, int items, const float* act, int R, Setup setup, Epi epi) {
  const int lane = threadIdx.x & 31;
  const int tw = gridDim.x * kWarps;
  int i = (threadIdx.x >> 5) * gridDim.x + blockIdx.x;
  for (bool held = true; i < items; i += tw, held = false) {
    if (!held) {
      setup(i, first);
      first.Load(lane);
    }
    for (int m0 = 0; m0 < R; m0 += 4) {
      float out[NR];
      first.Products(act, m0, R, lane, out);
      if (lane < 4 && m0 + lane < R) epi(i, m0 + lane, out);
    }
  }
}

// The warp's first item of a phase with `items` items: set up and loaded (or nothing when it has none).
template <class T, int NR, class Setup>
__device__ void LoadFirst(Rows<T, NR>& rows, int items, Setup setup) {
  const int i = (threadIdx.x >> 5) * gridDim.x + blockIdx.x;
  if (i < items) {
    setup(i, rows);
    rows.Load(threadIdx.x & 31);
  }
}

// L2 prefetch of every item of the warp in a phase.
template <class T, int NR, class Setup>
__device__ void PrefetchItems(int items, Setup setup) {
  const int tw = gridDim.x * kWarps;
  for (int i = (threadIdx.x >> 5) * gridDim.x + blockIdx.x; i < items; i += tw) {
    Rows<T, NR> rows;
    setup(i, rows);
    rows.Prefetch(threadIdx.x & 31);
  }
}

// ------------------------------------------------------------------ phase 2: attention split-K
// Lanes over head_dim: LPR lanes per cache row (one 16-byte chunk each), RS = 32 / LPR row slots per
// warp, each slot streaming kRT rows per tile with its own online softmax (base 2: q carries
// log2(e) / sqrt(hd)); the slots and then the warps are merged at the end.
template <class T, int HD>
struct Attn {
  using E = Elem<T>;
  static constexpr int EPC = E::EPC, C16 = HD / EPC, LPR = C16 < 32 ? C16 : 32, RS = 32 / LPR;
  static_assert(C16 <= 32, "one chunk per lane and row");

  struct Unit {
    int bt, b, kvh, h0, ng, split;
    int64_t start, end;  // cache rows [start, end) of this split
  };

  __device__ static bool Locate(const Params& p, const Seqs& sq, int u, Unit* un) {
    const int G = p.H / p.KVH, NG = (G + kGmax - 1) / kGmax, splits = sq.splits;
    un->split = u % splits;
    int rest = u / splits;
    const int grp = rest % NG;
    rest /= NG;
    un->kvh = rest % p.KVH;
    un->bt = rest / p.KVH;
    un->b = un->bt / p.S;
    un->h0 = un->kvh * G + grp * kGmax;
    un->ng = min(kGmax, G - grp * kGmax);
    if (!sq.valid[un->b]) return false;
    const int64_t L = sq.pos[un->b] + un->bt % p.S + 1;
    const int64_t chunk = (L + splits - 1) / splits;
    un->start = min(L, static_cast<int64_t>(un->split) * chunk);
    un->end = min(L, un->start + chunk);
    return true;
  }

  // The 16-byte chunk `sl` of cache row `row` of the unit's KV head.
  __device__ static int64_t ChunkAt(const Params& p, const Unit& un, int64_t row, int sl) {
    return ((static_cast<int64_t>(un.b) * p.max_seq + row) * p.KVH + un.kvh) * C16 + sl;
  }

  // The unit's K and V rows into L2: a thread per (row, 128-byte line of the head's slice).
  __device__ static void PrefetchRows(const Params& p, const Unit& un) {
    constexpr int LINES = (C16 + 7) / 8;
    for (int64_t i = threadIdx.x; i < (un.end - un.start) * LINES; i += kThreads) {
      const int64_t c = ChunkAt(p, un, un.start + i / LINES, static_cast<int>(i % LINES) * 8);
      PrefetchL2(static_cast<const uint4*>(p.k) + c);
      PrefetchL2(static_cast<const uint4*>(p.v) + c);
    }
  }

  struct Lane {
    float q[kGmax][EPC], acc[kGmax][EPC], m[kGmax], l[kGmax];
  };

  // One tile: kRT rows of this lane's slot, scored for every head, folded into the online softmax.
  __device__ static void Tile(const Params& p, const Unit& un, Lane& s, int64_t row0, int sl) {
    uint4 kk[kRT], vv[kRT];
#pragma unroll
    for (int r = 0; r < kRT; ++r)
      if (row0 + r < un.end) {
        kk[r] = __ldcg(static_cast<const uint4*>(p.k) + ChunkAt(p, un, row0 + r, sl));
        vv[r] = __ldcg(static_cast<const uint4*>(p.v) + ChunkAt(p, un, row0 + r, sl));
      }
    float sc[kRT][kGmax];
#pragma unroll
    for (int r = 0; r < kRT; ++r) {
      float kf[EPC];
      E::Unpack(kk[r], kf);
#pragma unroll
      for (int g = 0; g < kGmax; ++g) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < EPC; ++e) d = fmaf(s.q[g][e], kf[e], d);
#pragma unroll
        for (int o = LPR / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[r][g] = row0 + r < un.end ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < kGmax; ++g) {
      float mt = sc[0][g];
#pragma unroll
      for (int r = 1; r < kRT; ++r) mt = fmaxf(mt, sc[r][g]);
      const float mn = fmaxf(s.m[g], mt);
      if (mn == -INFINITY) continue;  // no row of this slot yet
      const float corr = exp2f(s.m[g] - mn);  // 0 when m was -inf
      s.l[g] *= corr;
#pragma unroll
      for (int e = 0; e < EPC; ++e) s.acc[g][e] *= corr;
      s.m[g] = mn;
#pragma unroll
      for (int r = 0; r < kRT; ++r) {
        if (!(row0 + r < un.end)) continue;
        const float pr = exp2f(sc[r][g] - mn);
        float vf[EPC];
        E::Unpack(vv[r], vf);
        s.l[g] += pr;
#pragma unroll
        for (int e = 0; e < EPC; ++e) s.acc[g][e] = fmaf(pr, vf[e], s.acc[g][e]);
      }
    }
  }

  // Folds the slots of the warp together (lanes sl of slot 0 end with the warp's sums).
  __device__ static void MergeSlots(Lane& s) {
#pragma unroll
    for (int o = LPR; o < 32; o <<= 1)
#pragma unroll
      for (int g = 0; g < kGmax; ++g) {
        const float mo = __shfl_xor_sync(0xffffffffu, s.m[g], o), lo = __shfl_xor_sync(0xffffffffu, s.l[g], o);
        const float M = fmaxf(s.m[g], mo);
        const float cs = s.m[g] == -INFINITY ? 0.f : exp2f(s.m[g] - M), co = mo == -INFINITY ? 0.f : exp2f(mo - M);
        s.l[g] = s.l[g] * cs + lo * co;
#pragma unroll
        for (int e = 0; e < EPC; ++e) s.acc[g][e] = s.acc[g][e] * cs + __shfl_xor_sync(0xffffffffu, s.acc[g][e], o) * co;
        s.m[g] = M;
      }
  }

  // The warps' sums merged through shared memory into the unit's partial per head (workspace).
  __device__ static void MergeWarps(const Params& p, const Unit& un, const Lane& s, int sl, float* sm) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* sm_ml = sm + kWarps * kGmax * HD;  // [kWarps][kGmax][2]
    if (lane < LPR) {
#pragma unroll
      for (int g = 0; g < kGmax; ++g) {
#pragma unroll
        for (int e = 0; e < EPC; ++e) sm[(warp * kGmax + g) * HD + sl * EPC + e] = s.acc[g][e];
        if (lane == 0) {
          sm_ml[(warp * kGmax + g) * 2] = s.m[g];
          sm_ml[(warp * kGmax + g) * 2 + 1] = s.l[g];
        }
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < un.ng * HD; i += kThreads) {
      const int g = i / HD, d = i % HD;
      float M = -INFINITY;
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_ml[(w * kGmax + g) * 2]);
      float lt = 0.f, at = 0.f;
      if (M != -INFINITY)
        for (int w = 0; w < kWarps; ++w) {
          const float mw = sm_ml[(w * kGmax + g) * 2];
          if (mw == -INFINITY) continue;
          const float c = exp2f(mw - M);
          lt += sm_ml[(w * kGmax + g) * 2 + 1] * c;
          at += sm[(w * kGmax + g) * HD + d] * c;
        }
      const int64_t slot = (static_cast<int64_t>(un.bt) * p.H + un.h0 + g) * p.max_splits + un.split;
      p.part[slot * HD + d] = at;
      if (d == 0) p.ml[slot] = make_float2(M, lt);
    }
    __syncthreads();  // the shared memory is free for the next unit
  }

  __device__ static void Run(const Params& p, const Seqs& sq, float* sm) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slot = lane / LPR, sl = lane % LPR;
    const int units = p.R * p.KVH * ((p.H / p.KVH + kGmax - 1) / kGmax) * sq.splits;
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      Unit un;
      if (!Locate(p, sq, u, &un)) continue;  // block-uniform: an invalid position, phase 3 writes NaN
      Lane s;
#pragma unroll
      for (int g = 0; g < kGmax; ++g) {
        const float4* qp = reinterpret_cast<const float4*>(p.q + (static_cast<int64_t>(un.bt) * p.H + un.h0 + min(g, un.ng - 1)) * HD + sl * EPC);
#pragma unroll
        for (int e = 0; e < EPC / 4; ++e) {
          const float4 v = __ldcg(qp + e);
          s.q[g][4 * e] = v.x * p.qscale;
          s.q[g][4 * e + 1] = v.y * p.qscale;
          s.q[g][4 * e + 2] = v.z * p.qscale;
          s.q[g][4 * e + 3] = v.w * p.qscale;
        }
#pragma unroll
        for (int e = 0; e < EPC; ++e) s.acc[g][e] = 0.f;
        s.m[g] = -INFINITY;
        s.l[g] = 0.f;
      }
      constexpr int kTileRows = kWarps * RS * kRT;
      for (int64_t t0 = un.start; t0 < un.end; t0 += kTileRows)
        Tile(p, un, s, t0 + static_cast<int64_t>(warp * RS + slot) * kRT, sl);
      MergeSlots(s);
      MergeWarps(p, un, s, sl, sm);
    }
  }
};

}  // namespace dl
