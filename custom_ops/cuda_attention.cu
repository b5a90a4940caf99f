// CUDA kernels of com.meganeura CachedAttention (decode and prefill against the KV cache, float32,
// float16 and bfloat16) and their per-kernel-instance scratch. Built by nvcc; called through cuda_kernels.h.
#include "cuda_common.cuh"
#include "flash_attention.h"

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

#include "attn_splitk.cuh"

namespace {

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

// The configuration per element type, one block per SM (g_attn_blocks_per_sm).
// float32 with head_dim 64 or 128: the register-streamed form (attn_regs.cuh), 16 warps, 2 loads of
// rows ahead per warp. Against the cp.async scalar form it replaced (8 warps, 3 stages of 4 KiB), at
// head_dim 128 on an H200: 13.6 against 15.4 us at 4096 cached rows, 21.3 / 25.0 at 8192, 37.3 / 42.2
// at 16384 (75% of the bandwidth), 66.8 / 75.4 at batch 8 x 4096 (head_dim 64, against its 8 KiB stages:
// 10.2 / 14.3 / 22.5 against 11.0 / 16.2 / 25.0); 3 loads ahead was level, 16 warps x 1 and 8 x 4
// slower by 17-25%.
// RopeCachedAttention keeps the scalar form (it patches its new rows into the stages).
// float16/bfloat16 with head_dim 64 (and RopeCachedAttention's 128): the tensor-core form (attn_mma.cuh), stages of 8 KiB (16
// rows of head_dim 128; 192 KiB per block); the scalar form spent ~475 instructions per 4 KiB and
// capped near 3 TB/s (25-30% slower at 8192-16384 cached rows), the register-streamed form is 8-20%
// slower. Other head_dims: the scalar form (float32 stages of 8 KiB, 16-bit 4 KiB). Measured with attn_check --sweep on an
// H200, caches rotated past L2: benchmarks/results/attn_check_h200_sweep_20261129.json (and
// _20261127.json, _20261123.json for the older sweeps: 4 stages, 16 warps, two blocks of 2 query heads
// per KV head, which read K/V twice and lost 30-40%).
// float16/bfloat16 with head_dim 128: 2 stages (128 KiB, so that L1 keeps room), paired with the
// register-fed tensor-core form (attn_regmma.cuh, 8 warps x 2 units of 8 rows ahead), which a block
// takes when its slice has at least 1024 rows (AttnPairCfg). float16, 32/8 heads, the pair / the
// register-fed form alone / the cp.async form alone with 3 stages (the default before): batch 1 x
// 4096 cached (256 rows per block) 10.1 / 11.1 / 10.1 us, x 8192 (512) 14.3 / 14.7 / 14.4, x 16384
// (1024) 22.5 / 22.3 / 23.5, batch 8 x 4096 (2048) 36.9 / 36.5 / 40.3. The register-fed form's 234
// registers leave 8 warps per SM: it wins only with many rows per warp. With 3 stages (192 KiB) the
// pair was slower than either form (24.9 us at 16384): the register form's loads wait in L1.
// head_dim 64: the register-fed form was level or slower. attn_check_h200_sweep_20261129b.json.
template <class T, int HD>
struct DefaultCfgOf {
  static constexpr bool kMma = HD == 64 || HD == 128;
  using rope = AttnCfg<T, HD, 8, 3, kMma ? 8192 : 4096, kMma>;  // RopeCachedAttention's
  using type = std::conditional_t<HD == 128, AttnPairCfg<AttnCfg<T, HD, 8, 2, 8192, true>, AttnRegMmaCfg<T, HD, 8, 2>, 1024>, rope>;
};
template <int HD>
struct DefaultCfgOf<float, HD> {
  static constexpr bool kReg = HD == 64 || HD == 128;
  using rope = AttnCfg<float, HD, 8, 3, HD == 128 ? 4096 : 8192>;
  using type = std::conditional_t<kReg, AttnRegCfg<float, HD, 16, 2>, rope>;
};
template <class T, int HD>
using DefaultCfg = typename DefaultCfgOf<T, HD>::type;

// Resident blocks per SM of one kernel instantiation (shared memory and registers bound it), after
// raising its shared-memory limit; asked once per instantiation.
template <class T, int HD, int GB, class Cfg, bool ROPE = false>
int AttnOccupancy() {
  static int occ = 0;
  if (occ <= 0) {
    // cp.async.cg bypasses L1: give the SM's unified memory to shared memory. The register forms' loads
    // pass through L1, which holds their data in flight: the register-streamed form asks for the most
    // L1 (on an H200 its time was the same with the most shared memory or the driver's default), the
    // pair of tensor-core forms for just the shared memory of its stages (the rest is L1).
    int carveout = Cfg::REG ? cudaSharedmemCarveoutMaxL1 : cudaSharedmemCarveoutMaxShared;
    int dev = 0, sm_bytes = 0;
    if (Cfg::PAIR && cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&sm_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) == cudaSuccess && sm_bytes > 0)
      carveout = static_cast<int>(std::min<int64_t>(100, ((int64_t)Cfg::SMEM + 2048) * 100 / sm_bytes + 1));
    cudaFuncSetAttribute(AttnSplit<T, HD, GB, Cfg, ROPE>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM);
    cudaFuncSetAttribute(AttnSplit<T, HD, GB, Cfg, ROPE>, cudaFuncAttributePreferredSharedMemoryCarveout, carveout);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, AttnSplit<T, HD, GB, Cfg, ROPE>, Cfg::NW * 32, Cfg::SMEM) != cudaSuccess ||
        occ <= 0)
      occ = 1;
    cudaGetLastError();  // clear a refused attribute
  }
  return occ;
}

