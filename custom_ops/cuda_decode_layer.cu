// DecodeLayer on CUDA (cuda_decode_layer.h): the one-launch kernel (its pieces in
// cuda_decode_layer_kernel.cuh), its workspace and launch, and the five-kernel path for the shapes it
// does not take.
#include "cuda_decode_layer.h"
#include "cuda_decode_layer_attn.cuh"
#include "cuda_decode_layer_heads.cuh"
#include "cuda_decode_layer_kernel.cuh"
#include "cuda_decode_linear.h"

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
// rotated at position kv_pos[b] + t with the Rope kernels' arithmetic and rounded again; q into the
// workspace (float32 holding T values), k and v into the caches (a sequence with an invalid position
// writes nothing: the caches stay as they were, its output is NaN).
template <class T, int HD, class P>
__device__ void QkvEpilogue(const P& p, const Seqs& sq, int i, int m, const float (&g)[2]) {
  using E = Elem<T>;
  constexpr int half = HD / 2;
  const int hh = i / half, j = i % half, b = m / p.S;
  const float x0 = E::ToF(E::FromF(g[0])), x1 = E::ToF(E::FromF(g[1]));
  const int64_t pos = sq.pos[b] + m % p.S;
  if (hh >= p.H + p.KVH) {  // v: the rounded values as they are
    if (!sq.valid[b]) return;
    const int64_t dst = ((static_cast<int64_t>(b) * p.max_seq + pos) * p.KVH + (hh - p.H - p.KVH)) * HD + j;
    static_cast<T*>(p.v)[dst] = E::FromF(x0);
    static_cast<T*>(p.v)[dst + half] = E::FromF(x1);
    return;
  }
  float sn, cs;
  sincosf(static_cast<float>(pos) * p.inv[j], &sn, &cs);
  const float r0 = x0 * cs - x1 * sn, r1 = x1 * cs + x0 * sn;
  if (hh < p.H) {
    float* q = p.q + static_cast<int64_t>(m) * p.H * HD + hh * HD + j;
    q[0] = E::ToF(E::FromF(r0));
    q[half] = E::ToF(E::FromF(r1));
  } else if (sq.valid[b]) {
    const int64_t dst = ((static_cast<int64_t>(b) * p.max_seq + pos) * p.KVH + (hh - p.H)) * HD + j;
    static_cast<T*>(p.k)[dst] = E::FromF(r0);
    static_cast<T*>(p.k)[dst + half] = E::FromF(r1);
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
        const float mn = fmaxf(M, x[u].x);
        const float mu = mn == -INFINITY ? 0.f : mn;
        const float old = exp2f(M - mu), wt = exp2f(x[u].x - mu);
        ls = fmaf(ls, old, x[u].y * wt);
        s4 = make_float4(fmaf(s4.x, old, y[u].x * wt), fmaf(s4.y, old, y[u].y * wt), fmaf(s4.z, old, y[u].z * wt),
                         fmaf(s4.w, old, y[u].w * wt));
        M = mn;
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
  unsigned epoch;  // this launch's number (the grow-only barrier's targets)
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
// block's first unit's w_o chunks, loaded in barrier 0's wait.
template <class T, int HD, class P, class GateUp>
__device__ __forceinline__ void HeadsPhases23(const P& p, const Shared& sh, const typename Heads<T, HD>::Wo& w0, float* act,
                                              Pair<T>& pair, GateUp gateup) {
  if (p.phases & kPhase2) Heads<T, HD>::Run(p, *sh.sq, w0, act);
  Trace(p, 6);  // the trace's points 6-8 (barrier 1, merge, w_o) all read "done" here
  Trace(p, 7);
  Trace(p, 8);
  Barrier(p, sh, 1, 9, [&] { LoadItem(pair, FirstItem(), p.I, gateup); });
  // barrier 2's arrival, after barrier 1 was passed (grow-only barriers: the skipped barrier's arrivals
  // still count towards the next ones' targets)
  if (p.phases & kPhaseBarriers) Arrive(p, 2);
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

// P: Params, or a FixedParams shape (its dims compile-time constants).
template <class T, int HD, class P>
__global__ void __launch_bounds__(kThreads, 1) DecodeLayerKernel(P p) {
  using E = Elem<T>;
  extern __shared__ float4 smem4[];
  __shared__ Seqs sq;
  const Items<T, HD, P> it{p};
  auto qkv = [&](int i, Pair<T>& r) { it.QkvRows(i, r); };
  Pair<T> pair, pair2;
  // Under programmatic dependent launch the first q|k|v weight rows load while the previous kernel (the
  // layer before) drains: weights never depend on it. Everything else waits for it.
  if ((p.phases & (kPhaseBarriers - 1)) != 0) LoadItem(pair, FirstItem(), it.Qkv(), qkv);
  GridDependencyWait();
  GridDependentsRelease();
  Trace(p, 0);
  float* act = reinterpret_cast<float*>(smem4);
  const Shared sh{act, act + p.act_floats, act + p.act_floats + p.D, &sq,
                  p.barrier == kBarrierGrowOnly ? __ldcg(p.bar + 96) : 0u};
  if ((p.phases & (kPhaseBarriers - 1)) == 0) return BarriersOnly(p, sh);
  auto gateup = [&](int i, Pair<T>& r) { it.GateUpRows(i, r); };
  auto down = [&](int i, Single<T>& r) { it.DownRow(i, r); };
  auto none = [](int, int) { return 0.f; };
  // 1: q | k | v (rms-normalised x), rope, cache rows
  LoadRows<T, HD>(p, sh);
  const int64_t attended = AttendedRows(p, sq);
  const int splits = Splits(p, attended);
  // L2 prefetches pay off once the attention phase is long enough to hide them: up to 256 attended rows
  // they cost more than they save (H200, per layer: float32 18.6 -> 17.6-17.8 us without them at 128
  // and 256 cached rows, 16-bit types 0.1-0.2 us; from 512 rows on they gain, or float32 loses <= 0.2).
  // Short caches: phases 2 and 3 as Heads units, one barrier between them and phase 4 (grow-only
  // barriers: the skipped barrier's arrivals still count, the generation barrier has no such count).
  const bool heads = attended <= p.heads_max_rows && p.barrier == kBarrierGrowOnly;
  const bool prefetch = !heads && (p.phases & kPrefetch) && attended >= kPrefetchMinRows;
  if (prefetch) Attn<T, HD>::Prefetch(p, sq, splits);
  if (p.phases & kPhase1)
    ItemLoop<true>(pair, pair2, false, it.Qkv(), act, sh.gamma1, p.eps, p.R, qkv, none,
                   [&](int i, int m, const float(&g)[2], float) { QkvEpilogue<T, HD>(p, sq, i, m, g); });
  Trace(p, 2);
  using HeadUnits = Heads<T, HD>;
  typename HeadUnits::Wo wo;
  typename HeadUnits::Unit hu;
  const bool head_unit = heads && static_cast<int>(blockIdx.x) < HeadUnits::Units(p);
  if (head_unit) HeadUnits::Locate(p, blockIdx.x, &hu);
  Barrier(p, sh, 0, 3, [&] {
    if (!head_unit) return;
    HeadUnits::LoadWo(p, hu, wo);
    if (p.phases & kPrefetch) HeadUnits::PrefetchKv(p, sq, hu);
  });
  if (heads)
    HeadsPhases23<T, HD>(p, sh, wo, act, pair, gateup);
  else
    SplitPhases23<T, HD>(p, sh, it, splits, prefetch, act, pair, gateup);
  // 4: h = silu(rmsnorm(x1) @ w_gate^T) * (rmsnorm(x1) @ w_up^T)
  if (p.phases & kPhase4) {
    if (heads) {
      SumHeads<T>(p, act);  // its L2 reads first: the second round's rows are not needed before the first's
      LoadItem(pair2, FirstItem() + gridDim.x * kWarps, p.I, gateup);
    } else {
      LoadItem(pair2, FirstItem() + gridDim.x * kWarps, p.I, gateup);  // the second round's rows, while x1 loads
      BlockLoad([&](int i) { return __ldcg(p.x1 + i); }, p.R * p.D, [&](int i, float v) { act[i] = v; });
      __syncthreads();
    }
    Trace(p, 10);
    ItemLoop<true>(pair, pair2, true, p.I, act, sh.gamma2, p.eps, p.R, gateup, none,
                   [&](int n, int m, const float(&g)[2], float) { p.h[m * p.I + n] = E::ToF(E::FromF(Silu(g[0]) * g[1])); });
  }
  Trace(p, 11);
  Single<T> one, one2;
  Barrier(p, sh, 3, 12, [&] { LoadItem(one, FirstItem(), p.D, down); });
  // 5: y = h @ w_down^T + x1
  if (p.phases & kPhase5) {
    BlockLoad([&](int i) { return __ldcg(p.h + i); }, p.R * p.I, [&](int i, float v) { act[i] = v; });
    __syncthreads();
    Trace(p, 13);
    ItemLoop<false>(
        one, one2, false, p.D, act, nullptr, 0.f, p.R, down, [&](int n, int m) { return __ldcg(p.x1 + m * p.D + n); },
        [&](int n, int m, const float(&g)[1], float res) { static_cast<T*>(p.y)[m * p.D + n] = E::FromF(g[0] + res); });
  }
  if (p.barrier == kBarrierGrowOnly && blockIdx.x == 0 && threadIdx.x == 0) p.bar[96] = sh.epoch + 1;  // every block read it before barrier 0
  Trace(p, 14);
}

}  // namespace dl

struct MnDecodeLayerState {
  struct Buffer {
    void* stream;
    int device;
    void* ptr;
    size_t bytes;
  };
  std::mutex mu;
  std::vector<Buffer> buffers;
  MnScratch* attn = nullptr;  // the five-kernel path's RopeCachedAttention scratch
  MnScratch* rope = nullptr;
  int path = MN_DECODE_LAYER_AUTO, last = 0;
  int barrier = dl::kBarrierGrowOnly;  // dl::Arrive/Await's kind (the harness compares the generation barrier)
  int phases = 127;          // dl::Params::phases: which phases run (the harness's breakdown; all of them otherwise)
  bool pdl = true;           // programmatic dependent launch where the GPU has it (the harness compares)
  bool fixed_shapes = true;  // the FixedParams instantiations where a call's shape is one (the harness compares)
  int64_t heads_max_rows = -1;  // dl::Params::heads_max_rows; -1: the element type's default (the harness compares)
  unsigned long long* trace = nullptr;  // decode_layer_check's phase stamps (dl::Params::trace)
};

namespace {

constexpr size_t kBarrierBytes = 512;  // the grid barriers' words at the workspace's start

// The workspace of (stream, device), at least `bytes`; a new buffer starts with its barrier words at 0.
int Workspace(MnDecodeLayerState* st, cudaStream_t s, size_t bytes, char** out) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  std::lock_guard<std::mutex> lock(st->mu);
  MnDecodeLayerState::Buffer* b = nullptr;
  for (auto& x : st->buffers)
    if (x.stream == static_cast<void*>(s) && x.device == dev) b = &x;
  if (b == nullptr) {
    st->buffers.push_back({static_cast<void*>(s), dev, nullptr, 0});
    b = &st->buffers.back();
  }
  if (b->bytes < bytes) {
    if (b->ptr != nullptr) {
      if (cudaError_t e = cudaStreamSynchronize(s)) return e;
      cudaFree(b->ptr);
      b->ptr = nullptr;
      b->bytes = 0;
    }
    if (cudaError_t e = cudaMalloc(&b->ptr, bytes)) return e;
    b->bytes = bytes;
    if (cudaError_t e = cudaMemsetAsync(b->ptr, 0, kBarrierBytes, s)) return e;
  }
  *out = static_cast<char*>(b->ptr);
  return 0;
}

size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

int DeviceAttr(cudaDeviceAttr attr) {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess) return 0;
  return v;
}

// Shared memory: the activation rows (or the attention's merge area), then the two norms' gammas.
template <int HD>
int64_t ActFloats(const MnDecodeLayer& a) {
  const int64_t R = a.B * a.S, K = std::max({a.D, a.H * a.head_dim, a.I});
  return (std::max<int64_t>(R * K, int64_t(dl::kWarps) * dl::kGmax * (HD + 2)) + 3) / 4 * 4;
}
template <int HD>
size_t FusedSmem(const MnDecodeLayer& a) {
  return sizeof(float) * (ActFloats<HD>(a) + 2 * a.D);
}

// Whether the one-launch kernel takes this call (see cuda_decode_layer.h).
bool FusedApplies(const MnDecodeLayer& a, size_t esize) {
  const int64_t R = a.B * a.S;
  if (!a.trans_b || (a.head_dim != 64 && a.head_dim != 128) || R < 1 || R > MN_DECODE_LAYER_MAX_ROWS) return false;
  if (a.D > (1 << 20) || a.I > (1 << 20) || a.H * a.head_dim > (1 << 20) || a.head_dim / 2 > 64 || a.max_seq > (1 << 30)) return false;
  if ((a.D * esize) % 16 || (a.I * esize) % 16) return false;
  const void* ptrs[] = {a.w_q, a.w_k, a.w_v, a.w_o, a.w_gate, a.w_up, a.w_down, a.k_out, a.v_out};
  for (const void* q : ptrs)
    if (reinterpret_cast<uintptr_t>(q) % 16) return false;
  const size_t smem = a.head_dim == 64 ? FusedSmem<64>(a) : FusedSmem<128>(a);
  if (smem + 1024 > static_cast<size_t>(DeviceAttr(cudaDevAttrMaxSharedMemoryPerBlockOptin))) return false;
  return DeviceAttr(cudaDevAttrCooperativeLaunch) != 0;
}

// Raises the kernel's dynamic shared memory limit to `smem` on the current device and checks that a block
// of that size fits on an SM: once per device and larger size (per instantiation: the statics are).
template <class T, int HD, class P>
int PrepareKernel(size_t smem) {
  static size_t ready[64] = {};  // per device: the largest size prepared
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  if (dev >= 0 && dev < 64 && smem <= ready[dev]) return 0;
  auto kernel = dl::DecodeLayerKernel<T, HD, P>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))) return e;
  int occ = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, dl::kThreads, smem)) return e;
  if (occ < 1) return cudaErrorNotSupported;  // a grid of one block per SM must be co-resident
  if (dev >= 0 && dev < 64) ready[dev] = smem;
  return 0;
}

