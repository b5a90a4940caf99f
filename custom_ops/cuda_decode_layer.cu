// DecodeLayer on CUDA (cuda_decode_layer.h): the one-launch kernel (its phases in
// cuda_decode_layer_phases.cuh, their pieces in cuda_decode_layer_kernel.cuh), its workspace and launch,
// and the five-kernel path for the shapes it does not take.
#include "cuda_decode_layer.h"
#include "cuda_decode_layer_phases.cuh"
#include "cuda_decode_linear.h"

namespace dl {

// P: Params, or a FixedParams shape (its dims compile-time constants).
template <class T, int HD, class P>
__global__ void __launch_bounds__(kThreads, 1) DecodeLayerKernel(P p) {
  extern __shared__ float4 smem4[];
  __shared__ Seqs sq;
  const Items<T, HD, P> it{p};
  auto qkv = [&](int i, Pair<T>& r) { it.QkvRows(i, r); };
  Pair<T> pair, pair2;
  using HeadUnits = Heads<T, HD>;
  typename HeadUnits::Unit hu;
  const bool may_head = p.barrier == kBarrierGrowOnly && p.heads_max_rows > 0 && static_cast<int>(blockIdx.x) < HeadUnits::Units(p);
  // Under programmatic dependent launch the first q|k|v weight rows load while the previous kernel (the
  // layer before) drains, and the Heads units' w_o rows are prefetched into L2: weights never depend on
  // it. Everything else waits for it.
  if ((p.phases & (kPhaseBarriers - 1)) != 0) {
    LoadItem(pair, FirstItem(), it.Qkv(), qkv);
    if (may_head && (p.phases & kPrefetch)) {
      typename HeadUnits::Unit first;
      HeadUnits::Locate(p, blockIdx.x, &first);
      HeadUnits::PrefetchWo(p, first);
    }
  }
  GridDependencyWait();
  GridDependentsRelease();
  Trace(p, 0);
  float* act = reinterpret_cast<float*>(smem4);
  const Shared sh{act, act + p.act_floats, act + p.act_floats + p.D, &sq,
                  p.barrier == kBarrierGrowOnly ? __ldcg(p.bar + 96) : 0u, act + p.act_floats + 2 * p.D};
  if ((p.phases & (kPhaseBarriers - 1)) == 0) return BarriersOnly(p, sh);
  auto gateup = [&](int i, Pair<T>& r) { it.GateUpRows(i, r); };
  auto down = [&](int i, Single<T>& r) { it.DownRow(i, r); };
  auto none = [](int, int) { return 0.f; };
  // 1: q | k | v (rms-normalised x), rope, cache rows
  LoadRows<T, HD>(p, sh);
  const int64_t attended = AttendedRows(p, sq);
  // L2 prefetches pay off once the attention phase is long enough to hide them: up to 256 attended rows
  // they cost more than they save (H200, per layer: float32 18.6 -> 17.6-17.8 us without them at 128
  // and 256 cached rows, 16-bit types 0.1-0.2 us; from 512 rows on they gain, or float32 loses <= 0.2).
  // Short caches: phases 2 and 3 as Heads units, one barrier between them and phase 4 (grow-only
  // barriers: the skipped barrier's arrivals still count, the generation barrier has no such count).
  const bool heads = attended <= p.heads_max_rows && p.barrier == kBarrierGrowOnly;
  const int splits = heads ? 1 : Splits(p, attended);  // (its 64-bit division only where the splits are used)
  const bool prefetch = !heads && (p.phases & kPrefetch) && attended >= kPrefetchMinRows;
  if (prefetch) Attn<T, HD>::Prefetch(p, sq, splits);
  const bool head_unit = heads && may_head;
  if (head_unit && (p.phases & kPrefetch)) {  // the older K/V rows into L2 while phase 1 runs
    HeadUnits::Locate(p, blockIdx.x, &hu);
    HeadUnits::PrefetchKv(p, sq, hu);
  }
  if (p.phases & kPhase1)
    ItemLoop<true>(pair, pair2, false, it.Qkv(), act, sh.gamma1, p.eps, p.R, qkv, none,
                   [&](int i, int m, const float(&g)[2], float) { QkvEpilogue<T, HD>(p, sq, heads, sh.epoch + 1, i, m, g); });
  Trace(p, 2);
  typename HeadUnits::Wo wo;
  if (heads) {  // no barrier 0: the units poll phase 1's tagged words (its arrival still counts)
    __syncthreads();  // the block's phase-1 reads of act are done before the units' merge area overwrites it
    ArriveUncontended(p, 0);
    if (head_unit) {
      HeadUnits::Locate(p, blockIdx.x, &hu);  // again: kept live across phase 1 it spills
      HeadUnits::LoadWo(p, hu, wo);
    }
    Trace(p, 3);
  } else {
    Barrier(p, sh, 0, 3, [] {});
  }
  if (heads)
    HeadsPhases23<T, HD>(p, sh, wo, act, pair, gateup);
  else
    SplitPhases23<T, HD>(p, sh, it, splits, prefetch, act, pair, gateup);
  MlpPhases<T, HD>(p, sh, heads, act, pair, pair2, gateup, down);
  if (p.barrier == kBarrierGrowOnly && blockIdx.x == 0 && threadIdx.x == 0) p.bar[96] = sh.epoch + 1;  // every block read it before the first barrier it awaits
  Trace(p, 14);
}

}  // namespace dl

