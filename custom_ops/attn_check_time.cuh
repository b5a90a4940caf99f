// attn_check's timing (included by attn_check.cu after its checks): CachedAttention per tile
// configuration, the launch floor, a plain read of the same bytes, Rope.
//
// Method. Kernel time with CUDA events, per launch: "graph" = N launches captured once in a CUDA
// graph and replayed (GPU time, no host launch cost), "stream" = launches back to back on a stream
// (GPU time, or the launcher's host work where that is longer). Consecutive launches read DIFFERENT
// K/V caches (CacheSets): launch i reads set i % n, and the n sets' attended rows total >= 3x the L2
// size, so each launch reads its K/V from DRAM as a decode step does (one cache reused back to back
// would stay in L2 and overstate the bandwidth: 16.8 MB at 4096 cached float16 rows of 8 x 128).
// Bandwidth = bytes the op must move / time; % of the device's nominal bandwidth (QueryDevice).
#pragma once

__global__ void ReadAll(const uint4* __restrict__ k, const uint4* __restrict__ v, int64_t n16, float* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n16; i += (int64_t)gridDim.x * blockDim.x) {
    const uint4 x = __ldcs(k + i), y = __ldcs(v + i);
    acc ^= x.x ^ x.y ^ x.z ^ x.w ^ y.x ^ y.y ^ y.z ^ y.w;
  }
  if (acc == 0x12345u) sink[blockIdx.x] = 1.f;  // keeps the loads alive
}

// The same bytes read in the attention's pattern: block (KV head, split) reads its head's 16-byte chunks
// (c16 per row) of rows [split * chunk, ...) of a [rows][kvh][c16] cache, as a decode block does.
__global__ void ReadHeads(const uint4* __restrict__ k, const uint4* __restrict__ v, int64_t rows, int kvh, int c16, float* sink) {
  const int64_t chunk = (rows + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * chunk;
  const int64_t n = (min(rows, r0 + chunk) - r0) * c16;
  uint32_t acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t at = ((r0 + i / c16) * kvh + blockIdx.x) * c16 + i % c16;
    const uint4 x = __ldcs(k + at), y = __ldcs(v + at);
    acc ^= x.x ^ x.y ^ x.z ^ x.w ^ y.x ^ y.y ^ y.z ^ y.w;
  }
  if (acc == 0x12345u) sink[blockIdx.x] = 1.f;
}

// The launch floor: the attention grid's shape, shared memory and PDL, no work but one store.
__global__ void EmptyLaunch(float* sink) {
  GridDependencyWait();
  GridDependentsRelease();
  if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0) sink[0] = 1.f;
}

// Distinct K/V caches for timing (see the method above). A batch of 1 reads rows [0, L) only, so set
// j starts L rows after set j - 1 in one pool (its rows past L overlap the next sets, never read);
// batch > 1 sets are whole caches. Filled with one byte value (the timing does not look at results).
struct CacheSets {
  char *k = nullptr, *v = nullptr;
  int n = 1;
  size_t stride = 0;    // bytes between sets
  double l2_multiple;   // the sets' attended bytes / L2 size
  CacheSets(int B, int L, int max_seq, size_t row_bytes) {
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    const size_t read = 2 * (size_t)B * L * row_bytes, whole = (size_t)B * max_seq * row_bytes;
    stride = B == 1 ? (size_t)L * row_bytes : whole;
    n = static_cast<int>(std::min<size_t>(64, std::max<size_t>(2, (3 * (size_t)l2 + read - 1) / read)));
    while (n > 2 && stride * (n - 1) + whole > (size_t(3) << 30)) --n;  // at most 3 GiB per pool
    const size_t bytes = stride * (n - 1) + whole + 16;
    CK(cudaMalloc(&k, bytes));
    CK(cudaMalloc(&v, bytes));
    CK(cudaMemset(k, 0x3c, bytes));
    CK(cudaMemset(v, 0x3c, bytes));
    l2_multiple = static_cast<double>(n) * read / l2;
  }
  ~CacheSets() {
    cudaFree(k);
    cudaFree(v);
  }
  CacheSets(const CacheSets&) = delete;
  CacheSets& operator=(const CacheSets&) = delete;
  void* K(int i) const { return k + (size_t)(i % n) * stride; }
  void* V(int i) const { return v + (size_t)(i % n) * stride; }
  int GraphLaunches() const { return n * ((100 + n - 1) / n); }  // whole rounds: replays keep the rotation
};