// One cooperative launch of DecodeLayerKernel<T, HD, P> (P: Params, or a FixedParams shape) with the
// call's Params, one block per SM, overlapping the previous kernel's tail where the GPU has PDL.
template <class T, int HD, class P>
int LaunchKernel(const dl::Params& params, size_t smem, int blocks, MnDecodeLayerState* st, cudaStream_t s) {
  if (int e = PrepareKernel<T, HD, P>(smem)) return e;
  P p{};
  static_cast<dl::Params&>(p) = params;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(dl::kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeCooperative;  // every block resident: the grid barriers rely on it
  attrs[0].val.cooperative = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;  // the launch overlaps the previous kernel's tail
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = st->pdl && HasPdl() ? 2 : 1;
  if (cudaError_t e = cudaLaunchKernelEx(&cfg, dl::DecodeLayerKernel<T, HD, P>, p)) return e;
  return cudaGetLastError();
}

// The longest attended length whose phases 2-3 run as Heads units (cuda_decode_layer_heads.cuh), per
// element type, from decode_layer_check's timings on an H200 (SmolLM2-135M's layer: Heads units always
// against never, float32 16.0 against 16.3 us at 256 rows and 18.7 against 16.8 at 512; the 16-bit types
// level at 512, 14.5 against 15.8 at 256).
template <class T>
constexpr int64_t HeadsMaxRows() {
  return sizeof(T) == 4 ? 256 : 512;
}

template <class T, int HD>
int LaunchFused(const MnDecodeLayer& a, MnDecodeLayerState* st, cudaStream_t s) {
  const size_t smem = FusedSmem<HD>(a);
  const int blocks = NumSMs();
  const int64_t R = a.B * a.S, G = a.H / a.KVH, NG = (G + dl::kGmax - 1) / dl::kGmax;
  const int64_t max_splits = std::max<int64_t>(1, std::min<int64_t>({blocks / (R * a.KVH * NG), a.max_seq, dl::kMaxSplits}));
  dl::Params p{};
  p.x = a.x, p.attn_norm = a.attn_norm, p.w_q = a.w_q, p.w_k = a.w_k, p.w_v = a.w_v, p.w_o = a.w_o;
  p.mlp_norm = a.mlp_norm, p.w_gate = a.w_gate, p.w_up = a.w_up, p.w_down = a.w_down;
  p.k = a.k_out, p.v = a.v_out, p.y = a.y, p.pos = a.kv_pos;
  p.B = static_cast<int>(a.B), p.S = static_cast<int>(a.S), p.R = static_cast<int>(R), p.D = static_cast<int>(a.D);
  p.H = static_cast<int>(a.H), p.KVH = static_cast<int>(a.KVH), p.I = static_cast<int>(a.I), p.max_seq = a.max_seq;
  p.eps = a.eps;
  p.qscale = 1.4426950408889634f / sqrtf(static_cast<float>(HD));  // log2(e) / sqrt(hd), as the attention kernels
  p.max_splits = static_cast<int>(max_splits);
  constexpr int lpr = dl::Attn<T, HD>::LPR;
  p.min_split_rows = dl::kWarps * (32 / lpr) * dl::kRT;  // one tile per lane slot: a split takes one round of loads
  p.barrier = st->barrier;
  p.act_floats = static_cast<int>(ActFloats<HD>(a));
  p.trace = st->trace;
  p.phases = st->phases;
  for (int j = 0; j < HD / 2; ++j) p.inv[j] = a.inv_freq[j];
  // (Heads units sum their products with float4 loads: a row of D floats must end 16-byte aligned)
  p.heads_max_rows = a.D % 4 != 0 ? -1 : static_cast<int>(std::min<int64_t>(st->heads_max_rows >= 0 ? st->heads_max_rows : HeadsMaxRows<T>(), 1 << 30));
  // workspace: barrier | q [R][H*HD] | partials [R*H][max_splits][HD] | (m, l) [R*H][max_splits] | x1 [R][D] | h [R][I] |
  // the heads' w_o products [R][H][D]
  const size_t q_b = Align16(sizeof(float) * R * a.H * HD), part_b = Align16(sizeof(float) * R * a.H * max_splits * HD);
  const size_t ml_b = Align16(sizeof(float2) * R * a.H * max_splits), x1_b = Align16(sizeof(float) * R * a.D);
  const size_t h_b = Align16(sizeof(float) * R * a.I), opart_b = Align16(sizeof(float) * R * a.H * a.D);
  char* ws = nullptr;
  if (int e = Workspace(st, s, kBarrierBytes + q_b + part_b + ml_b + x1_b + h_b + opart_b, &ws)) return e;
  p.bar = reinterpret_cast<unsigned*>(ws);
  p.q = reinterpret_cast<float*>(ws + kBarrierBytes);
  p.part = reinterpret_cast<float*>(ws + kBarrierBytes + q_b);
  p.ml = reinterpret_cast<float2*>(ws + kBarrierBytes + q_b + part_b);
  p.x1 = reinterpret_cast<float*>(ws + kBarrierBytes + q_b + part_b + ml_b);
  p.h = reinterpret_cast<float*>(ws + kBarrierBytes + q_b + part_b + ml_b + x1_b);
  p.opart = reinterpret_cast<float*>(ws + kBarrierBytes + q_b + part_b + ml_b + x1_b + h_b);
  if constexpr (HD == 64)
    if (st->fixed_shapes && dl::SmolLM2Batch1::Matches(a.D, a.H, a.KVH, a.I, a.B, a.S))
      return LaunchKernel<T, HD, dl::SmolLM2Batch1>(p, smem, blocks, st, s);
  return LaunchKernel<T, HD, dl::Params>(p, smem, blocks, st, s);
}

// The composition itself: five launches through the T-typed intermediates in the workspace.
int LaunchFive(const MnDecodeLayer& a, MnDecodeLayerState* st, cudaStream_t s, size_t esize) {
  const int64_t R = a.B * a.S, qw = a.H * a.head_dim, kvw = a.KVH * a.head_dim;
  const size_t q_b = Align16(esize * R * qw), kv_b = Align16(esize * R * kvw), x1_b = Align16(esize * R * a.D);
  char* ws = nullptr;
  if (int e = Workspace(st, s, kBarrierBytes + 2 * q_b + 2 * kv_b + x1_b + Align16(esize * R * a.I), &ws)) return e;
  char* q = ws + kBarrierBytes;
  char* k = q + q_b;
  char* v = k + kv_b;
  char* att = v + kv_b;
  char* x1 = att + q_b;
  char* h = x1 + x1_b;
  const void* w[3] = {a.w_q, a.w_k, a.w_v};
  const int64_t n[3] = {qw, kvw, kvw};
  void* qkv[3] = {q, k, v};
  if (int e = mn_cuda_rms_norm_linear(a.dtype, a.x, a.attn_norm, R, a.D, a.eps, a.trans_b, 3, w, n, qkv, s)) return e;
  if (int e = mn_cuda_rope_cached_attention(a.dtype, q, k, v, a.k_cache, a.v_cache, att, a.k_out, a.v_out, a.B, a.S, a.H, a.KVH,
                                            a.head_dim, a.max_seq, a.kv_pos, a.inv_freq, st->attn, st->rope, s))
    return e;
  if (int e = mn_cuda_linear_residual(a.dtype, att, a.w_o, a.x, R, qw, a.D, a.trans_b, x1, s)) return e;
  if (int e = mn_cuda_rms_norm_swiglu(a.dtype, x1, a.mlp_norm, R, a.D, a.eps, a.trans_b, a.w_gate, a.w_up, a.I, h, s)) return e;
  return mn_cuda_linear_residual(a.dtype, h, a.w_down, x1, R, a.I, a.D, a.trans_b, a.y, s);
}

template <class T>
int LaunchFusedT(const MnDecodeLayer& a, MnDecodeLayerState* st, cudaStream_t s) {
  return a.head_dim == 64 ? LaunchFused<T, 64>(a, st, s) : LaunchFused<T, 128>(a, st, s);
}

}  // namespace

