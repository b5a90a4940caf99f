// The DecodeLayer kernel's phases (included by cuda_decode_layer.cu, which holds the kernel itself):
// the weight items, the epilogues and prologues, the barriers, and the phase groups the kernel runs.
#pragma once
#include "cuda_decode_layer_attn.cuh"
#include "cuda_decode_layer_heads.cuh"
#include "cuda_decode_layer_kernel.cuh"

namespace dl {

// The phases' weight items. Phase 1: pairs of rows (j, j + hd/2) of one head of w_q | w_k | w_v;
// phase 3: rows of w_o; phase 4: (gate, up) row pairs; phase 5: rows of w_down.
template <class T, int HD, class P>
struct Items {
  const P& p;
  static constexpr int EPC = Elem<T>::EPC;
  __device__ int Qkv() const { return (p.H + 2 * p.KVH) * (HD / 2); }
  __device__ void QkvRows(int i, Pair<T>& r) const {
    const int hh = i / (HD / 2), j = i % (HD / 2);
    const T* w = static_cast<const T*>(hh < p.H ? p.w_q : hh < p.H + p.KVH ? p.w_k : p.w_v);
    const int row = (hh < p.H ? hh : hh < p.H + p.KVH ? hh - p.H : hh - p.H - p.KVH) * HD + j;
    r.w[0] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(row) * p.D);
    r.w[1] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(row + HD / 2) * p.D);
    r.chunks = p.D / EPC;
  }
  __device__ void ORow(int n, Single<T>& r) const {
    r.w[0] = reinterpret_cast<const uint4*>(static_cast<const T*>(p.w_o) + static_cast<int64_t>(n) * p.H * HD);
    r.chunks = p.H * HD / EPC;
  }
  __device__ void GateUpRows(int n, Pair<T>& r) const {
    r.w[0] = reinterpret_cast<const uint4*>(static_cast<const T*>(p.w_gate) + static_cast<int64_t>(n) * p.D);
    r.w[1] = reinterpret_cast<const uint4*>(static_cast<const T*>(p.w_up) + static_cast<int64_t>(n) * p.D);
    r.chunks = p.D / EPC;
  }
  __device__ void DownRow(int n, Single<T>& r) const {
    r.w[0] = reinterpret_cast<const uint4*>(static_cast<const T*>(p.w_down) + static_cast<int64_t>(n) * p.I);
    r.chunks = p.I / EPC;
  }
  // Phases 3-5's rows into L2, by the blocks from `first_idle` on (PrefetchItems).
  __device__ void PrefetchLater(int first_idle) const {
    PrefetchItems<Single<T>>(p.D, first_idle, [&](int i, Single<T>& r) { ORow(i, r); });
    PrefetchItems<Pair<T>>(p.I, first_idle, [&](int i, Pair<T>& r) { GateUpRows(i, r); });
    PrefetchItems<Single<T>>(p.D, first_idle, [&](int i, Single<T>& r) { DownRow(i, r); });
  }
};

// Phase 1's epilogue for row m of pair item i: q, k, v rounded to T as RMSNormLinear's outputs; q and k
// rotated at position kv_pos[b] + t with the Rope kernels' arithmetic and rounded again; k and v into the
// caches at row kv_pos[b] + t (a sequence with an invalid position writes nothing: the caches stay as
// they were, its output is NaN). q goes to the workspace (float32 holding T values); with Heads units
// q, k and v go to qkv_t as words tagged `tag` instead, which the units poll.
template <class T, int HD, class P>
__device__ void QkvEpilogue(const P& p, const Seqs& sq, bool heads, unsigned tag, int i, int m, const float (&g)[2]) {
  using E = Elem<T>;
  constexpr int half = HD / 2;
  const int hh = i / half, j = i % half, b = m / p.S;
  float x0 = E::ToF(E::FromF(g[0])), x1 = E::ToF(E::FromF(g[1]));
  const int64_t pos = sq.pos[b] + m % p.S;
  unsigned long long* tw = p.qkv_t + (static_cast<int64_t>(m) * (p.H + 2 * p.KVH) + hh) * HD + j;
  if (hh < p.H + p.KVH) {  // q, k: rotated (v: the rounded values as they are)
    float sn, cs;
    sincosf(static_cast<float>(pos) * p.inv[j], &sn, &cs);
    const float r0 = x0 * cs - x1 * sn, r1 = x1 * cs + x0 * sn;
    x0 = E::ToF(E::FromF(r0));
    x1 = E::ToF(E::FromF(r1));
  }
  if (hh < p.H && !heads) {
    float* q = p.q + static_cast<int64_t>(m) * p.H * HD + hh * HD + j;
    q[0] = x0;
    q[half] = x1;
    return;
  }
  if (hh >= p.H && !sq.valid[b]) return;
  if (hh >= p.H) {
    const bool is_k = hh < p.H + p.KVH;
    const int64_t dst = ((static_cast<int64_t>(b) * p.max_seq + pos) * p.KVH + (hh - p.H - (is_k ? 0 : p.KVH))) * HD + j;
    T* cache = static_cast<T*>(is_k ? p.k : p.v);
    cache[dst] = E::FromF(x0);
    cache[dst + half] = E::FromF(x1);
  }
  if (heads) {
    StoreTagged(tw, x0, tag);
    StoreTagged(tw + half, x1, tag);
  }
}