static FILE* g_json = nullptr;
static bool g_first = true;
static void Record(const char* op, const char* type, const char* config, int B, int L, double bytes, double graph_us, double stream_us,
                   double peak, const CacheSets* sets) {
  const int n = sets ? sets->n : 1;
  const double l2x = sets ? sets->l2_multiple : 0.0;
  std::printf("time %-15s %-8s %-26s B=%d L=%-6d graph %7.2f us %6.0f GB/s %4.0f%% | stream %7.2f us %6.0f GB/s | sets %d (%.1fx L2)\n",
              op, type, config, B, L, graph_us, bytes / graph_us / 1e3, 100.0 * bytes / graph_us / 1e3 / peak, stream_us,
              bytes / stream_us / 1e3, n, l2x);
  if (g_json)
    std::fprintf(g_json,
                 "%s{\"op\": \"%s\", \"dtype\": \"%s\", \"config\": \"%s\", \"batch\": %d, \"cached\": %d, \"bytes\": %.0f, "
                 "\"kernel_graph_us\": %.3f, \"kernel_stream_us\": %.3f, \"GBps\": %.1f, \"frac_peak\": %.4f, \"cache_sets\": %d, "
                 "\"sets_over_l2\": %.2f}",
                 g_first ? "\n  " : ",\n  ", op, type, config, B, L, bytes, graph_us, stream_us, bytes / graph_us / 1e3,
                 bytes / graph_us / 1e3 / peak, n, l2x);
  g_first = false;
}

// The tile configurations the sweep compares: (warps per block, pipeline stages, bytes per stage, query
// heads per block, tensor-core form, splits merged through a cluster where they fit); the tensor-core
// ones for 16-bit types only: the float32 head_dim 128 cp.async form (RopeCachedAttention's; the
// library's CachedAttention default before the register-streamed form), the one before it, the 16-bit
// default (tensor cores) and the scalar one it replaced. Cluster merges of 16 splits (two 96 KiB
// blocks per SM) and 4-warp blocks were slower (benchmarks/results/attn_check_h200_sweep_20261127.json).
// (the results of a wider sweep, GB 2 included, are in the library's comment on DefaultCfg)
#define ATTN_SWEEP(X) X(8, 3, 4096, 4, false, 1) X(8, 3, 8192, 4, false, 1) X(8, 3, 8192, 4, true, 1)
// The register-streamed form's shapes (warps per block, loads of rows ahead per warp), every type: the
// first is the library's float32 default (head_dim 64 and 128).
#define ATTN_REG_SWEEP(X) X(16, 2) X(16, 3) X(16, 1) X(8, 4)
// The register-fed tensor-core form's shapes (warps per block, units of 8 rows ahead per warp), 16-bit types.
#define ATTN_RMMA_SWEEP(X) X(8, 1) X(8, 2) X(16, 1) X(12, 1) X(8, 3)

// The pair of tensor-core forms with the cp.async form's 3 stages (192 KiB; the library's pair has 2).
template <class T, int HD>
using PairSt3 = AttnPairCfg<AttnCfg<T, HD, 8, 3, 8192, true>, AttnRegMmaCfg<T, HD, 8, 2>, 1024>;

template <class T, bool MMA>
constexpr bool kSweepable = !MMA || sizeof(T) == 2;

// One tile configuration, GB of the query heads sharing a KV head per block.
template <class T, int HD, int GB, class Cfg>
static int ConfigAttention(int dt, const void* q, const void* k, const void* v, void* out, const AttnCase& c, MnPos pos) {
  return LaunchAttn<T, HD, GB, Cfg>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(out),
                                   c.B, c.T, c.H, c.KVH, c.max_seq, pos, g_scratch, nullptr, 1);
}

