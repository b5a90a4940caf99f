// The DecodeLayer megakernel's pieces: one persistent cooperative launch per decoder layer
// (cuda_decode_layer.cu has the kernel and its launch, cuda_decode_layer_phases.cuh its phases,
// cuda_decode_layer_attn.cuh the attention). Grid = one block per SM, all co-resident (cooperative
// launch), launched as a programmatic dependent launch where the GPU has it: a block starts as soon as
// the previous layer's block on its SM ends, loads its first weight rows and waits there for that layer
// (0.5 us between layers instead of 1.4 on an H200); five phases, each waiting for the one before: after
// phases 1-3 through a grid barrier, phase 5 by polling phase 4's output h, whose words carry the
// launch's tag (StoreTagged). With short caches phases 2 and 3 are one (Heads units), which poll phase
// 1's q and new K/V rows as tagged words: one grid barrier in all.
//   1. every block loads x's rows and both gammas into shared memory (redundantly: a few KB); warps take
//      pairs of q|k|v weight rows (j, j + hd/2 of one head, so RoPE is the epilogue) grid-wide; q is
//      rotated into the workspace, k rotated and v written into the caches at row kv_pos[b] + t.
//   2. attention split-K: a unit = (query row, KV head, group of <= kGmax query heads, split of the
//      attended rows); a block per unit, lanes over head_dim, an online softmax per lane slot, the
//      warps merged through shared memory into one (m, l, acc) partial per head in the workspace.
//   3. every block merges all heads' partials into the attention output a (rounded to T) in shared
//      memory, then warps take rows of w_o: x1 = a @ w_o^T + x (rounded to T) into the workspace.
//   4. every block loads x1; warps take (gate, up) row pairs: h = silu(g) * u into the workspace, as
//      tagged words.
//   5. every block loads h, each word once it carries the tag; warps take rows of w_down:
//      y = h @ w_down^T + x1.
// The RMSNorms are folded into the products (Rows::Products). Rounding to T happens exactly where the five-op
// composition rounds (q, k, v; rotated q and k; a; x1; h; y), accumulation in float32, so the result
// equals the composition within float rounding. Latency, not bytes, is the cost (a layer's weights are
// ~7 MB at 16 bits): each phase's first weight rows are loaded into registers between the arrival at the
// barrier that precedes it and its wait (so the wait overlaps the loads), the blocks without attention
// work prefetch the later phases' rows into L2 while the others attend (issued on the critical path, the
// prefetches cost more than they saved; with short caches, <= 256 rows, they cost more than they save
// anyway and are skipped), and loops stay rolled where unrolling buys nothing (the kernel's
// code is ~100 KB per instantiation).
#pragma once
#include "cuda_common.cuh"