// Whether `clusters` clusters of `cl` blocks (the splits of one head group) are resident at once
// (cudaOccupancyMaxActiveClusters: a cluster's blocks share a GPC), asked once per cluster size.
template <class T, int HD, int GB, class Cfg, bool ROPE>
bool AttnClustersFit(int cl, int64_t clusters) {
  static int fit[17] = {};  // per cluster size: clusters resident at once (-1: refused)
  if (cl < 2 || cl > 16 || !HasPdl()) return false;  // clusters: compute capability 9.0
  if (fit[cl] == 0) {
    auto kernel = AttnSplit<T, HD, GB, Cfg, ROPE>;
    if (cl > 8) cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = static_cast<unsigned>(cl);
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, static_cast<unsigned>(cl), 1);
    cfg.blockDim = dim3(Cfg::NW * 32);
    cfg.dynamicSmemBytes = Cfg::SMEM;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    fit[cl] = cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) == cudaSuccess && n > 0 ? n : -1;
    cudaGetLastError();  // clear a refusal
  }
  return fit[cl] >= clusters;
}

// The split-K workspace in `scratch`: partials [B*T*H][splits] (acc[hd], then (m, l)) and a counter
// per (sequence, row, block column). Counters start at 0 in a new buffer; every launch leaves them at 0.
int AttnWorkspace(AttnArgs* args, int hd, size_t heads, size_t ncount, MnScratch* scratch, cudaStream_t s) {
  const size_t n = heads * args->splits;
  const size_t acc_bytes = sizeof(float) * n * hd, ml_bytes = sizeof(float2) * n;
  void* p = nullptr;
  bool fresh = false;
  const uint64_t layout = (static_cast<uint64_t>(acc_bytes + ml_bytes) << 24) ^ ncount;  // where the counters are
  if (int e = ScratchGet(scratch, s, acc_bytes + ml_bytes + sizeof(unsigned) * ncount, &p, &fresh, layout)) return e;
  args->ws_acc = static_cast<float*>(p);
  args->ws_ml = reinterpret_cast<float2*>(static_cast<char*>(p) + acc_bytes);
  args->counters = reinterpret_cast<unsigned*>(static_cast<char*>(p) + acc_bytes + ml_bytes);
  if (fresh) return cudaMemsetAsync(args->counters, 0, sizeof(unsigned) * ncount, s);
  return 0;
}

// Whether a chunk of T > 1 query rows (a prefill) runs on the flash forward (cuda_flash_mma.cuh). Its
// blocks of 64 query rows of one head read each K/V row once per block, where the split-K kernel's
// blocks (one per query row) read it once per row; but a flash block walks its keys one tile after
// another, so where its row blocks are few the forward also splits their keys over blocks
// (cuda_flash_keysplit.cuh: about 2 us more for a chunk near the start of its cache, far less time
// deeper in). On an H200 (attn_check, SmolLM2-135M's 9 / 3 heads, head_dim 64; split-K against flash;
// benchmarks/results/attn_check_h200_20261128_keysplit_final.json):
//   batch 8 x 128 rows from position 0: float16 60.5 against 8.4 us, float32 79.7 against 21.5;
//   batch 1 x 128 from 0 in a 4096-row cache (18 row blocks): float16 8.8 against 8.9 (7.5 without key
//     splits), float32 12.3 against 17.5 (16.3);
//   batch 1 x 128 from 1024 / 3968: float16 34.7 / 98.9 against 14.9 / 22.9, float32 62.8 / 194.4
//     against 25.7 / 56.5;
//   batch 1 x 64 from 2048: float16 32.3 against 15.7; x 32 from 4000: 33.2 against 17.7;
//   batch 1 x 16 from 0 / 4000: float16 2.8 / 19.0 against 4.8 / 17.6; batch 2 x 16 from 1000: 10.8
//     against 14.4.
// So: at least 32 rows, and either row blocks for a quarter of the SMs (64 rows or more) or a cache of
// at least 8 chunks, where a chunk can sit far from its start (static shapes only: the positions are
// on the device, and a captured graph keeps its choice).
bool FlashForChunk(int64_t B, int64_t T, int64_t H, int64_t max_seq) {
  if (T < 2 || g_attn_flash == 0) return false;
  if (g_attn_flash == 1) return true;
  if (T < 32) return false;
  return (T >= 64 && B * H * ((T + 63) / 64) >= NumSMs() / 4) || max_seq >= 8 * T;
}