// Every sweep configuration against the host reference before it is timed: long caches, lengths that
// are not a multiple of any tile, position 0 and the last one, an invalid position.
template <class T, int HD>
static int CheckSweep(int dt, std::mt19937& rng) {
  const AttnCase cases[] = {{1, 1, 32, 8, HD, 8192, {8190}}, {2, 1, 32, 8, HD, 3001, {0, 3000}}, {2, 1, 8, 2, HD, 700, {-1, 333}}};
  int bad = 0;
  char name[64];
#define ATTN_CHECK_ONE(nw, st, stb, gb, mma, cap)                                                                 \
  if constexpr (kSweepable<T, mma>) {                                                                            \
    std::snprintf(name, sizeof name, "nw%d st%d %dK gb%d%s clu%d", nw, st, stb / 1024, gb, mma ? " mma" : "", cap); \
    g_attn_cluster_max = cap ? 8 : 0;                                                                                     \
    for (const AttnCase& c : cases)                                                                              \
      bad += !CheckAttention(c, dt, rng, ConfigAttention<T, HD, gb, AttnCfg<T, HD, nw, st, stb, mma>>, name);     \
    g_attn_cluster_max = 8;                                                                                       \
  }
  ATTN_SWEEP(ATTN_CHECK_ONE)
#undef ATTN_CHECK_ONE
#define ATTN_CHECK_REG(nw, u)                                 \
  for (const AttnCase& c : cases)                             \
    bad += !CheckAttention(c, dt, rng, ConfigAttention<T, HD, 4, AttnRegCfg<T, HD, nw, u>>, "regs nw" #nw " u" #u);
  ATTN_REG_SWEEP(ATTN_CHECK_REG)
#undef ATTN_CHECK_REG
#define ATTN_CHECK_RMMA(nw, u)                                                                                     \
  if constexpr (sizeof(T) == 2)                                                                                   \
    for (const AttnCase& c : cases)                                                                               \
      bad += !CheckAttention(c, dt, rng, ConfigAttention<T, HD, 4, AttnRegMmaCfg<T, HD, nw, u>>, "regmma nw" #nw " u" #u);
  ATTN_RMMA_SWEEP(ATTN_CHECK_RMMA)
#undef ATTN_CHECK_RMMA
  if constexpr (sizeof(T) == 2 && HD == 128)
    for (const AttnCase& c : cases) {
      bad += !CheckAttention(c, dt, rng, ConfigAttention<T, HD, 4, AttnCfg<T, HD, 8, 2, 8192, true>>, "nw8 st2 8K mma");
      bad += !CheckAttention(c, dt, rng, ConfigAttention<T, HD, 4, PairSt3<T, HD>>,
                             "pair st3");
    }
  return bad;
}

template <class T, int HD, int GB, class Cfg>
static void TimeAttnConfig(Timer& tm, const char* name, int dt, const void* q, const CacheSets& kv, void* o, int B, int L, int max_seq,
                           MnPos pos, double peak) {
  const int H = 32, KVH = 8;
  const double bytes = (double)B * (2.0 * L * KVH * HD + 2.0 * H * HD) * sizeof(T);
  int it = 0;
  auto launch = [&](cudaStream_t s) {
    LaunchAttn<T, HD, GB, Cfg>(static_cast<const T*>(q), static_cast<const T*>(kv.K(it)), static_cast<const T*>(kv.V(it)),
                               static_cast<T*>(o), B, 1, H, KVH, max_seq, pos, g_scratch, s, 1);
    ++it;
  };
  char cfg[96];
  const double graph = tm.Graph(launch, kv.GraphLaunches()), stream = tm.Stream(launch);
  cudaFuncAttributes fa;  // after the first launch (which raises the kernel's shared-memory limit)
  CK(cudaFuncGetAttributes(&fa, AttnSplit<T, HD, GB, Cfg>));
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, AttnSplit<T, HD, GB, Cfg>, Cfg::NW * 32, Cfg::SMEM));
  g_attn_skip_merge = true;
  const double split_only = tm.Graph(launch, kv.GraphLaunches());
  g_attn_skip_merge = false;
  std::snprintf(cfg, sizeof cfg, "%s hd%d", name, HD);
  Record("attention", kTypeName[dt], cfg, B, L, bytes, graph, stream, peak, &kv);
  std::printf("     regs %d spill %zu occ %d splits %d cluster %d; split pass alone %.2f us (%.0f%%)\n", fa.numRegs,
              (size_t)fa.localSizeBytes, occ, g_attn_last_splits, g_attn_last_cluster, split_only, 100.0 * bytes / split_only / 1e3 / peak);
}