namespace dl {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxRows = 16;  // R = B * S rows at most (one block holds them all)
constexpr int kGmax = 2;      // query heads of one KV head per attention unit (more: more registers and code per unit)
constexpr int kRT = 4;        // cache rows per lane slot and attention tile
constexpr int kMaxSplits = 16;  // attention splits per (row, head) at most: phase 3 merges them in two batches of loads
constexpr int kTracePoints = 15;  // Params::trace: globaltimer stamps per block

struct Params {
  const void *x, *attn_norm, *w_q, *w_k, *w_v, *w_o, *mlp_norm, *w_gate, *w_up, *w_down;
  void *k, *v, *y;  // the caches (written in place) and the output
  MnPos pos;
  int B, S, R, D, H, KVH, I;
  int64_t max_seq;
  float eps, qscale;
  int max_splits;      // the workspace's partials per head
  int min_split_rows;  // a split covers at least this many cache rows
  int act_floats;      // shared memory: act rows (or the attention merge area), then the two gammas, then x1 [R][D]
  int barrier;         // which grid barrier (Arrive/Await: kBarrierGrowOnly or kBarrierGeneration)
  int heads_max_rows;  // attended lengths up to this take phases 2-3 as Heads units (cuda_decode_layer_heads.cuh)
  int heads_groups;    // Heads units per (row, head): w_o row groups, max(1, blocks / (R * H))
  int heads_group_rows;  // w_o rows per group, ceil(D / heads_groups)
  float heads_inv_groups;  // 1 / heads_groups: a unit's row and head, a K/V prefetch's share, without a division
  unsigned* bar;       // generation barrier: [0] arrivals, [32] generation; grow-only: [64] arrivals, [96] epoch
  float *q, *part, *x1;
  unsigned long long* h;  // phase 4's output [R][I] as tagged words (StoreTagged)
  unsigned long long* qkv_t;  // Heads: phase 1's rows as tagged words [R][H + 2 KVH][head_dim] (q heads, k, v)
  float* opart;  // Heads: the heads' w_o products [R][H][D]
  float2* ml;
  unsigned long long* trace;  // nullptr, or [blocks][kTracePoints] stamps (decode_layer_check's phase breakdown)
  int phases;                 // which phases run (bits kPhase1.. in cuda_decode_layer.cu; all of them but in timing breakdowns)
  float inv[64];  // rope frequencies (head_dim / 2)
};

// Params with the model's dims fixed at compile time: the kernel and the functions that read the dims
// are templates on their Params type and read p.D, p.H, ... as constants here (static members hide the
// base's fields, which hold the same values), so the index arithmetic folds: divisions by H, KVH or S,
// loop bounds, row strides. On an H200 that took ~1 us off SmolLM2-135M's layer (fp16 16.8 -> 15.8 us
// at 128 cached). One instantiation per listed shape and element type (~100 KB of code each); other
// shapes read Params.
template <int kD, int kH, int kKVH, int kI, int kB, int kS>
struct FixedParams : Params {
  static constexpr int D = kD, H = kH, KVH = kKVH, I = kI, B = kB, S = kS, R = kB * kS;
  static bool Matches(int64_t d, int64_t h, int64_t kvh, int64_t i, int64_t b, int64_t s) {
    return d == D && h == H && kvh == KVH && i == I && b == B && s == S;
  }
};
using SmolLM2Batch1 = FixedParams<576, 9, 3, 1536, 1, 1>;  // SmolLM2-135M's decode step at batch 1 (head_dim 64)

__device__ __forceinline__ void Trace(const Params& p, int k) {
  if (p.trace != nullptr && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    p.trace[blockIdx.x * kTracePoints + k] = t;
  }
}

// dst(i, src(i)), i < n: batches of 8 loads per thread in flight together (one round trip per batch).
template <class Src, class Dst>
__device__ void BlockLoad(Src src, int n, Dst dst) {
#pragma unroll 1
  for (int i0 = threadIdx.x; i0 < n; i0 += kThreads * 8) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = i0 + u * kThreads < n ? src(i0 + u * kThreads) : 0.f;
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (i0 + u * kThreads < n) dst(i0 + u * kThreads, v[u]);
  }
}

// Tagged words: a float32 value and this launch's tag in one 8-byte word, stored and loaded as a single
// access (an aligned 64-bit relaxed access is single-copy atomic), so a reader that sees the tag sees the
// value: the data is its own flag, and a phase that waits for another block's values polls them instead
// of a grid barrier (no fence before an arrival, no round trip for the flag, then another for the data).
// The tag is the launch's epoch + 1: 0 (a zeroed workspace) only after 2^32 launches, by which time every
// word has been rewritten; different from the tags of the op's last 2^32 - 1 launches (the epoch grows
// by one per launch, and every word is rewritten each launch).
__device__ __forceinline__ void StoreTagged(unsigned long long* a, float v, unsigned tag) {
  const unsigned long long w = (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(a), "l"(w));
}
__device__ __forceinline__ unsigned long long LoadTagged(const unsigned long long* a) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(a) : "memory");
  return w;
}

// A tagged word's value, and whether it carries `tag`.
__device__ __forceinline__ float TaggedValue(unsigned long long w) { return __uint_as_float(static_cast<unsigned>(w)); }
__device__ __forceinline__ bool HasTag(unsigned long long w, unsigned tag) { return static_cast<unsigned>(w >> 32) == tag; }

// The value of the word at a, once it carries `tag`: w is its first load (issued earlier), re-polled
// until it does.
__device__ __forceinline__ float AwaitTagged(const unsigned long long* a, unsigned long long w, unsigned tag) {
  while (!HasTag(w, tag)) w = LoadTagged(a);
  return TaggedValue(w);
}

// Waits until every word w[i] with want(i) carries `tag` (at(i): its address; w: its first loads, issued
// together). Each pass re-polls all the pending words at once: one round trip per pass, where awaiting
// them one by one costs a round trip per word loaded before it was written (H200: 27 words per thread
// took ~6 us one by one).
template <int N, class At, class Want>
__device__ __forceinline__ void AwaitTaggedAll(unsigned long long (&w)[N], unsigned tag, At at, Want want) {
  for (;;) {
    bool pending = false;
#pragma unroll
    for (int i = 0; i < N; ++i) pending |= want(i) && !HasTag(w[i], tag);
    if (!pending) return;
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (want(i) && !HasTag(w[i], tag)) w[i] = LoadTagged(at(i));
  }
}