struct MnDecodeLayerState {
  struct Buffer {
    void* stream;
    int device;
    void* ptr;
    size_t bytes;
    size_t tagged;  // bytes after the barrier words that hold only tagged words or zeros (Workspace)
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

// The workspace of (stream, device), at least `bytes`; a new buffer starts zeroed (the barrier words at 0).
// tagged: the bytes after the barrier words that the launch reads as tagged words (dl::StoreTagged): zeroed
// where anything else may have written them (a tag read from other data could match the launch's);
// 0 (the five-kernel path) marks them as written by other data.
int Workspace(MnDecodeLayerState* st, cudaStream_t s, size_t bytes, size_t tagged, char** out) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  std::lock_guard<std::mutex> lock(st->mu);
  MnDecodeLayerState::Buffer* b = nullptr;
  for (auto& x : st->buffers)
    if (x.stream == static_cast<void*>(s) && x.device == dev) b = &x;
  if (b == nullptr) {
    st->buffers.push_back({static_cast<void*>(s), dev, nullptr, 0, 0});
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
    if (cudaError_t e = cudaMemsetAsync(b->ptr, 0, bytes, s)) return e;
    b->tagged = bytes - kBarrierBytes;
  }
  if (tagged == 0) b->tagged = 0;
  if (tagged > b->tagged) {
    if (cudaError_t e = cudaMemsetAsync(static_cast<char*>(b->ptr) + kBarrierBytes + b->tagged, 0, tagged - b->tagged, s)) return e;
    b->tagged = tagged;
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

// Shared memory: the activation rows (or the attention's merge area and the Heads units' staged rows),
// then the two norms' gammas, then x1's rows.
template <int HD>
int64_t ActFloats(const MnDecodeLayer& a) {
  const int64_t R = a.B * a.S, K = std::max({a.D, a.H * a.head_dim, a.I});
  return (std::max<int64_t>(R * K, dl::HeadsStageAt<HD>() + HD * (1 + 2 * a.S)) + 3) / 4 * 4;
}
template <int HD>
size_t FusedSmem(const MnDecodeLayer& a) {
  return sizeof(float) * (ActFloats<HD>(a) + 2 * a.D + a.B * a.S * a.D);  // + the gammas, x1's rows
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
  // phase 5 polls the words phase 4 writes: the phases run all or none (the harness's breakdowns)
  constexpr int kFive = dl::kPhase1 | dl::kPhase2 | dl::kPhase3 | dl::kPhase4 | dl::kPhase5;
  if ((p.phases & kFive) != 0 && (p.phases & kFive) != kFive) return cudaErrorInvalidValue;
  for (int j = 0; j < HD / 2; ++j) p.inv[j] = a.inv_freq[j];
  // (Heads units sum their products with float4 loads: a row of D floats must end 16-byte aligned)
  p.heads_max_rows = a.D % 4 != 0 ? -1 : static_cast<int>(std::min<int64_t>(st->heads_max_rows >= 0 ? st->heads_max_rows : HeadsMaxRows<T>(), 1 << 30));
  p.heads_groups = static_cast<int>(std::max<int64_t>(1, blocks / (R * a.H)));
  p.heads_group_rows = (p.D + p.heads_groups - 1) / p.heads_groups;
  p.heads_inv_groups = 1.0f / static_cast<float>(p.heads_groups);
  // workspace: barrier | tagged words: h [R][I], q|k|v [R][H+2KVH][HD] | q [R][H*HD] | partials [R*H][max_splits][HD] |
  // (m, l) [R*H][max_splits] | x1 [R][D] | the heads' w_o products [R][H][D]
  const size_t h_b = Align16(sizeof(unsigned long long) * R * a.I), q_b = Align16(sizeof(float) * R * a.H * HD);
  const size_t part_b = Align16(sizeof(float) * R * a.H * max_splits * HD), ml_b = Align16(sizeof(float2) * R * a.H * max_splits);
  const size_t x1_b = Align16(sizeof(float) * R * a.D), opart_b = Align16(sizeof(float) * R * a.H * a.D);
  const size_t qkv_b = Align16(sizeof(unsigned long long) * R * (a.H + 2 * a.KVH) * HD);
  char* ws = nullptr;
  const size_t tagged_b = h_b + qkv_b;
  if (int e = Workspace(st, s, kBarrierBytes + tagged_b + q_b + part_b + ml_b + x1_b + opart_b, tagged_b, &ws)) return e;
  p.bar = reinterpret_cast<unsigned*>(ws);
  char* at = ws + kBarrierBytes;
  p.h = reinterpret_cast<unsigned long long*>(at);
  p.qkv_t = reinterpret_cast<unsigned long long*>(at += h_b);
  p.q = reinterpret_cast<float*>(at += qkv_b);
  p.part = reinterpret_cast<float*>(at += q_b);
  p.ml = reinterpret_cast<float2*>(at += part_b);
  p.x1 = reinterpret_cast<float*>(at += ml_b);
  p.opart = reinterpret_cast<float*>(at += x1_b);
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
  if (int e = Workspace(st, s, kBarrierBytes + 2 * q_b + 2 * kv_b + x1_b + Align16(esize * R * a.I), 0, &ws)) return e;
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