// Phase 3's prologue: act [R][H * HD] = every head's attention output, its splits' partials merged
// (a thread per 4 columns folds the splits in with a running maximum) and rounded to T.
template <class T, int HD, class P>
__device__ void MergeHeads(const P& p, const Seqs& sq, int splits, float* act) {
  using E = Elem<T>;
  constexpr int COLS = HD / 4;
  for (int i = threadIdx.x; i < p.R * p.H * COLS; i += kThreads) {
    const int c = i % COLS, bh = i / COLS, bt = bh / p.H;
    const int64_t base = static_cast<int64_t>(bh) * p.max_splits;
    float M = -INFINITY, ls = 0.f;
    float4 s4 = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < splits; s0 += 8) {  // 8 splits' loads in flight together
      float2 x[8];
      float4 y[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (s0 + u < splits) {
          x[u] = __ldcg(p.ml + base + s0 + u);
          y[u] = __ldcg(reinterpret_cast<const float4*>(p.part + (base + s0 + u) * HD) + c);
        }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (s0 + u >= splits) break;
        FoldPartial(x[u], y[u], M, ls, s4);
      }
    }
    const float inv = sq.valid[bt / p.S] ? 1.f / ls : __int_as_float(0x7fc00000);
    float* o = act + bh * HD + c * 4;  // bh * HD = bt * (H * HD) + head * HD
    o[0] = E::ToF(E::FromF(s4.x * inv));
    o[1] = E::ToF(E::FromF(s4.y * inv));
    o[2] = E::ToF(E::FromF(s4.z * inv));
    o[3] = E::ToF(E::FromF(s4.w * inv));
  }
  __syncthreads();
}

// The kernel's shared state: the activation rows (attention: its merge area), the gammas, the sequences.
struct Shared {
  float* act;
  float *gamma1, *gamma2;  // attn_norm, mlp_norm (loaded at the start with x)
  Seqs* sq;
  unsigned epoch;  // this launch's number (the grow-only barrier's targets; the tagged words' tag is epoch + 1)
  float* x1;       // x1's rows [R][D] (phase 5's residual), kept from phase 4
};

// The phases' bits in Params::phases (decode_layer_check's breakdown; every bit set otherwise).
constexpr int64_t kPrefetchMinRows = 257;  // shorter attended lengths: no L2 prefetches (see the kernel)
enum { kPhase1 = 1, kPhase2 = 2, kPhase3 = 4, kPhase4 = 8, kPhase5 = 16, kPhaseBarriers = 32, kPrefetch = 64, kAllPhases = 127 };

// Grid barrier k (Arrive, then between(), then Await), stamped with trace point `trace` once passed.
template <class Between>
__device__ __forceinline__ void Barrier(const Params& p, const Shared& sh, int k, int trace, Between between) {
  if (p.phases & kPhaseBarriers) {
    const Ticket t = Arrive(p, k);
    between();
    Await(p, t, sh.epoch, k);
  } else {
    between();
  }
  Trace(p, trace);
}

// Barrier k's arrival, counted only (no fence): for a barrier that no block waits for, whose data
// travels as tagged words, so that the grow-only count still reaches the later barriers' targets.
__device__ __forceinline__ void ArriveUncontended(const Params& p, int k) {
  if ((p.phases & kPhaseBarriers) && p.barrier == kBarrierGrowOnly && threadIdx.x == BarrierThread(k))
    asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(p.bar + 64) : "memory");
}

// A thread's elements i0 + u * kThreads (u < 8) as raw loads, all issued before any is converted: a
// value selected or converted as its load arrives makes the warp wait for each load in turn (16-bit x
// and gammas: 2.8 us instead of 1.4 on an H200). at(i): the element's address, a valid one also past n.
template <class T, class At>
struct RawBatch {
  T raw[8];
  __device__ __forceinline__ RawBatch(int i0, At at) {
#pragma unroll
    for (int u = 0; u < 8; ++u) raw[u] = *at(i0 + u * kThreads);
  }
  // dst(i, element i as float32) for the batch's elements below n.
  template <class Dst>
  __device__ __forceinline__ void Store(int i0, int n, Dst dst) const {
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (i0 + u * kThreads < n) dst(i0 + u * kThreads, Elem<T>::ToF(raw[u]));
  }
};