// The library's configuration with the launch options the tuning compares: programmatic dependent
// launch, the splits' merge through a cluster (both on by default), the number of splits.
template <class T, int HD>
static void TimeDefaultVariants(Timer& tm, int dt, const void* q, const CacheSets& kv, void* o, int B, int L, int max_seq, MnPos pos,
                                double peak) {
  using Cfg = DefaultCfg<T, HD>;
  TimeAttnConfig<T, HD, 4, Cfg>(tm, "default", dt, q, kv, o, B, L, max_seq, pos, peak);
  if (L != 1 && L < 4096) return;
  g_attn_cluster_max = 0;  // the workspace and atomic-counter merge
  TimeAttnConfig<T, HD, 4, Cfg>(tm, "default no-cluster", dt, q, kv, o, B, L, max_seq, pos, peak);
  g_attn_cluster_max = 16;  // batch 1's 16 splits too, where 16-block clusters fit (non-portable size)
  TimeAttnConfig<T, HD, 4, Cfg>(tm, "default cluster16", dt, q, kv, o, B, L, max_seq, pos, peak);
  g_attn_cluster_max = 8;
  g_attn_blocks_per_sm = 0;  // as many blocks per SM as fit (more splits where two fit)
  TimeAttnConfig<T, HD, 4, Cfg>(tm, "default all-resident", dt, q, kv, o, B, L, max_seq, pos, peak);
  g_attn_blocks_per_sm = 1;
  g_attn_pdl = false;  // no overlap with the previous launch at all
  TimeAttnConfig<T, HD, 4, Cfg>(tm, "default no-PDL", dt, q, kv, o, B, L, max_seq, pos, peak);
  g_attn_pdl = true;
}

// The ceiling: a plain streaming read of the same K/V bytes (n16 16-byte chunks of each of K and V from
// the sets' bases: B * L rows), one launch per set in rotation, as the attention's launches read them.
static void TimePlainRead(Timer& tm, int dt, const CacheSets& kv, int64_t n16, int B, int L, int kvh, double peak) {
  float* sink = nullptr;
  CK(cudaMalloc(&sink, 4 * 132 * 64 * 8));
  const int sms = NumSMs();
  int it = 0;
  auto read = [&](cudaStream_t s) {
    ReadAll<<<sms * 8, 256, 0, s>>>(static_cast<const uint4*>(kv.K(it)), static_cast<const uint4*>(kv.V(it)), n16, sink);
    ++it;
  };
  Record("plain-read-kv", kTypeName[dt], "grid-stride 16B", B, L, 2.0 * n16 * 16, tm.Graph(read, kv.GraphLaunches()), tm.Stream(read),
         peak, &kv);
  if (B == 1) {  // the attention's pattern: a block per (KV head, split), 4 blocks per SM
    const int c16 = static_cast<int>(n16 / L / kvh), splits = sms * 4 / kvh;
    auto heads = [&](cudaStream_t s) {
      ReadHeads<<<dim3(kvh, splits), 256, 0, s>>>(static_cast<const uint4*>(kv.K(it)), static_cast<const uint4*>(kv.V(it)), L, kvh, c16,
                                                   sink);
      ++it;
    };
    Record("plain-read-kv", kTypeName[dt], "per KV head and split", B, L, 2.0 * n16 * 16, tm.Graph(heads, kv.GraphLaunches()),
           tm.Stream(heads), peak, &kv);
  }
  cudaFree(sink);
}