// dst(i, value i) for i < n once word i carries `tag`: 8 words per thread in flight, awaited together.
template <class Dst>
__device__ void BlockLoadTagged(const unsigned long long* src, int n, unsigned tag, Dst dst) {
#pragma unroll 1
  for (int i0 = threadIdx.x; i0 < n; i0 += kThreads * 8) {
    unsigned long long w[8];
    auto at = [&](int u) { return src + min(i0 + u * kThreads, n - 1); };
#pragma unroll
    for (int u = 0; u < 8; ++u) w[u] = LoadTagged(at(u));
    AwaitTaggedAll(w, tag, at, [&](int u) { return i0 + u * kThreads < n; });
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (i0 + u * kThreads < n) dst(i0 + u * kThreads, TaggedValue(w[u]));
  }
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

constexpr int kBarriers = 4;  // grid barriers per launch (arrived at by every block; awaited only where a phase needs them)
enum { kBarrierGeneration = 0, kBarrierGrowOnly = 2 };  // Params::barrier

// The thread that arrives at and polls barrier k. After barriers 1 and 3 come w_o and w_down (D items:
// the last warps load no weight rows while those barriers wait), and a poll issued behind the thread's
// own weight loads returned late: those two take the last warp's first lane, the others thread 0
// (barrier 2 is followed by gate/up, whose rows every warp loads).
__device__ __forceinline__ int BarrierThread(int k) { return (k & 1) ? kThreads - 32 : 0; }

// Grid barriers, valid only because the launch is cooperative (every block resident); nothing needs
// resetting between launches or CUDA-graph replays. kBarrierGrowOnly (the default): a count that only grows
// (arrivals are fire-and-forget reductions) and an epoch per launch, read at the start and advanced by
// block 0 at the end: barrier k of launch e is passed when the count reaches (e * kBarriers + k + 1) *
// blocks (modulo 2^32; one round trip, the poll's). kBarrierGeneration: an arrival count that the last block resets and a
// generation it advances (two round trips: the arrival's atomic, then the poll).
// A barrier is split in two: Arrive (the block's writes released, its arrival counted) and Await. Work
// that the next phase does not need from other blocks (loading its weight rows, L2 prefetches) goes in
// between, so it overlaps the wait instead of preceding the arrival.
struct Ticket {
  unsigned gen;  // kBarrierGeneration: the generation at the arrival (BarrierThread(k))
  bool last;     // kBarrierGeneration: this block arrived last (it advanced the generation)
};

__device__ __forceinline__ Ticket Arrive(const Params& p, int k) {
  Ticket t{0u, false};
  __syncthreads();
  if (threadIdx.x == BarrierThread(k)) {
    if (p.barrier == kBarrierGrowOnly) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.bar + 64) : "memory");
    } else {
      unsigned* count = p.bar;
      unsigned* gen = p.bar + 32;
      unsigned old;
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(t.gen) : "l"(gen) : "memory");
      __threadfence();  // the block's writes (ordered before this thread by the __syncthreads) before the arrival
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(count) : "memory");
      t.last = old == gridDim.x - 1;
      if (t.last) {
        asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(count), "r"(0u) : "memory");
        asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(gen), "r"(t.gen + 1) : "memory");
      }
    }
  }
  return t;
}

// Barrier k of the launch numbered `epoch`: returns once every block has arrived.
__device__ __forceinline__ void Await(const Params& p, Ticket t, unsigned epoch, int k) {
  if (threadIdx.x == BarrierThread(k)) {
    unsigned cur;
    if (p.barrier == kBarrierGrowOnly) {
      const unsigned target = (epoch * kBarriers + k + 1) * gridDim.x;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(cur) : "l"(p.bar + 64) : "memory");
      } while (static_cast<int>(cur - target) < 0);
    } else if (!t.last) {
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(cur) : "l"(p.bar + 32) : "memory");
      } while (cur == t.gen);
    }
  }
  __syncthreads();
}

// The sequences' positions and whether each is valid (0 <= kv_pos <= max_seq - S), in shared memory.
struct Seqs {
  int64_t pos[kMaxRows];
  bool valid[kMaxRows];
};