// ROPE: RopeCachedAttention's form (attn_splitk.cuh), `rope` its extra inputs; k and v are then rope.k, rope.v.
template <class T, int HD, int GB, class Cfg, bool ROPE = false>
int LaunchAttn(const T* q, const T* k, const T* v, T* out, int B, int T_, int H, int KVH, int64_t max_seq, MnPos pos,
               MnScratch* scratch, cudaStream_t s, int waves, const RopeIn<T, HD, ROPE>& rope = {}) {
  const int fit = AttnOccupancy<T, HD, GB, Cfg, ROPE>();
  const int occ = g_attn_blocks_per_sm > 0 ? std::min(fit, g_attn_blocks_per_sm) : fit;
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
  if (splits > 65535 || gx > 0x7fffffff || (int64_t)B * T_ > 65535) return cudaErrorInvalidConfiguration;
  AttnArgs args{T_, H, KVH, G, ngroups, static_cast<int>(splits), pos, max_seq,
                1.4426950408889634f / sqrtf(static_cast<float>(HD)),  // log2(e) / sqrt(hd)
                nullptr, nullptr, nullptr, g_attn_skip_merge ? 1 : 0, 0};
  const bool use_pdl = g_attn_pdl && HasPdl();
  // The splits of a head group merge through a thread-block cluster's shared memory when every cluster
  // is resident at once; else through the workspace (the last block to finish merges).
  args.cluster = splits <= g_attn_cluster_max && AttnClustersFit<T, HD, GB, Cfg, ROPE>(static_cast<int>(splits), base_blocks);
  g_attn_last_splits = static_cast<int>(splits);
  g_attn_last_cluster = args.cluster ? static_cast<int>(splits) : 0;
  if (splits > 1 && !args.cluster)
    if (int e = AttnWorkspace(&args, HD, (size_t)B * T_ * H, (size_t)B * T_ * gx, scratch, s)) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(splits), static_cast<unsigned>(B * T_));
  cfg.blockDim = dim3(Cfg::NW * 32);
  cfg.dynamicSmemBytes = Cfg::SMEM;
  cfg.stream = s;
  // The launch latency overlaps the previous kernel's last blocks (decode: the cache write before).
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = 1;
  attrs[0].val.clusterDim.y = static_cast<unsigned>(splits);
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = args.cluster ? attrs : attrs + 1;
  cfg.numAttrs = (args.cluster ? 1 : 0) + (use_pdl ? 1 : 0);
  if (cudaError_t e = cudaLaunchKernelEx(&cfg, AttnSplit<T, HD, GB, Cfg, ROPE>, q, k, v, out, args, rope)) return e;
  return cudaGetLastError();
}

template <class T, int HD, class Cfg = DefaultCfg<T, HD>, bool ROPE = false>
int LaunchAttnHD(const T* q, const T* k, const T* v, T* out, int B, int T_, int H, int KVH, int64_t max_seq, MnPos pos,
                 MnScratch* scratch, cudaStream_t s, int waves = 0, const RopeIn<T, HD, ROPE>& rope = {}) {
  if (waves <= 0) waves = g_attn_waves;
  const int G = H / KVH;  // head groups of more than 4 run as several blocks (K/V then come from L2)
  if (G <= 1) return LaunchAttn<T, HD, 1, Cfg, ROPE>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, waves, rope);
  if (G <= 2) return LaunchAttn<T, HD, 2, Cfg, ROPE>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, waves, rope);
  if (G == 3) return LaunchAttn<T, HD, 3, Cfg, ROPE>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, waves, rope);
  return LaunchAttn<T, HD, 4, Cfg, ROPE>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, waves, rope);
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