// Phase 1's prologue: x's rows and both gammas into shared memory (the first q|k|v weight rows are in
// flight already: the kernel loads them before it waits for the previous one), the position with them.
template <class T, int HD, class P>
__device__ void LoadRows(const P& p, const Shared& sh) {
  const int RD = p.R * p.D, n = RD + 2 * p.D;
  const T* x = static_cast<const T*>(p.x);
  const T* g1 = static_cast<const T*>(p.attn_norm);
  const T* g2 = static_cast<const T*>(p.mlp_norm);
  // Element i's address (x, then gamma1, then gamma2); past n, x's first (loaded, never stored).
  auto at = [&](int i) { return i >= n ? x : i < RD ? x + i : i < RD + p.D ? g1 + (i - RD) : g2 + (i - RD - p.D); };
  auto dst = [&](int i, float v) {
    if (i < RD) sh.act[i] = v;
    else sh.gamma1[i - RD] = v;  // then gamma2, which follows gamma1
  };
  const RawBatch<T, decltype(at)> first(threadIdx.x, at);
  const int64_t pos = PosOf(p);  // after x's loads: its type's branch waits for the kernel parameter
  first.Store(threadIdx.x, n, dst);
#pragma unroll 1
  for (int i0 = threadIdx.x + 8 * kThreads; i0 < n; i0 += 8 * kThreads) RawBatch<T, decltype(at)>(i0, at).Store(i0, n, dst);
  SetSeqs(p, pos, sh.sq);
  __syncthreads();
  Trace(p, 1);
}

// decode_layer_check's floor: the launch (and the barriers) alone.
__device__ __forceinline__ void BarriersOnly(const Params& p, const Shared& sh) {
#pragma unroll 1
  for (int k = 0; k < kBarriers; ++k) Barrier(p, sh, k, 14, [] {});
  // the epoch moves only with the barriers' arrivals (else later launches' targets would run ahead of the count)
  if ((p.phases & kPhaseBarriers) && p.barrier == kBarrierGrowOnly && blockIdx.x == 0 && threadIdx.x == 0) p.bar[96] = sh.epoch + 1;
}

// Phases 2 and 3 as Heads units (cuda_decode_layer_heads.cuh): per (row, head, w_o rows) the head's
// attention and its w_o products; then barrier 1, the first gate/up rows loaded while it waits. w0: the
// block's first unit's w_o chunks, loaded before the units poll q.
template <class T, int HD, class P, class GateUp>
__device__ __forceinline__ void HeadsPhases23(const P& p, const Shared& sh, const typename Heads<T, HD>::Wo& w0, float* act,
                                              Pair<T>& pair, GateUp gateup) {
  // The warp's gate/up rows into L2: barrier 1's wait loads the first round's, phase 4 the second's. The
  // second round's prefetch pays at 16 bits only (H200, SmolLM2 at 128 cached rows: float16 13.4 -> 13.1
  // us per layer, float32 13.9 -> 14.0).
  constexpr int kRounds = sizeof(T) == 4 ? 1 : 2;
#pragma unroll 1
  for (int i = FirstItem(); i < FirstItem() + kRounds * static_cast<int>(gridDim.x) * kWarps; i += gridDim.x * kWarps)
    PrefetchItem<Pair<T>>(i, p.I, gateup);
  if (p.phases & kPhase2) Heads<T, HD>::Run(p, *sh.sq, w0, sh.epoch + 1, act);
  Trace(p, 6);  // the trace's points 6-8 (barrier 1, merge, w_o) all read "done" here
  Trace(p, 7);
  Trace(p, 8);
  Barrier(p, sh, 1, 9, [&] { LoadItem(pair, FirstItem(), p.I, gateup); });
  // barrier 2's arrival, after barrier 1 was passed (grow-only barriers: the skipped barrier's arrivals
  // still count towards the next ones' targets)
  ArriveUncontended(p, 2);
}