// Thread b's sequence position (loaded early: SetSeqs stores it once other loads are in flight).
template <class P>
__device__ __forceinline__ int64_t PosOf(const P& p) { return threadIdx.x < p.B ? LoadPos(p.pos, threadIdx.x) : 0; }

// Before a __syncthreads that publishes it.
template <class P>
__device__ __forceinline__ void SetSeqs(const P& p, int64_t v, Seqs* s) {
  if (threadIdx.x < p.B) {
    const bool ok = v >= 0 && v <= p.max_seq - p.S;
    s->valid[threadIdx.x] = ok;
    s->pos[threadIdx.x] = ok ? v : 0;
  }
}

// The longest attended length (cache rows up to and including the last new row) of the valid sequences.
template <class P>
__device__ int64_t AttendedRows(const P& p, const Seqs& sq) {
  int64_t L = 1;
#pragma unroll 1
  for (int b = 0; b < p.B; ++b)
    if (sq.valid[b]) L = max(L, sq.pos[b] + p.S);
  return L;
}

// Attention splits per (row, head), from the longest attended length (every thread computes the same).
__device__ int Splits(const Params& p, int64_t L) {
  const int64_t want = (L + p.min_split_rows - 1) / p.min_split_rows;
  return static_cast<int>(want < 1 ? 1 : want > p.max_splits ? p.max_splits : want);
}

// NR weight rows of K elements (16-byte chunks), the first HOLD chunks per lane held in registers.
template <class T, int NR, int HOLD>
struct Rows {
  static constexpr int EPC = Elem<T>::EPC, kRows = NR;
  const uint4* w[NR];
  uint4 held[NR][HOLD];
  int chunks;

  __device__ void Load(int lane) {
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int j = 0; j < HOLD; ++j)
        if (lane + 32 * j < chunks) held[r][j] = __ldg(w[r] + lane + 32 * j);
  }
  __device__ void Prefetch(int lane) const {  // the rows' 128-byte lines into L2
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll 1
      for (int c = lane * 8; c < chunks; c += 32 * 8) PrefetchL2(w[r] + c);
  }
  // The chunk's act values as float32, times gamma with NORM; with NORM also adds their squares to ss.
  template <bool NORM>
  __device__ static void Act(const float* x, const float* g, float (&v)[EPC], float& ss) {
#pragma unroll
    for (int q = 0; q < EPC / 4; ++q) {
      float4 a = reinterpret_cast<const float4*>(x)[q];
      if (NORM) {
        ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        const float4 gv = reinterpret_cast<const float4*>(g)[q];
        a = make_float4(a.x * gv.x, a.y * gv.y, a.z * gv.z, a.w * gv.w);
      }
      v[4 * q] = a.x, v[4 * q + 1] = a.y, v[4 * q + 2] = a.z, v[4 * q + 3] = a.w;
    }
  }
  // acc += dot(the chunk's weights, v).
  __device__ static void Dot(const uint4& u, const float (&v)[EPC], float& acc) {
    float f[EPC];
    Elem<T>::Unpack(u, f);
#pragma unroll
    for (int e = 0; e < EPC; ++e) acc = fmaf(f[e], v[e], acc);
  }
  // out[r] (every lane) = dot(weight row r, act row m); act rows of stride K. NORM: the RMSNorm folded in,
  // dot(w, act * gamma) * rsqrt(mean(act^2) + eps), the squares summed from the same loads: the same
  // float32 quantities as the unfused kernels' x * rsqrt(...) * gamma, in another order, and no block-wide
  // normalisation pass (nor its latency) between the act rows' loads and the products. Every warp sums a
  // row's squares in the same order (the lanes' chunks are the same for every item): one rms per row.
  template <bool NORM>
  __device__ void Products(const float* act, const float* gamma, float eps, int m, int lane, float (&out)[NR]) const {
    float acc[NR], ss = 0.f, v[EPC];
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[r] = 0.f;
    const float* xr = act + m * chunks * EPC;
#pragma unroll
    for (int j = 0; j < HOLD; ++j) {
      const int c = lane + 32 * j;
      if (c < chunks) {
        Act<NORM>(xr + c * EPC, gamma + c * EPC, v, ss);
#pragma unroll
        for (int r = 0; r < NR; ++r) Dot(held[r][j], v, acc[r]);
      }
    }
#pragma unroll 1
    for (int c = lane + 32 * HOLD; c < chunks; c += 32) {
      uint4 u[NR];
#pragma unroll
      for (int r = 0; r < NR; ++r) u[r] = __ldg(w[r] + c);
      Act<NORM>(xr + c * EPC, gamma + c * EPC, v, ss);
#pragma unroll
      for (int r = 0; r < NR; ++r) Dot(u[r], v, acc[r]);
    }
    // 1 / rms as one reciprocal square root (<= 2 ulp) and products: IEEE sqrt and two divisions were a
    // chain of ~20 dependent instructions at the end of every normalised item.
    const float inv_rms = NORM ? rsqrtf(WarpSum(ss) * (1.f / static_cast<float>(chunks * EPC)) + eps) : 1.f;
#pragma unroll
    for (int r = 0; r < NR; ++r) out[r] = WarpSum(acc[r]) * inv_rms;
  }
};
// Chunks held per lane: for a 576-wide SmolLM2 row, 5 (float32) or 3 (16-bit) chunks; for its 1536-wide
// w_down rows 12 or 6. More would cost registers the attention phase needs (and spill).
template <class T>
using Pair = Rows<T, 2, 24 / Elem<T>::EPC>;  // two rows (q|k|v rope pairs, gate/up): 6 (float32) or 3 chunks each
template <class T>
using Single = Rows<T, 1, 48 / Elem<T>::EPC>;  // one row (w_o, w_down): 12 or 6 chunks

