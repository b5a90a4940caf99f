// The DecodeLayer megakernel's phases 2 and 3 for short caches (included by cuda_decode_layer.cu after
// cuda_decode_layer_attn.cuh). A unit = (query row, query head, group of w_o rows): its block attends
// over the head's whole cache (no split: nothing to merge across blocks), rounds the head's output to T
// as phase 3's merge does, and multiplies it by the head's columns of w_o for the group's rows; the
// products go to the workspace per head, and phase 4 sums them over the heads (in head order, every
// block the same) into x1 = x + a @ w_o^T. That takes one grid barrier and the partials' merge pass
// off the layer (attention | merge + w_o | barrier becomes attention + w_o | barrier), and every block
// works in the attention instead of one per (KV head, split). A unit also needs no grid barrier before
// it: it polls q and the new K/V rows, which phase 1 writes as tagged words. The price: the blocks of a
// head's groups each read that head's cache rows (from L2), so it pays only while the caches are short:
// Params::heads_max_rows, chosen per element type on the host from the harness's timings.
#pragma once
#include "cuda_decode_layer_attn.cuh"

namespace dl {

// A Heads unit's shared memory: the attention's merge area, then (from here) q and this launch's K and V
// rows of the sequence, HD * (1 + 2 * S) floats (Heads::Attend).
template <int HD>
__host__ __device__ constexpr int HeadsStageAt() {
  return (kWarps * kGmax * (HD + 2) + 3) / 4 * 4;
}

template <class T, int HD>
struct Heads {
  using A = Attn<T, HD>;
  using E = Elem<T>;
  static constexpr int EPC = A::EPC, C16 = A::C16, LPR = A::LPR, RS = A::RS;
  static constexpr int kHold = 4;  // w_o chunks per lane loaded before the attention (rows kWarps * RS * kHold)

  struct Unit {
    int bt, h, first, end;  // row bt, query head h, w_o rows [first, end)
  };

  // Unit u = (row * H + head) * groups + g: a head's groups on adjacent blocks. The groups' sizes come
  // from the host and u / groups is taken through the host's reciprocal (exact: u + 0.5 lies at least
  // 0.5 / groups from a multiple of groups, float32's error on u < 2^16 is far below that), so locating a
  // unit, which runs before phase 1, divides by nothing at run time.
  template <class P>
  __device__ static int Units(const P& p) { return p.R * p.H * p.heads_groups; }
  // (u / groups, u % groups): unit u's row-and-head index and its group.
  template <class P>
  __device__ static int2 RowHeadAndGroup(const P& p, int u) {
    const int rh = static_cast<int>((static_cast<float>(u) + 0.5f) * p.heads_inv_groups);
    return make_int2(rh, u - rh * p.heads_groups);
  }
  template <class P>
  __device__ static void Locate(const P& p, int u, Unit* un) {
    const int2 rg = RowHeadAndGroup(p, u);
    const int rh = rg.x, g = rg.y;
    un->bt = rh / p.H;
    un->h = rh % p.H;
    un->first = min(p.D, g * p.heads_group_rows);
    un->end = min(p.D, un->first + p.heads_group_rows);
  }

  // The 16-byte chunk `sl` of head h's columns in w_o's row n.
  template <class P>
  __device__ static const uint4* WoChunk(const P& p, int n, int h, int sl) {
    return reinterpret_cast<const uint4*>(static_cast<const T*>(p.w_o) + static_cast<int64_t>(n) * p.H * HD + h * HD) + sl;
  }
  // The lane's row for its j-th product: the warp's row slots stride over the group's rows.
  __device__ static int RowOf(const Unit& un, int j) {
    const int lane = threadIdx.x & 31;
    return un.first + (threadIdx.x >> 5) * RS + lane / LPR + j * kWarps * RS;
  }

  // The lane's first kHold w_o chunks of the block's first unit (after phase 1, before the unit polls q).
  struct Wo {
    uint4 held[kHold];
  };
  template <class P>
  __device__ static void LoadWo(const P& p, const Unit& un, Wo& w) {
    const int sl = (threadIdx.x & 31) % LPR;
#pragma unroll
    for (int j = 0; j < kHold; ++j)
      if (RowOf(un, j) < un.end) w.held[j] = __ldg(WoChunk(p, RowOf(un, j), un.h, sl));
  }

  // The unit's w_o rows (the head's columns) into L2, before the kernel waits for the previous layer.
  template <class P>
  __device__ static void PrefetchWo(const P& p, const Unit& un) {
    for (int n = un.first + static_cast<int>(threadIdx.x) / LPR; n < un.end; n += kThreads / LPR)
      if ((threadIdx.x % LPR) * sizeof(uint4) % 128 == 0) PrefetchL2(WoChunk(p, n, un.h, threadIdx.x % LPR));
  }