// ------------------------------------------------------------------ RopeCachedAttention
struct RopeFreqs {
  float v[MN_ROPE_MAX_HALF];
};

// The general path's first kernel (head_dim without a split-K instantiation, or unaligned tensors):
// the query rows rotated into q_rot, the new key rows rotated into the K cache, the value rows copied
// into the V cache; one thread per (row, head, pair). A sequence with an invalid position writes
// nothing (its attention output is NaN).
template <class T>
__global__ void RopeRowsKernel(const T* __restrict__ q, const T* __restrict__ k_new, const T* __restrict__ v_new, T* __restrict__ q_rot,
                               T* __restrict__ k, T* __restrict__ v, int64_t B, int T_, int H, int KVH, int half, int64_t max_seq,
                               MnPos pos, RopeFreqs inv) {
  using E = Elem<T>;
  const int64_t heads = H + KVH, n = B * T_ * heads * half;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int j = static_cast<int>(i % half);
    const int64_t h = (i / half) % heads, bt = i / half / heads, b = bt / T_;
    const int64_t kv_pos = LoadPos(pos, b);
    if (kv_pos < 0 || kv_pos > max_seq - T_) continue;
    const int64_t p = kv_pos + bt % T_;
    float sn, cs;
    sincosf(static_cast<float>(p) * inv.v[j], &sn, &cs);
    const int64_t hd = 2 * half;
    const T* x;
    T* y;
    if (h < H) {
      x = q + (bt * H + h) * hd;
      y = q_rot + (bt * H + h) * hd;
    } else {
      const int64_t kvh = h - H, src = (bt * KVH + kvh) * hd, dst = ((b * max_seq + p) * KVH + kvh) * hd;
      x = k_new + src;
      y = k + dst;
      v[dst + j] = v_new[src + j];
      v[dst + j + half] = v_new[src + j + half];
    }
    const float a = E::ToF(x[j]), c = E::ToF(x[j + half]);
    y[j] = E::FromF(a * cs - c * sn);
    y[j + half] = E::FromF(c * cs + a * sn);
  }
}

template <class T, int HD>
int LaunchRopeAttnHD(const T* q, const T* k_new, const T* v_new, T* k, T* v, T* out, int B, int T_, int H, int KVH, int64_t max_seq,
                     MnPos pos, const float* inv_freq, MnScratch* scratch, cudaStream_t s) {
  RopeIn<T, HD, true> rope{k_new, v_new, k, v, {}};
  for (int j = 0; j < HD / 2; ++j) rope.inv[j] = inv_freq[j];
  return LaunchAttnHD<T, HD, typename DefaultCfgOf<T, HD>::rope, true>(q, k, v, out, B, T_, H, KVH, max_seq, pos, scratch, s, 0, rope);
}

template <class T>
int RopeCachedAttention(const T* q, const T* k_new, const T* v_new, const T* k_in, const T* v_in, T* k, T* v, T* out, int64_t B,
                        int64_t T_, int64_t H, int64_t KVH, int64_t hd, int64_t max_seq, MnPos pos, const float* inv_freq,
                        MnScratch* scratch, MnScratch* rope_scratch, cudaStream_t s) {
  const size_t cache_bytes = sizeof(T) * B * max_seq * KVH * hd;
  if (k != k_in)
    if (cudaError_t e = cudaMemcpyAsync(k, k_in, cache_bytes, cudaMemcpyDeviceToDevice, s)) return e;
  if (v != v_in)
    if (cudaError_t e = cudaMemcpyAsync(v, v_in, cache_bytes, cudaMemcpyDeviceToDevice, s)) return e;
  const int b = static_cast<int>(B), t = static_cast<int>(T_), h = static_cast<int>(H), kvh = static_cast<int>(KVH);
  const bool aligned = ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) == 0;
  // One kernel (the split-K kernel's ROPE form) for the head_dims of LLaMA-family decoders; the others
  // (each a dozen more kernel instantiations to compile) take the two-kernel path below.
  switch (aligned ? hd : 0) {
    case 64: return LaunchRopeAttnHD<T, 64>(q, k_new, v_new, k, v, out, b, t, h, kvh, max_seq, pos, inv_freq, scratch, s);
    case 128: return LaunchRopeAttnHD<T, 128>(q, k_new, v_new, k, v, out, b, t, h, kvh, max_seq, pos, inv_freq, scratch, s);
    default: break;
  }
  void* q_rot = nullptr;  // general path: two kernels, the rows first (q rotated into rope_scratch)
  bool fresh = false;
  if (int e = ScratchGet(rope_scratch, s, sizeof(T) * B * T_ * H * hd, &q_rot, &fresh)) return e;
  RopeFreqs inv;
  for (int64_t j = 0; j < hd / 2; ++j) inv.v[j] = inv_freq[j];
  const int64_t n = B * T_ * (H + KVH) * (hd / 2);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65536));
  RopeRowsKernel<T><<<blocks, 256, 0, s>>>(q, k_new, v_new, static_cast<T*>(q_rot), k, v, B, t, h, kvh, static_cast<int>(hd / 2),
                                           max_seq, pos, inv);
  if (cudaError_t e = cudaGetLastError()) return e;
  return CachedAttention(static_cast<const T*>(q_rot), static_cast<const T*>(k), static_cast<const T*>(v), out, B, T_, H, KVH, hd,
                         max_seq, pos, scratch, s);
}

}  // namespace