// Phases 2 and 3 as split units: attention partials, then (the first w_o rows loaded while barrier 1
// waits; the blocks without attention units prefetch the later phases' rows into L2 meanwhile) every
// block merges the partials and takes w_o rows: x1 = a @ w_o^T + x; then barrier 2, the first gate/up
// rows loaded while it waits.
template <class T, int HD, class P, class GateUp>
__device__ __forceinline__ void SplitPhases23(const P& p, const Shared& sh, const Items<T, HD, P>& it, int splits, bool prefetch,
                                              float* act, Pair<T>& pair, GateUp gateup) {
  using E = Elem<T>;
  const T* x = static_cast<const T*>(p.x);
  auto orow = [&](int i, Single<T>& r) { it.ORow(i, r); };
  Single<T> one, one2;
  if (p.phases & kPhase2) Attn<T, HD>::Run(p, *sh.sq, splits, act);
  Trace(p, 5);
  Barrier(p, sh, 1, 6, [&] {
    LoadItem(one, FirstItem(), p.D, orow);
    if (prefetch) it.PrefetchLater(min(Attn<T, HD>::Units(p, splits), static_cast<int>(gridDim.x)));
  });
  if (p.phases & kPhase3) {
    MergeHeads<T, HD>(p, *sh.sq, splits, act);
    Trace(p, 7);
    ItemLoop<false>(
        one, one2, false, p.D, act, nullptr, 0.f, p.R, orow, [&](int n, int m) { return E::ToF(x[m * p.D + n]); },
        [&](int n, int m, const float(&g)[1], float res) { p.x1[m * p.D + n] = E::ToF(E::FromF(g[0] + res)); });
  }
  Trace(p, 8);
  Barrier(p, sh, 2, 9, [&] { LoadItem(pair, FirstItem(), p.I, gateup); });
}

// Phases 4 and 5 (the MLP): h = silu(rmsnorm(x1) @ w_gate^T) * (rmsnorm(x1) @ w_up^T), then
// y = h @ w_down^T + x1. pair: the first gate/up rows, loaded during the barrier before (pair2: the
// second's registers); heads: x1 is summed from the Heads units' products (else loaded from the workspace).
template <class T, int HD, class P, class GateUp, class Down>
__device__ __forceinline__ void MlpPhases(const P& p, const Shared& sh, bool heads, float* act, Pair<T>& pair, Pair<T>& pair2,
                                          GateUp gateup, Down down) {
  using E = Elem<T>;
  const unsigned tag = sh.epoch + 1;  // the tagged words of this launch
  auto none = [](int, int) { return 0.f; };
  // 4: h = silu(rmsnorm(x1) @ w_gate^T) * (rmsnorm(x1) @ w_up^T)
  if (p.phases & kPhase4) {
    // The warp's w_down row into L2, so that phase 5's loads of it return fast: they are in flight while
    // the block polls h's words, and the polls' replies queue behind them (H200, SmolLM2's layer at 128
    // cached rows: float32 14.8 -> 13.6 us).
    PrefetchItem<Single<T>>(FirstItem(), p.D, down);
    if (heads) {
      SumHeads<T>(p, act, sh.x1);  // its L2 reads first: the second round's rows are not needed before the first's
      LoadItem(pair2, FirstItem() + gridDim.x * kWarps, p.I, gateup);
    } else {
      LoadItem(pair2, FirstItem() + gridDim.x * kWarps, p.I, gateup);  // the second round's rows, while x1 loads
      BlockLoad([&](int i) { return __ldcg(p.x1 + i); }, p.R * p.D, [&](int i, float v) { act[i] = sh.x1[i] = v; });
      __syncthreads();
    }
    Trace(p, 10);
    ItemLoop<true>(pair, pair2, true, p.I, act, sh.gamma2, p.eps, p.R, gateup, none,
                   [&](int n, int m, const float(&g)[2], float) { StoreTagged(p.h + m * p.I + n, E::ToF(E::FromF(Silu(g[0]) * g[1])), tag); });
  }
  Trace(p, 11);
  Single<T> one, one2;
  // Barrier 3: none with the grow-only barrier (h's words carry the tag, phase 5 polls them); the
  // generation barrier (no epoch: the tag is always 1) keeps it.
  if (p.barrier == kBarrierGrowOnly) {
    ArriveUncontended(p, 3);
    LoadItem(one, FirstItem(), p.D, down);
    __syncthreads();  // the block's phase-4 reads of act are done before phase 5 overwrites it
    Trace(p, 12);
  } else {
    Barrier(p, sh, 3, 12, [&] { LoadItem(one, FirstItem(), p.D, down); });
  }
  // 5: y = h @ w_down^T + x1
  if (p.phases & kPhase5) {
    BlockLoadTagged(p.h, p.R * p.I, tag, [&](int i, float v) { act[i] = v; });
    __syncthreads();
    Trace(p, 13);
    ItemLoop<false>(
        one, one2, false, p.D, act, nullptr, 0.f, p.R, down, [&](int n, int m) { return sh.x1[m * p.D + n]; },
        [&](int n, int m, const float(&g)[1], float res) { static_cast<T*>(p.y)[m * p.D + n] = E::FromF(g[0] + res); });
  }
}

}  // namespace dl