  // The unit's K/V rows of earlier launches into L2 (rows below its sequence's position; the group's
  // share of them), issued before phase 1 so that they arrive while it runs.
  template <class P>
  __device__ static void PrefetchKv(const P& p, const Seqs& sq, const Unit& un) {
    const int b = un.bt / p.S;
    if (!sq.valid[b]) return;
    typename A::Unit au;
    au.b = b;
    au.kvh = un.h / (p.H / p.KVH);
    // ceil(L / groups) through the host's reciprocal (no division; exact below 2^24 rows, and the rows
    // are clamped to [0, L) either way)
    const int L = static_cast<int>(sq.pos[b]), per = static_cast<int>(ceilf(static_cast<float>(L) * p.heads_inv_groups));
    const int g = RowHeadAndGroup(p, static_cast<int>(blockIdx.x)).y;  // the block's unit's group
    au.start = min(L, g * per);
    au.end = min(L, au.start + per);
    A::PrefetchRows(p, au);
  }

  // The head's output for row bt into sm[0, HD) (rounded to T; NaN for an invalid sequence). The rows of
  // earlier launches stream from the caches; q and this launch's K and V rows of the sequence (positions
  // pos .. pos + t) come from phase 1's tagged words, each polled until it carries the launch's tag: no
  // grid barrier between phase 1 and the attention. The block stages those words in shared memory, a
  // word per thread loaded before the first tile's cache rows and awaited after them; this launch's rows
  // are folded in after the cache rows.
  template <class P>
  __device__ static void Attend(const P& p, const Seqs& sq, const Unit& un, unsigned tag, float* sm) {
    const int b = un.bt / p.S, t = un.bt % p.S;
    if (!sq.valid[b]) {
      if (threadIdx.x < HD) sm[threadIdx.x] = __int_as_float(0x7fc00000);
      __syncthreads();
      return;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slot = lane / LPR, sl = lane % LPR;
    typename A::Unit au;
    au.bt = un.bt;
    au.b = b;
    au.kvh = un.h / (p.H / p.KVH);
    au.h0 = un.h;
    au.ng = 1;
    au.split = 0;
    au.start = 0;
    au.end = static_cast<int>(sq.pos[b]);  // the cache rows of earlier launches
    // Staged word i: q[i] for i < HD, then row r's K (HD words), then its V, r = 0 .. t.
    const int width = (p.H + 2 * p.KVH) * HD, words = HD + 2 * HD * (t + 1);
    auto word_at = [&](int i) {
      if (i < HD) return p.qkv_t + static_cast<int64_t>(un.bt) * width + un.h * HD + i;
      const int r = (i - HD) / (2 * HD), c = (i - HD) % (2 * HD);
      return p.qkv_t + static_cast<int64_t>(un.bt - t + r) * width + (p.H + au.kvh + (c < HD ? 0 : p.KVH)) * HD + c % HD;
    };
    float* stage = sm + HeadsStageAt<HD>();
    const unsigned long long first = LoadTagged(word_at(min(static_cast<int>(threadIdx.x), words - 1)));
    typename A::template Lane<1> s;
    A::Empty(s);
    auto ready = [&] {
#pragma unroll 1
      for (int i = threadIdx.x; i < words; i += kThreads) {
        const unsigned long long* at = word_at(i);
        stage[i] = AwaitTagged(at, i == static_cast<int>(threadIdx.x) ? first : LoadTagged(at), tag);
      }
      __syncthreads();
#pragma unroll
      for (int e = 0; e < EPC; ++e) s.q[0][e] = stage[sl * EPC + e];
    };
    const int me = warp * RS + slot;
    // One head: half the registers of a split unit's two, so twice the rows in flight per tile (H200,
    // SmolLM2's layer at 256 rows: 16-bit 14.7 -> 14.5 us; at 128, +0.2). Float32 keeps kRT: with this
    // launch's rows staged, twice would spill.
    constexpr int RT = sizeof(T) == 4 ? kRT : 2 * kRT, kTileRows = kWarps * RS * RT;
    if (au.start < au.end) {
      A::template Tile<RT>(p, au, s, me * RT, sl, ready);
#pragma unroll 1
      for (int t0 = kTileRows; t0 < au.end; t0 += kTileRows) A::template Tile<RT>(p, au, s, t0 + me * RT, sl, [] {});
    } else {
      ready();
    }
    // This launch's rows, a round of kWarps * RS at a time: row r on slot r % (kWarps * RS).
#pragma unroll 1
    for (int r0 = 0; r0 <= t; r0 += kWarps * RS) {
      const int r = r0 + me;
      const float* kr = stage + HD + 2 * HD * min(r, t) + sl * EPC;
      A::template Fold<1>(
          p, s, [&](int, float(&x)[EPC]) {
#pragma unroll
            for (int e = 0; e < EPC; ++e) x[e] = kr[e];
          },
          [&](int, float(&x)[EPC]) {
#pragma unroll
            for (int e = 0; e < EPC; ++e) x[e] = kr[HD + e];
          },
          [&](int) { return r <= t; });
    }
    Trace(p, 4);
    A::MergeSlots(s);
    // Each thread d < HD reads only its own column of the warps' sums, so a[d] may overwrite one of them.
    A::MergeWarps(s, sl, sm, 1, [&](int, int d, float, float l, float acc) { sm[d] = E::ToF(E::FromF(acc * (1.f / l))); });
  }

  // Phases 2 and 3 of the block's units; w0: the first unit's w_o chunks, loaded already.
  template <class P>
  __device__ static void Run(const P& p, const Seqs& sq, const Wo& w0, unsigned tag, float* sm) {
    const int lane = threadIdx.x & 31, sl = lane % LPR;
    const int units = Units(p);
#pragma unroll 1
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      Unit un;
      Locate(p, u, &un);
      Wo w = w0;
      if (u != static_cast<int>(blockIdx.x)) LoadWo(p, un, w);
      Attend(p, sq, un, tag, sm);
      Trace(p, 5);
      float a[EPC];
#pragma unroll
      for (int e = 0; e < EPC; ++e) a[e] = sm[sl * EPC + e];
      float* out = p.opart + (static_cast<int64_t>(un.bt) * p.H + un.h) * p.D;
      // Row j of the lane's slot: its chunk's product with a, summed over the row's LPR lanes. Every lane
      // of the warp takes part while the warp's first row slot is in the group (lanes past the end idle).
      auto product = [&](int j, const uint4& chunk) {
        const int n = RowOf(un, j);
        float d = 0.f;
        if (n < un.end) {
          float f[EPC];
          E::Unpack(chunk, f);
#pragma unroll
          for (int e = 0; e < EPC; ++e) d = fmaf(f[e], a[e], d);
        }
#pragma unroll
        for (int o = LPR / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        if (sl == 0 && n < un.end) out[n] = d;
      };
      const int slot = lane / LPR;
#pragma unroll
      for (int j = 0; j < kHold; ++j)  // unrolled: the held chunks stay in registers
        if (RowOf(un, j) - slot < un.end) product(j, w.held[j]);
#pragma unroll 1
      for (int j = kHold; RowOf(un, j) - slot < un.end; ++j) {
        const int n = min(RowOf(un, j), un.end - 1);  // a valid address for the idle lanes' load
        product(j, __ldg(WoChunk(p, n, un.h, sl)));
      }
      __syncthreads();  // the shared memory is free for the next unit
    }
  }
};

// Phase 4's prologue after Heads: act [R][D] = x1 = x + the heads' products summed in head order (rounded
// to T), and a copy in x1s for phase 5's residual. A thread takes 4 consecutive elements (float4
// loads: the host takes Heads units only where D % 4 == 0), x and up to kHB heads' products in flight
// together (H200: ~1 us, where scalar loads, 27 per thread, took 2).
template <class T, class P>
__device__ void SumHeads(const P& p, float* act, float* x1s) {
  using E = Elem<T>;
  constexpr int kHB = 12;
  const T* x = static_cast<const T*>(p.x);
#pragma unroll 1
  for (int i = threadIdx.x * 4; i < p.R * p.D; i += kThreads * 4) {
    const int m = i / p.D, n = i % p.D;
    T xs[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) xs[e] = x[i + e];
    const float4* part = reinterpret_cast<const float4*>(p.opart + static_cast<int64_t>(m) * p.H * p.D + n);
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
    for (int h0 = 0; h0 < p.H; h0 += kHB) {
      float4 v[kHB];
#pragma unroll
      for (int u = 0; u < kHB; ++u) v[u] = __ldcg(part + static_cast<int64_t>(min(h0 + u, p.H - 1)) * (p.D / 4));
#pragma unroll
      for (int u = 0; u < kHB; ++u) {
        const bool head = h0 + u < p.H;  // + 0 past the last head leaves the sums as they are
        s[0] += head ? v[u].x : 0.f;
        s[1] += head ? v[u].y : 0.f;
        s[2] += head ? v[u].z : 0.f;
        s[3] += head ? v[u].w : 0.f;
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x1 = E::ToF(E::FromF(s[e] + E::ToF(xs[e])));
      act[i + e] = x1;
      x1s[i + e] = x1;
    }
  }
  __syncthreads();
}

}  // namespace dl