extern "C" {

MnScratch* mn_cuda_scratch_new(void) { return new MnScratch(); }

int mn_cuda_scratch_get(MnScratch* sc, void* stream, size_t bytes, uint64_t layout, void** out, int* fresh) {
  bool is_fresh = false;
  const int e = ScratchGet(sc, S(stream), bytes, out, &is_fresh, layout);
  *fresh = is_fresh ? 1 : 0;
  return e;
}

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
  if (FlashForChunk(B, T, H, max_seq)) {
    const int e = mn_cuda_flash_cached_attention(dtype, q, k, v, out, B, T, H, KVH, head_dim, max_seq, kv_pos, g_attn_key_splits,
                                                 scratch, stream);
    if (e >= 0) return e;
  }
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

int mn_cuda_rope_cached_attention(int dtype, const void* q, const void* k_new, const void* v_new, const void* k_cache,
                                  const void* v_cache, void* out, void* k_out, void* v_out, int64_t B, int64_t T, int64_t H, int64_t KVH,
                                  int64_t head_dim, int64_t max_seq, MnPos kv_pos, const float* inv_freq, MnScratch* scratch,
                                  MnScratch* rope_scratch, void* stream) {
  if (head_dim / 2 > MN_ROPE_MAX_HALF || head_dim < 2 || head_dim % 2) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(q)) return e;
  cudaStream_t s = S(stream);
  if (T == 0 || B == 0) {  // no rows: the caches as they were
    const size_t bytes = (dtype == MN_F32 ? 4 : 2) * (size_t)(B * max_seq * KVH * head_dim);
    if (k_out != k_cache && bytes) if (cudaError_t e = cudaMemcpyAsync(k_out, k_cache, bytes, cudaMemcpyDeviceToDevice, s)) return e;
    if (v_out != v_cache && bytes) if (cudaError_t e = cudaMemcpyAsync(v_out, v_cache, bytes, cudaMemcpyDeviceToDevice, s)) return e;
    return 0;
  }
  switch (dtype) {
    case MN_F16: {
      using H16 = __half;
      return RopeCachedAttention(static_cast<const H16*>(q), static_cast<const H16*>(k_new), static_cast<const H16*>(v_new),
                                 static_cast<const H16*>(k_cache), static_cast<const H16*>(v_cache), static_cast<H16*>(k_out),
                                 static_cast<H16*>(v_out), static_cast<H16*>(out), B, T, H, KVH, head_dim, max_seq, kv_pos, inv_freq,
                                 scratch, rope_scratch, s);
    }
    case MN_BF16: {
      using B16 = __nv_bfloat16;
      return RopeCachedAttention(static_cast<const B16*>(q), static_cast<const B16*>(k_new), static_cast<const B16*>(v_new),
                                 static_cast<const B16*>(k_cache), static_cast<const B16*>(v_cache), static_cast<B16*>(k_out),
                                 static_cast<B16*>(v_out), static_cast<B16*>(out), B, T, H, KVH, head_dim, max_seq, kv_pos, inv_freq,
                                 scratch, rope_scratch, s);
    }
    default:
      return RopeCachedAttention(static_cast<const float*>(q), static_cast<const float*>(k_new), static_cast<const float*>(v_new),
                                 static_cast<const float*>(k_cache), static_cast<const float*>(v_cache), static_cast<float*>(k_out),
                                 static_cast<float*>(v_out), static_cast<float*>(out), B, T, H, KVH, head_dim, max_seq, kv_pos, inv_freq,
                                 scratch, rope_scratch, s);
  }
}

}  // extern "C"
