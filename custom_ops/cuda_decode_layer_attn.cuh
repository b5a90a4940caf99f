// The DecodeLayer megakernel's attention phase (included by cuda_decode_layer.cu after
// cuda_decode_layer_kernel.cuh): split-K over the cache rows, partials (m, l, acc) per head in the workspace.
#pragma once
#include "cuda_decode_layer_kernel.cuh"

namespace dl {

// ------------------------------------------------------------------ phase 2: attention split-K
// Lanes over head_dim: LPR lanes per cache row (one 16-byte chunk each), RS = 32 / LPR row slots per
// warp, each slot streaming kRT rows per tile with its own online softmax (base 2: the scores carry
// log2(e) / sqrt(hd)); the slots and then the warps are merged at the end.
template <class T, int HD>
struct Attn {
  using E = Elem<T>;
  static constexpr int EPC = E::EPC, C16 = HD / EPC, LPR = C16 < 32 ? C16 : 32, RS = 32 / LPR;
  static_assert(C16 <= 32, "one chunk per lane and row");

  struct Unit {
    int bt, b, kvh, h0, ng, split;
    int start, end;  // cache rows [start, end) of this split (max_seq < 2^30: the host checks)
  };

  template <class P>
  __device__ static bool Locate(const P& p, const Seqs& sq, int splits, int u, Unit* un) {
    const int G = p.H / p.KVH, NG = (G + kGmax - 1) / kGmax;
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
    const int L = static_cast<int>(sq.pos[un->b]) + un->bt % p.S + 1;
    const int chunk = (L + splits - 1) / splits;
    un->start = min(L, un->split * chunk);
    un->end = min(L, un->start + chunk);
    return true;
  }

  // The 16-byte chunk `sl` of cache row `row` of the unit's KV head.
  template <class P>
  __device__ static int64_t ChunkAt(const P& p, const Unit& un, int64_t row, int sl) {
    return ((static_cast<int64_t>(un.b) * p.max_seq + row) * p.KVH + un.kvh) * C16 + sl;
  }

  // The unit's K and V rows into L2: a thread per (row, 128-byte line of the head's slice).
  template <class P>
  __device__ static void PrefetchRows(const P& p, const Unit& un) {
    constexpr int LINES = (C16 + 7) / 8;
#pragma unroll 1
    for (int i = threadIdx.x; i < (un.end - un.start) * LINES; i += kThreads) {
      const int64_t c = ChunkAt(p, un, un.start + i / LINES, (i % LINES) * 8);
      PrefetchL2(static_cast<const uint4*>(p.k) + c);
      PrefetchL2(static_cast<const uint4*>(p.v) + c);
    }
  }

  // A lane's state for G heads (kGmax for split units; Heads units take one: half the code and the work).
  template <int G>
  struct Lane {
    float q[G][EPC], acc[G][EPC], m[G], l[G];
  };

  // Folds RT rows of this lane's slot into its online softmax, for every head: key(r, kf) and val(r, vf)
  // give row r's chunk of K and of V as float32, valid(r) whether row r counts (every lane of the warp
  // takes part: the scores are summed across the row's lanes).
  template <int RT, class P, int G, class Key, class Val, class Valid>
  __device__ static void Fold(const P& p, Lane<G>& s, Key key, Val val, Valid valid) {
    float sc[RT][G];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      float kf[EPC];
      key(r, kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < EPC; ++e) d = fmaf(s.q[g][e], kf[e], d);
#pragma unroll
        for (int o = LPR / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[r][g] = valid(r) ? d * p.qscale : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mt = sc[0][g];
#pragma unroll
      for (int r = 1; r < RT; ++r) mt = fmaxf(mt, sc[r][g]);
      const float mn = fmaxf(s.m[g], mt);
      if (mn == -INFINITY) continue;  // no row of this slot yet
      const float corr = exp2f(s.m[g] - mn);  // 0 when m was -inf
      s.l[g] *= corr;
#pragma unroll
      for (int e = 0; e < EPC; ++e) s.acc[g][e] *= corr;
      s.m[g] = mn;
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        if (!valid(r)) continue;
        const float pr = exp2f(sc[r][g] - mn);
        float vf[EPC];
        val(r, vf);
        s.l[g] += pr;
#pragma unroll
        for (int e = 0; e < EPC; ++e) s.acc[g][e] = fmaf(pr, vf[e], s.acc[g][e]);
      }
    }
  }

  // One tile: RT cache rows of this lane's slot, loaded, then ready() (Heads units: q arrives there),
  // then folded.
  template <int RT, class P, int G, class Ready>
  __device__ static void Tile(const P& p, const Unit& un, Lane<G>& s, int row0, int sl, Ready ready) {
    uint4 kk[RT], vv[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r)
      if (row0 + r < un.end) {
        kk[r] = __ldcg(static_cast<const uint4*>(p.k) + ChunkAt(p, un, row0 + r, sl));
        vv[r] = __ldcg(static_cast<const uint4*>(p.v) + ChunkAt(p, un, row0 + r, sl));
      }
    ready();
    Fold<RT>(
        p, s, [&](int r, float(&kf)[EPC]) { E::Unpack(kk[r], kf); }, [&](int r, float(&vf)[EPC]) { E::Unpack(vv[r], vf); },
        [&](int r) { return row0 + r < un.end; });
  }