extern "C" {

MnDecodeLayerState* mn_cuda_decode_layer_new(void) {
  MnDecodeLayerState* st = new MnDecodeLayerState();
  st->attn = mn_cuda_scratch_new();
  st->rope = mn_cuda_scratch_new();
  return st;
}

void mn_cuda_decode_layer_free(MnDecodeLayerState* st) {
  if (st == nullptr) return;
  int prev = 0;
  cudaGetDevice(&prev);
  for (auto& b : st->buffers) {
    if (b.ptr == nullptr) continue;
    cudaSetDevice(b.device);
    cudaFree(b.ptr);  // synchronizes with the device: no pending work still uses it
  }
  cudaSetDevice(prev);
  mn_cuda_scratch_free(st->attn);
  mn_cuda_scratch_free(st->rope);
  delete st;
}

void mn_cuda_decode_layer_set_path(MnDecodeLayerState* st, int path) { st->path = path; }
int mn_cuda_decode_layer_last_path(const MnDecodeLayerState* st) { return st->last; }

int mn_cuda_decode_layer(const MnDecodeLayer* a, MnDecodeLayerState* st, void* stream) {
  if (a == nullptr || st == nullptr || a->inv_freq == nullptr) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(a->k_cache)) return e;
  cudaStream_t s = S(stream);
  const size_t esize = a->dtype == MN_F32 ? 4 : 2;
  if (a->B * a->S == 0) {  // no rows: the caches as they were
    const size_t bytes = esize * static_cast<size_t>(a->B * a->max_seq * a->KVH * a->head_dim);
    if (a->k_out != a->k_cache && bytes)
      if (cudaError_t e = cudaMemcpyAsync(a->k_out, a->k_cache, bytes, cudaMemcpyDeviceToDevice, s)) return e;
    if (a->v_out != a->v_cache && bytes)
      if (cudaError_t e = cudaMemcpyAsync(a->v_out, a->v_cache, bytes, cudaMemcpyDeviceToDevice, s)) return e;
    return 0;
  }
  const bool fused = st->path != MN_DECODE_LAYER_FIVE_KERNELS && FusedApplies(*a, esize);
  if (st->path == MN_DECODE_LAYER_FUSED && !fused) return cudaErrorNotSupported;
  if (!fused) {
    st->last = MN_DECODE_LAYER_FIVE_KERNELS;
    return LaunchFive(*a, st, s, esize);
  }
  const size_t cache_bytes = esize * static_cast<size_t>(a->B * a->max_seq * a->KVH * a->head_dim);
  if (a->k_out != a->k_cache)
    if (cudaError_t e = cudaMemcpyAsync(a->k_out, a->k_cache, cache_bytes, cudaMemcpyDeviceToDevice, s)) return e;
  if (a->v_out != a->v_cache)
    if (cudaError_t e = cudaMemcpyAsync(a->v_out, a->v_cache, cache_bytes, cudaMemcpyDeviceToDevice, s)) return e;
  st->last = MN_DECODE_LAYER_FUSED;
  if (a->dtype == MN_F16) return LaunchFusedT<__half>(*a, st, s);
  if (a->dtype == MN_BF16) return LaunchFusedT<__nv_bfloat16>(*a, st, s);
  return LaunchFusedT<float>(*a, st, s);
}

}  // extern "C"