// Decode with 32 query heads over 8 KV heads: batch 1 up to 16384 cached, batch 8 up to 4096; the
// library's configuration, and with `sweep` the others at the lengths the goal names.
template <class T, int HD>
static void TimeAttention(Timer& tm, int dt, bool sweep, double peak) {
  const int H = 32, KVH = 8;
  for (int B : {1, 8}) {
    const int max_seq = B == 1 ? 16384 : 4096;
    std::vector<float> q((size_t)B * H * HD, 0.5f);
    void *dq = Upload(ToDevice(&q, dt)), *dout = nullptr;
    CK(cudaMalloc(&dout, q.size() * sizeof(T)));
    for (int L : {1, 512, 2048, 4096, 8192, 16384}) {
      if (L > max_seq) continue;
      const CacheSets kv(B, L, max_seq, (size_t)KVH * HD * sizeof(T));
      int64_t* dpos = nullptr;
      const MnPos pos = DevPositions(std::vector<int64_t>(B, L - 1), &dpos);
      TimeDefaultVariants<T, HD>(tm, dt, dq, kv, dout, B, L, max_seq, pos, peak);
      if (L >= 2048) TimePlainRead(tm, dt, kv, (int64_t)B * L * KVH * HD * sizeof(T) / 16, B, L, KVH, peak);
      if (sweep && (L == 1 || L >= 4096)) {
#define ATTN_TIME_ONE(nw, st, stb, gb, mma, cap)                                                                              \
  if constexpr (kSweepable<T, mma>) {                                                                                        \
    g_attn_cluster_max = cap ? 8 : 0;                                                                                                 \
    TimeAttnConfig<T, HD, gb, AttnCfg<T, HD, nw, st, stb, mma>>(tm, "nw" #nw " st" #st " " #stb " " #mma " clu" #cap, dt, dq, kv, \
                                                                dout, B, L, max_seq, pos, peak);                             \
    g_attn_cluster_max = 8;                                                                                                   \
  }
        ATTN_SWEEP(ATTN_TIME_ONE)
#undef ATTN_TIME_ONE
#define ATTN_TIME_REG(nw, u) \
  TimeAttnConfig<T, HD, 4, AttnRegCfg<T, HD, nw, u>>(tm, "regs nw" #nw " u" #u, dt, dq, kv, dout, B, L, max_seq, pos, peak);
        ATTN_REG_SWEEP(ATTN_TIME_REG)
#undef ATTN_TIME_REG
#define ATTN_TIME_RMMA(nw, u)                                                                                                  \
  if constexpr (sizeof(T) == 2)                                                                                               \
    TimeAttnConfig<T, HD, 4, AttnRegMmaCfg<T, HD, nw, u>>(tm, "regmma nw" #nw " u" #u, dt, dq, kv, dout, B, L, max_seq, pos, peak);
        ATTN_RMMA_SWEEP(ATTN_TIME_RMMA)
#undef ATTN_TIME_RMMA
        if constexpr (sizeof(T) == 2 && HD == 128) {
          TimeAttnConfig<T, HD, 4, AttnCfg<T, HD, 8, 2, 8192, true>>(tm, "nw8 st2 8192 mma", dt, dq, kv, dout, B, L, max_seq, pos, peak);
          TimeAttnConfig<T, HD, 4, PairSt3<T, HD>>(
              tm, "pair st3", dt, dq, kv, dout, B, L, max_seq, pos, peak);
        }
      }
      cudaFree(dpos);
    }
    const CacheSets kv(B, max_seq, max_seq, (size_t)KVH * HD * sizeof(T));
    TimePlainRead(tm, dt, kv, (int64_t)B * max_seq * KVH * HD * sizeof(T) / 16, B, max_seq, KVH, peak);
    for (void* p : {dq, dout}) cudaFree(p);
  }
}

// Chunks of T query rows (a prefill), SmolLM2-135M's heads (9 over 3, head_dim 64): the flash forward
// and the split-K kernel for every row, each forced (the library picks one per shape: FlashForChunk).
// The chunk's K/V were just written (a prefill writes them first), so one cache is reused: L2-resident.
// Bytes: the attended K/V rows once, q and the output; the kernels re-read them from L2.
template <class T>
static void TimePrefill(Timer& tm, int dt, double peak) {
  const int H = 9, KVH = 3, HD = 64;
  struct Chunk { int B, rows, max_seq, pos; };
  for (const Chunk c : {Chunk{1, 128, 256, 0}, Chunk{2, 128, 256, 0}, Chunk{4, 128, 256, 0}, Chunk{8, 128, 256, 0},
                        Chunk{1, 128, 4096, 0}, Chunk{8, 128, 4096, 0}, Chunk{1, 128, 4096, 1024}, Chunk{1, 128, 4096, 3968},
                        Chunk{8, 128, 4096, 3968}, Chunk{1, 16, 4096, 4000}, Chunk{8, 16, 4096, 4000}, Chunk{1, 16, 256, 0},
                        Chunk{1, 64, 4096, 2048}, Chunk{1, 32, 4096, 4000}, Chunk{2, 16, 4096, 1000}}) {
    std::vector<float> q((size_t)c.B * c.rows * H * HD, 0.5f), kv((size_t)c.B * c.max_seq * KVH * HD, 0.25f);
    void *dq = Upload(ToDevice(&q, dt)), *dk = Upload(ToDevice(&kv, dt)), *dv = Upload(ToDevice(&kv, dt)), *dout = nullptr;
    CK(cudaMalloc(&dout, q.size() * sizeof(T)));
    int64_t* dpos = nullptr;
    const MnPos pos = DevPositions(std::vector<int64_t>(c.B, c.pos), &dpos);
    const double rows = (double)c.B * (c.pos + c.rows);
    const double bytes = (2.0 * rows * KVH * HD + 2.0 * c.B * c.rows * H * HD) * sizeof(T);
    auto launch = [&](cudaStream_t s) { mn_cuda_cached_attention(dt, dq, dk, dv, dout, c.B, c.rows, H, KVH, HD, c.max_seq, pos, g_scratch, s); };
    const bool picked = FlashForChunk(c.B, c.rows, H, c.max_seq);
    char cfg[80];
    // the flash forward with its own key splits, without any, and the split-K kernel
    const struct { int flash, key_splits; const char* name; } kernels[] = {
        {1, 0, "flash"}, {1, 1, "flash-nosplit"}, {1, 4, "flash-ks4"}, {1, 8, "flash-ks8"}, {0, 0, "splitK"}};
    for (const auto& kn : kernels) {
      g_attn_flash = kn.flash;
      g_attn_key_splits = kn.key_splits;
      const bool mark = kn.flash ? picked && kn.key_splits == 0 : !picked;
      std::snprintf(cfg, sizeof cfg, "chunk-%s%s T=%d pos=%d max=%d", kn.name, mark ? "*" : "", c.rows, c.pos, c.max_seq);
      Record("attention", kTypeName[dt], cfg, c.B, c.pos + c.rows, bytes, tm.Graph(launch), tm.Stream(launch), peak, nullptr);
    }
    g_attn_flash = -1;
    g_attn_key_splits = 0;
    for (void* p : {dq, dk, dv, dout, static_cast<void*>(dpos)}) cudaFree(p);
  }
}

// The fixed cost of a launch: an empty kernel with the decode grid (128 blocks of 256 threads, 192 KiB
// of shared memory, one block per SM), with and without programmatic dependent launch.
static void TimeLaunchFloor(Timer& tm, double peak) {
  float* sink = nullptr;
  CK(cudaMalloc(&sink, 16));
  CK(cudaFuncSetAttribute(EmptyLaunch, cudaFuncAttributeMaxDynamicSharedMemorySize, 192 * 1024));
  for (int pdl : {1, 0}) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    auto launch = [&](cudaStream_t s) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(8, 16, 1);
      cfg.blockDim = dim3(256);
      cfg.dynamicSmemBytes = 192 * 1024;
      cfg.stream = s;
      cfg.attrs = &attr;
      cfg.numAttrs = pdl && HasPdl() ? 1 : 0;
      CK(cudaLaunchKernelEx(&cfg, EmptyLaunch, sink));
    };
    Record("empty-launch", "-", pdl ? "8x16x256 192K PDL" : "8x16x256 192K", 1, 0, 0.0, tm.Graph(launch), tm.Stream(launch), peak,
           nullptr);
  }
  cudaFree(sink);
}

static void TimeRope(Timer& tm, int dt, double peak) {
  const int H = 32, hd = 128, D = H * hd;
  std::vector<float> inv(hd / 2);
  for (int j = 0; j < hd / 2; ++j) inv[j] = powf(10000.f, -2.f * j / hd);
  for (int S : {1, 2048}) {
    std::vector<float> x((size_t)S * D, 0.5f);
    void* dx = Upload(ToDevice(&x, dt));
    void* dy = nullptr;
    CK(cudaMalloc(&dy, x.size() * ElemBytes(dt)));
    int64_t* dpos = nullptr;
    const MnPos pos = DevPositions({S == 1 ? 4095 : 0}, &dpos);
    auto launch = [&](cudaStream_t s) { mn_cuda_rope(dt, dx, dy, 1, S, D, hd, 0, pos, inv.data(), s); };
    Record("rope", kTypeName[dt], "default", 1, S, 2.0 * x.size() * ElemBytes(dt), tm.Graph(launch), tm.Stream(launch), peak, nullptr);
    for (void* p : {dx, dy, static_cast<void*>(dpos)}) cudaFree(p);
  }
}