  // Folds the slots of the warp together (lanes sl of slot 0 end with the warp's sums).
  template <int G>
  __device__ static void MergeSlots(Lane<G>& s) {
#pragma unroll
    for (int o = LPR; o < 32; o <<= 1)
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float mo = __shfl_xor_sync(0xffffffffu, s.m[g], o), lo = __shfl_xor_sync(0xffffffffu, s.l[g], o);
        const float M = fmaxf(s.m[g], mo);
        const float cs = s.m[g] == -INFINITY ? 0.f : exp2f(s.m[g] - M), co = mo == -INFINITY ? 0.f : exp2f(mo - M);
        s.l[g] = s.l[g] * cs + lo * co;
#pragma unroll
        for (int e = 0; e < EPC; ++e) s.acc[g][e] = s.acc[g][e] * cs + __shfl_xor_sync(0xffffffffu, s.acc[g][e], o) * co;
        s.m[g] = M;
      }
  }

  // The warps' sums merged through shared memory: sink(g, d, M, l, acc) per head g < ng and column d, by
  // the thread that merged column d (each reads only its column of the warps' sums).
  template <int G, class Sink>
  __device__ static void MergeWarps(const Lane<G>& s, int sl, float* sm, int ng, Sink sink) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* sm_ml = sm + kWarps * G * HD;  // [kWarps][G][2]
    if (lane < LPR) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int e = 0; e < EPC; ++e) sm[(warp * G + g) * HD + sl * EPC + e] = s.acc[g][e];
        if (lane == 0) {
          sm_ml[(warp * G + g) * 2] = s.m[g];
          sm_ml[(warp * G + g) * 2 + 1] = s.l[g];
        }
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < ng * HD; i += kThreads) {
      const int g = i / HD, d = i % HD;
      float M = -INFINITY;
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_ml[(w * G + g) * 2]);
      float lt = 0.f, at = 0.f;
      if (M != -INFINITY)
        for (int w = 0; w < kWarps; ++w) {
          const float mw = sm_ml[(w * G + g) * 2];
          if (mw == -INFINITY) continue;
          const float c = exp2f(mw - M);
          lt += sm_ml[(w * G + g) * 2 + 1] * c;
          at += sm[(w * G + g) * HD + d] * c;
        }
      sink(g, d, M, lt, at);
    }
    __syncthreads();  // the shared memory is free for the next unit (or holds what the sink wrote)
  }

  // The lane's q values (raw: the scale multiplies the scores, so the first K/V loads need not wait for
  // q) and an empty online softmax, for each of the unit's heads (past ng: its last head again).
  template <class P, int G>
  __device__ static void Init(const P& p, const Unit& un, int sl, Lane<G>& s) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float4* qp = reinterpret_cast<const float4*>(p.q + (static_cast<int64_t>(un.bt) * p.H + un.h0 + min(g, un.ng - 1)) * HD + sl * EPC);
#pragma unroll
      for (int e = 0; e < EPC / 4; ++e) {
        const float4 v = __ldcg(qp + e);
        s.q[g][4 * e] = v.x;
        s.q[g][4 * e + 1] = v.y;
        s.q[g][4 * e + 2] = v.z;
        s.q[g][4 * e + 3] = v.w;
      }
    }
    Empty(s);
  }
  // An empty online softmax for each head.
  template <int G>
  __device__ static void Empty(Lane<G>& s) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < EPC; ++e) s.acc[g][e] = 0.f;
      s.m[g] = -INFINITY;
      s.l[g] = 0.f;
    }
  }

  // The block's units' K and V rows into L2 (before the barrier that precedes the phase).
  template <class P>
  __device__ static void Prefetch(const P& p, const Seqs& sq, int splits) {
    const int units = Units(p, splits);
#pragma unroll 1
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      Unit un;
      if (Locate(p, sq, splits, u, &un)) PrefetchRows(p, un);
    }
  }

  template <class P>
  __device__ static int Units(const P& p, int splits) { return p.R * p.KVH * ((p.H / p.KVH + kGmax - 1) / kGmax) * splits; }

  // One unit's attention with G heads' lane state and RT rows per slot and tile: sink(g, d, M, l, acc)
  // takes the merged result (MergeWarps). Split units and Heads units (cuda_decode_layer_heads.cuh) both.
  template <int G, int RT, class P, class Sink>
  __device__ static void Attend(const P& p, const Unit& un, float* sm, Sink sink) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slot = lane / LPR, sl = lane % LPR;
    Lane<G> s;
    Init(p, un, sl, s);
    constexpr int kTileRows = kWarps * RS * RT;
#pragma unroll 1
    for (int t0 = un.start; t0 < un.end; t0 += kTileRows) Tile<RT>(p, un, s, t0 + (warp * RS + slot) * RT, sl, [] {});
    Trace(p, 4);
    MergeSlots(s);
    MergeWarps(s, sl, sm, un.ng, sink);
  }

  template <class P>
  __device__ static void Run(const P& p, const Seqs& sq, int splits, float* sm) {
    const int units = Units(p, splits);
#pragma unroll 1
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      Unit un;
      if (!Locate(p, sq, splits, u, &un)) continue;  // block-uniform: an invalid position, phase 3 writes NaN
      Attend<kGmax, kRT>(p, un, sm, [&](int g, int d, float M, float l, float acc) {  // the unit's partial per head
        const int64_t slot = (static_cast<int64_t>(un.bt) * p.H + un.h0 + g) * p.max_splits + un.split;
        p.part[slot * HD + d] = acc;
        if (d == 0) p.ml[slot] = make_float2(M, l);
      });
    }
  }
};

}  // namespace dl