// The warp's items of a phase: item i = warp * blocks + block + j * (blocks * warps), j = 0, 1, ...
__device__ __forceinline__ int FirstItem() { return (threadIdx.x >> 5) * gridDim.x + blockIdx.x; }

// Sets up and loads the warp's item `i` (nothing when i >= items).
template <class R, class Setup>
__device__ __forceinline__ void LoadItem(R& rows, int i, int items, Setup setup) {
  if (i < items) {
    setup(i, rows);
    rows.Load(threadIdx.x & 31);
  }
}

// Sets up the warp's item `i` and prefetches its rows into L2 (nothing when i >= items).
template <class R, class Setup>
__device__ __forceinline__ void PrefetchItem(int i, int items, Setup setup) {
  if (i < items) {
    R rows;
    setup(i, rows);
    rows.Prefetch(threadIdx.x & 31);
  }
}

// A grid-wide loop over `items` weight-row items: item i set up by setup(i, rows), its products with
// every act row computed (NORM: act * gamma, divided by the row's rms), and epi(i, m, out, pre(i, m))
// called by lane 0 for row m (pre: the epilogue's global load, issued before the products). `cur` holds
// the warp's first item (loaded before the barrier that precedes the phase); each next item is loaded
// into `nxt` before the current one's products (already, when nxt_loaded), so its latency overlaps them.
template <bool NORM, class R, class Setup, class Pre, class Epi>
__device__ void ItemLoop(R& cur, R& nxt, bool nxt_loaded, int items, const float* act, const float* gamma, float eps, int rows, Setup setup,
                         Pre pre, Epi epi) {
  const int lane = threadIdx.x & 31;
  const int tw = gridDim.x * kWarps;
#pragma unroll 1
  for (int i = FirstItem(); i < items; i += tw, nxt_loaded = false) {
    const bool more = i + tw < items;
    if (more && !nxt_loaded) LoadItem(nxt, i + tw, items, setup);
#pragma unroll 1
    for (int m = 0; m < rows; ++m) {
      const float extra = lane == 0 ? pre(i, m) : 0.f;
      float out[R::kRows];
      cur.template Products<NORM>(act, gamma, eps, m, lane, out);
      if (lane == 0) epi(i, m, out, extra);
    }
    if (more) cur = nxt;
  }
}

// L2 prefetch of a phase's weight rows by the blocks from `first_idle` on (those without attention work:
// they wait at barrier 1 while the others attend); item i goes to the idle blocks' warps round-robin.
template <class R, class Setup>
__device__ void PrefetchItems(int items, int first_idle, Setup setup) {
  const int idle = static_cast<int>(gridDim.x) - first_idle;
  if (static_cast<int>(blockIdx.x) < first_idle) return;
#pragma unroll 1
  for (int i = (threadIdx.x >> 5) * idle + static_cast<int>(blockIdx.x) - first_idle; i < items; i += idle * kWarps)
    PrefetchItem<R>(i, items, setup);
}

}  // namespace dl
