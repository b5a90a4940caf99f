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

// The configuration per element type: 8 warps, 3 stages of 4 KiB for 16-bit caches (96 KiB per block;
// the registers of 4 heads' query slices and sums leave one block per SM) and of 8 KiB for float32
// (192 KiB: one block per SM; with 4 KiB stages float32 fits two blocks per SM, which doubles the
// splits and the merge and was 5-20% slower). attn_check --sweep on an H200 (decode, 32/8 heads,
// head_dim 64 and 128, batch 1 and 8) compared these with 4 stages, 16 warps, and two blocks of 2
// query heads per KV head (fewer registers, more warps per SM; they read K/V twice and lost 30-40%):
// benchmarks/results/attn_check_h200_sweep_20261123.json.
template <class T, int HD>
struct DefaultCfgOf {
  using type = AttnCfg<T, HD, 8, 3, 4096>;
};
template <int HD>
struct DefaultCfgOf<float, HD> {
  using type = AttnCfg<float, HD, 8, 3, 8192>;
};
template <class T, int HD>
using DefaultCfg = typename DefaultCfgOf<T, HD>::type;

// Resident blocks per SM of one kernel instantiation (shared memory and registers bound it), after
// raising its shared-memory limit; asked once per instantiation.
template <class T, int HD, int GB, class Cfg>
int AttnOccupancy() {
  static int occ = 0;
  if (occ <= 0) {
    // cp.async.cg bypasses L1: give the SM's unified memory to shared memory
    cudaFuncSetAttribute(AttnSplit<T, HD, GB, Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM);
    cudaFuncSetAttribute(AttnSplit<T, HD, GB, Cfg>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, AttnSplit<T, HD, GB, Cfg>, Cfg::NW * 32, Cfg::SMEM) != cudaSuccess ||
        occ <= 0)
      occ = 1;
    cudaGetLastError();  // clear a refused attribute
  }
  return occ;
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

template <class T, int HD, int GB, class Cfg>
int LaunchAttn(const T* q, const T* k, const T* v, T* out, int B, int T_, int H, int KVH, int64_t max_seq, MnPos pos,
               MnScratch* scratch, cudaStream_t s, int waves) {
  const int occ = AttnOccupancy<T, HD, GB, Cfg>();
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
                nullptr, nullptr, nullptr, g_attn_skip_merge ? 1 : 0};
  g_attn_last_splits = static_cast<int>(splits);
  if (splits > 1)
    if (int e = AttnWorkspace(&args, HD, (size_t)B * T_ * H, (size_t)B * T_ * gx, scratch, s)) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(splits), static_cast<unsigned>(B * T_));
  cfg.blockDim = dim3(Cfg::NW * 32);
  cfg.dynamicSmemBytes = Cfg::SMEM;
  cfg.stream = s;
  // The launch latency overlaps the previous kernel's last blocks (decode: the cache write before).
  cudaLaunchAttribute pdl;
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &pdl;
  cfg.numAttrs = g_attn_pdl && HasPdl() ? 1 : 0;
  if (cudaError_t e = cudaLaunchKernelEx(&cfg, AttnSplit<T, HD, GB, Cfg>, q, k, v, out, args)) return e;
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
