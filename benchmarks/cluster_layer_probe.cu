// Could ONE thread-block cluster run a SmolLM2-135M decode layer (fp16) faster than the DecodeLayer
// kernel, which spreads each layer over every SM and pays ~1 us per grid barrier? A cluster's blocks
// synchronise through distributed shared memory instead, but only its SMs stream the weights. This
// probe measures, on one GPU (sm_90), without ORT:
//   1. plain 16-byte loads (8 per thread in flight) from N SMs, as separate blocks and as clusters of
//      up to 16: the bandwidth one cluster can stream a layer's ~7.2 MB at;
//   2. TMA bulk copies alone (one thread keeps `slots` copies of `piece` bytes in flight per SM);
//   3. the layer's five products chained over 30 layers in one launch on one cluster (8 or 16 blocks): a
//      producer warp copies each block's rows of every phase into a shared-memory ring with TMA, running
//      ahead across phases and layers (weights do not depend on activations); 16 consumer warps wait for
//      a phase's input (each block's outputs: an mbarrier arrival on every block, then DSMEM reads) and
//      take the rows of each slot (float32 accumulation of fp16 weights). Shapes: q|k|v [960 x 576], an
//      attention stand-in reading 98 KB (128 cached rows of k and v), o [576 x 576], gate|up
//      [3072 x 576], down [576 x 1536]; each output is tanh(0.05 * dot) so 150 chained phases stay
//      bounded. Checked against plain per-phase kernels. Then parts switched off (mode bits: 1 products,
//      2 DSMEM gathers, 4 phase syncs; 8 switches the copies off, so the consumers run their control
//      code alone), and the weights laid out block by block (one contiguous stretch per block and layer).
// No norms, RoPE or softmax: it bounds the design, it is not a kernel. Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90 -o cluster_layer_probe benchmarks/cluster_layer_probe.cu && ./cluster_layer_probe
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e = (x);                                                       \
    if (e != cudaSuccess) {                                                    \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

constexpr int kConsumerWarps = 16, kConsumers = kConsumerWarps * 32, kThreads = kConsumers + 32;
constexpr int kMaxVec = 3072;
constexpr int kSlotBytes = 32768;
constexpr int kPhases = 5;

struct Phase {
  int rows, cols;
  size_t offset;  // halves, into a layer
};
__constant__ Phase c_ph[kPhases];

__device__ __forceinline__ unsigned Addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void MbarInit(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(Addr(b)), "r"(count));
}
__device__ __forceinline__ void MbarExpect(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(Addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(Addr(b)) : "memory");
}
// Arrive on the mbarrier at the same offset in block `rank` of the cluster, releasing this thread's
// (and, through the preceding block barrier, the consumers') shared-memory writes cluster-wide.
__device__ __forceinline__ void MbarArriveRemote(uint64_t* b, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(Addr(b)), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void MbarWait(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(Addr(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void MbarWaitCluster(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(
          Addr(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void BulkCopy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(Addr(dst)),
               "l"(src), "r"(bytes), "r"(Addr(bar))
               : "memory");
}
__device__ __forceinline__ void ConsumerSync() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory"); }

// The block's rows of phase ph: [lo, hi); rows per slot; slots.
struct Share {
  int lo, hi, per_slot, pieces;
  __device__ Share(const Phase& ph, int rank, int C) {
    const int chunk = (ph.rows + C - 1) / C;
    lo = min(ph.rows, rank * chunk);
    hi = min(ph.rows, lo + chunk);
    per_slot = kSlotBytes / (ph.cols * 2);
    pieces = (hi - lo + per_slot - 1) / per_slot;
  }
};

template <int NV>
__device__ void Consume(const Phase& ph, const Share& sh, const float* x, float* out, unsigned char* ring, uint64_t* full,
                        uint64_t* empty, int slots, unsigned& seq, bool compute, bool weights) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, vecs = ph.cols / 8;
  float xr[NV][8];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = lane + 32 * j;
#pragma unroll
    for (int u = 0; u < 8; ++u) xr[j][u] = c < vecs ? x[c * 8 + u] : 0.f;
  }
  for (int piece = 0; piece < sh.pieces; ++piece, ++seq) {
    const int s = seq % slots;
    if (lane == 0 && weights) MbarWait(&full[s], (seq / slots) & 1);
    __syncwarp();
    const int r0 = sh.lo + piece * sh.per_slot, n = min(sh.per_slot, sh.hi - r0);
    const uint4* slot = reinterpret_cast<const uint4*>(ring + static_cast<size_t>(s) * kSlotBytes);
    for (int i = warp; i < n; i += kConsumerWarps) {
      if (!compute) {
        if (lane == 0) out[r0 + i] = xr[0][0];
        continue;
      }
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        const int c = lane + 32 * j;
        if (c < vecs) {
          const uint4 q = slot[i * vecs + c];
          const __half2* h = reinterpret_cast<const __half2*>(&q);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float2 f = __half22float2(h[u]);
            acc += f.x * xr[j][2 * u] + f.y * xr[j][2 * u + 1];
          }
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) out[r0 + i] = tanhf(acc * 0.05f);
    }
    __syncwarp();
    if (lane == 0 && weights) MbarArrive(&empty[s]);
  }
}

// The producer: the block's rows of every phase of every layer into the ring, a slot at a time as the
// consumers free them. `packed`: w holds each layer's rows block by block ([layer][rank][phase rows]),
// so a block's copies walk one contiguous stretch per layer instead of five.
__device__ void Produce(const __half* w, size_t layer_halves, int layers, int rotate, int slots, bool packed, int rank, int C,
                        unsigned char* ring, uint64_t* full, uint64_t* empty) {
  size_t base = 0;  // the block's stretch in a packed layer
  for (int r = 0; packed && r < rank; ++r)
    for (int p = 0; p < kPhases; ++p) {
      const Share other(c_ph[p], r, C);
      base += static_cast<size_t>(other.hi - other.lo) * c_ph[p].cols;
    }
  unsigned seq = 0;
  for (int l = 0; l < layers; ++l) {
    const __half* lw = w + static_cast<size_t>(l % rotate) * layer_halves;
    size_t next = base;
    for (int p = 0; p < kPhases; ++p) {
      const Phase ph = c_ph[p];
      const Share sh(ph, rank, C);
      for (int piece = 0; piece < sh.pieces; ++piece, ++seq) {
        const int s = seq % slots;
        if (seq >= static_cast<unsigned>(slots)) MbarWait(&empty[s], ((seq / slots) - 1) & 1);
        const int r0 = sh.lo + piece * sh.per_slot, n = min(sh.per_slot, sh.hi - r0);
        const unsigned bytes = static_cast<unsigned>(n) * ph.cols * 2;
        MbarExpect(&full[s], bytes);
        const __half* src = packed ? lw + next : lw + ph.offset + static_cast<size_t>(r0) * ph.cols;
        next += static_cast<size_t>(n) * ph.cols;
        BulkCopy(ring + static_cast<size_t>(s) * kSlotBytes, src, bytes, &full[s]);
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1) Layers(const __half* w, size_t layer_halves, int layers, int rotate, int slots,
                                                      const float* x0, float* y, int mode, bool packed) {
  const bool compute = mode & 1, gather = mode & 2, sync = mode & 4, weights = !(mode & 8);
  extern __shared__ __align__(128) unsigned char smem[];
  cg::cluster_group cl = cg::this_cluster();
  const int C = cl.num_blocks(), rank = cl.block_rank();
  unsigned char* ring = smem;
  float* x = reinterpret_cast<float*>(smem + static_cast<size_t>(slots) * kSlotBytes);
  float* outs = x + kMaxVec;  // [2][kMaxVec]
  uint64_t* bars = reinterpret_cast<uint64_t*>(outs + 2 * kMaxVec);
  uint64_t *full = bars, *empty = bars + slots, *ready = bars + 2 * slots;  // ready[2]
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) {
      MbarInit(&full[s], 1);
      MbarInit(&empty[s], kConsumerWarps);
    }
    MbarInit(&ready[0], C);
    MbarInit(&ready[1], C);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  for (int k = threadIdx.x; k < kMaxVec; k += kThreads) x[k] = x0[k];
  cl.sync();  // barriers initialised everywhere before any remote arrival
  if (threadIdx.x >= kConsumers) {  // the producer warp
    if (threadIdx.x == kConsumers && weights) Produce(w, layer_halves, layers, rotate, slots, packed, rank, C, ring, full, empty);
    __syncwarp();  // the warp whole again for the cluster barrier
  } else {
    unsigned seq = 0, step = 0;
    for (int l = 0; l < layers; ++l) {
      for (int p = 0; p < kPhases; ++p, ++step) {
        const Phase ph = c_ph[p];
        const Share sh(ph, rank, C);
        float* out = outs + (step & 1) * kMaxVec;
        if (ph.cols <= 256) Consume<1>(ph, sh, x, out, ring, full, empty, slots, seq, compute, weights);
        else if (ph.cols <= 768) Consume<3>(ph, sh, x, out, ring, full, empty, slots, seq, compute, weights);
        else Consume<6>(ph, sh, x, out, ring, full, empty, slots, seq, compute, weights);
        ConsumerSync();  // the block's outputs written (and x read by all) before the arrivals
        if (sync) {
          if (threadIdx.x < C) MbarArriveRemote(&ready[step & 1], threadIdx.x);
          if (threadIdx.x % 32 == 0) MbarWaitCluster(&ready[step & 1], (step >> 1) & 1);
          __syncwarp();
        }
        // x <- every block's outputs (row r is block r / chunk's), the next phase's length
        const int next_cols = c_ph[(p + 1) % kPhases].cols, chunk = (ph.rows + C - 1) / C;
        float v[kMaxVec / kConsumers];
#pragma unroll
        for (int i = 0; i < kMaxVec / kConsumers; ++i) {
          const int k = threadIdx.x + i * kConsumers, r = k % ph.rows;
          if (k < next_cols) v[i] = gather ? cl.map_shared_rank(out, r / chunk)[r] : out[r];
        }
#pragma unroll
        for (int i = 0; i < kMaxVec / kConsumers; ++i) {
          const int k = threadIdx.x + i * kConsumers;
          if (k < next_cols) x[k] = v[i];
        }
        ConsumerSync();
      }
    }
    if (rank == 0)
      for (int k = threadIdx.x; k < kMaxVec; k += kConsumers) y[k] = x[k];
  }
  cl.sync();  // no block exits while another may still read its shared memory
}


// The reference: one warp per row, straight from global memory.
__global__ void RefPhase(const __half* w, Phase ph, const float* x, float* out) {
  const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= ph.rows) return;
  float acc = 0.f;
  for (int c = lane; c < ph.cols; c += 32) acc += __half2float(w[ph.offset + static_cast<size_t>(row) * ph.cols + c]) * x[c];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[row] = tanhf(acc * 0.05f);
}
__global__ void RefNext(const float* out, int rows, float* x) {
  for (int k = threadIdx.x; k < kMaxVec; k += blockDim.x) x[k] = out[k % rows];
}

// The streaming ceiling of C SMs: each block xors its contiguous share of `bytes`, 8 loads per thread in flight.
__global__ void __launch_bounds__(kThreads, 1) Stream(const uint4* w, size_t n, unsigned* y) {
  const size_t share = (n + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * share, hi = min(n, lo + share);
  unsigned acc = 0;
  for (size_t i = lo + threadIdx.x; i < hi; i += 8 * kThreads) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = i + u * kThreads < hi ? __ldg(w + i + u * kThreads) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) y[0] = acc;
}


// Pure TMA ingest of one SM: thread 0 keeps `slots` bulk copies of `piece` bytes in flight into a ring
// (a slot is reused once its copy landed), over the block's contiguous share of n uint4.
__global__ void TmaStream(const uint4* w, size_t n, int slots, unsigned piece, unsigned* y) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ uint64_t full[8];
  const size_t share = (n + gridDim.x - 1) / gridDim.x * 16, lo = blockIdx.x * share, hi = min(n * 16, lo + share);
  if (threadIdx.x != 0) return;
  for (int s = 0; s < slots; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(Addr(&full[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const char* src = reinterpret_cast<const char*>(w);
  unsigned k = 0;
  for (size_t off = lo; off < hi; off += piece, ++k) {
    const int s = k % slots;
    if (k >= static_cast<unsigned>(slots)) {
      const unsigned parity = ((k / slots) - 1) & 1;
      asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(Addr(&full[s])), "r"(parity) : "memory");
    }
    const unsigned bytes = static_cast<unsigned>(min(static_cast<size_t>(piece), hi - off));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(Addr(&full[s])), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(Addr(ring + static_cast<size_t>(s) * piece)),
                 "l"(src + off), "r"(bytes), "r"(Addr(&full[s])) : "memory");
  }
  for (unsigned j = (k > static_cast<unsigned>(slots) ? k - slots : 0); j < k; ++j) {
    const int s = j % slots;
    const unsigned parity = (j / slots) & 1;
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(Addr(&full[s])), "r"(parity) : "memory");
  }
  if (ring[5] == 123 && y) y[1] = ring[7];
}


// One launch of `kernel` with a cluster of `cluster` blocks (1: none) of `threads`; returns its time in ms.
template <class K, class... Args>
static float TimeLaunch(K kernel, int blocks, int cluster, int threads, size_t smem, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms;
}

static float Median(std::vector<float> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// 1. plain loads from C SMs, as separate blocks and as clusters of up to 16.
static void ProbeStreams(const uint4* w16, size_t n16, unsigned* sink, int sms) {
  CK(cudaFuncSetAttribute(Stream, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (int clustered = 0; clustered < 2; ++clustered)
    for (int C : {1, 8, 16, 32, sms}) {
      const int cluster = clustered ? (C <= 16 ? C : C % 16 == 0 ? 16 : 1) : 1;
      if (clustered && cluster == 1 && C > 1) continue;
      std::vector<float> t;
      for (int rep = 0; rep < 5; ++rep) t.push_back(TimeLaunch(Stream, C, cluster, kThreads, 0, w16, n16, sink));
      const double gbs = n16 * 16 / (Median(t) * 1e-3) / 1e9;
      printf("plain loads, %3d SMs%s: %5.0f GB/s (%5.1f per SM)\n", C, clustered ? " in clusters of 16" : "                  ", gbs, gbs / C);
    }
}

// 2. TMA bulk copies alone.
static void ProbeTma(const uint4* w16, size_t n16, unsigned* sink, int sms) {
  CK(cudaFuncSetAttribute(TmaStream, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  for (unsigned piece : {8192u, 32768u})
    for (int slots : {2, 6})
      for (int C : {1, 16, sms}) {
        std::vector<float> t;
        for (int rep = 0; rep < 5; ++rep)
          t.push_back(TimeLaunch(TmaStream, C, 1, 32, static_cast<size_t>(piece) * slots, w16, n16, slots, piece, sink));
        const double gbs = n16 * 16 / (Median(t) * 1e-3) / 1e9;
        printf("TMA alone, %5u B x %d in flight, %3d SMs: %5.0f GB/s (%5.1f per SM)\n", piece, slots, C, gbs, gbs / C);
      }
}

// The reference's final x after `layers` layers from x0 (plain per-phase kernels), copied to the host.
static std::vector<float> Reference(const __half* w, const Phase* ph, size_t layer_halves, int layers, const float* x0, float* rx,
                                    float* rout) {
  CK(cudaMemcpy(rx, x0, kMaxVec * 4, cudaMemcpyDeviceToDevice));
  for (int l = 0; l < layers; ++l)
    for (int p = 0; p < kPhases; ++p) {
      Phase q = ph[p];
      q.offset += static_cast<size_t>(l) * layer_halves;
      RefPhase<<<(q.rows + 7) / 8, 256>>>(w, q, rx, rout);
      RefNext<<<1, 1024>>>(rout, q.rows, rx);
    }
  std::vector<float> ref(kMaxVec);
  CK(cudaMemcpy(ref.data(), rx, kMaxVec * 4, cudaMemcpyDeviceToHost));
  return ref;
}

// One configuration of the layer chain, timed (and checked where everything runs); false on a mismatch.
struct ChainRun {
  const __half* w;
  size_t layer_halves;
  int layers, C, slots, mode, rotate;
  bool packed;
};
static bool RunChain(const ChainRun& r, const std::vector<float>& ref, const float* x0, float* y) {
  const size_t smem = static_cast<size_t>(r.slots) * kSlotBytes + 3 * kMaxVec * 4 + (2 * r.slots + 2) * 8;
  CK(cudaFuncSetAttribute(Layers, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  std::vector<float> t;
  for (int rep = 0; rep < 7; ++rep) {
    CK(cudaMemset(y, 0, kMaxVec * 4));
    t.push_back(TimeLaunch(Layers, r.C, r.C, kThreads, smem, r.w, r.layer_halves, r.layers, r.rotate, r.slots, x0, y, r.mode, r.packed) *
                1e3f / r.layers);
  }
  const bool checked = r.mode == 7 && r.rotate == r.layers;
  double err = 0;
  if (checked) {
    std::vector<float> got(kMaxVec);
    CK(cudaMemcpy(got.data(), y, kMaxVec * 4, cudaMemcpyDeviceToHost));
    for (int k = 0; k < 576; ++k) err = std::max(err, static_cast<double>(std::fabs(got[k] - ref[k])));  // phase 0's input
  }
  printf("layer chain, cluster of %2d, %d slots, products %d gathers %d syncs %d, weights %s%s: %6.2f us per layer (%.2f-%.2f)", r.C,
         r.slots, r.mode & 1, (r.mode >> 1) & 1, (r.mode >> 2) & 1,
         r.mode & 8 ? "none (no copies)" : r.rotate == 1 ? "one layer's (L2)" : "30 layers' (DRAM)",
         r.packed ? ", packed by block" : "", Median(t), *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()));
  if (checked) printf(", max |error| vs reference %.1e", err);
  printf("\n");
  return !checked || err < 1e-4;
}

// 3. the layer chain on one cluster (w as the model lays it out; packed16: each layer's rows block by
// block for clusters of 16); returns how many checked runs differ from the reference.
static int ProbeChain(const __half* w, const __half* packed16, size_t layer_halves, int layers, const std::vector<float>& ref,
                      const float* x0, float* y) {
  CK(cudaFuncSetAttribute(Layers, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int failed = 0;
  for (int C : {8, 16})
    for (int slots : {2, 5})
      for (int mode : {7, 6, 4, 0})
        for (int rotate : {layers, 1})
          if (rotate == layers || mode == 7 || mode == 0)
            failed += !RunChain({w, layer_halves, layers, C, slots, mode, rotate, false}, ref, x0, y);
  for (int C : {8, 16})
    for (int mode : {8, 12, 14}) failed += !RunChain({w, layer_halves, layers, C, 5, mode, layers, false}, ref, x0, y);
  for (int mode : {7, 6, 4, 0})
    for (int rotate : {layers, 1})
      if (rotate == layers || mode == 7 || mode == 0) failed += !RunChain({packed16, layer_halves, layers, 16, 5, mode, rotate, true}, ref, x0, y);
  return failed;
}

// Each layer's rows block by block for a cluster of C: [layer][rank][phase][the rank's rows].
static std::vector<__half> PackByBlock(const std::vector<__half>& w, const Phase* ph, size_t layer_halves, int layers, int C) {
  std::vector<__half> packed;
  packed.reserve(w.size());
  for (int l = 0; l < layers; ++l)
    for (int r = 0; r < C; ++r)
      for (int p = 0; p < kPhases; ++p) {
        const int chunk = (ph[p].rows + C - 1) / C, lo = std::min(ph[p].rows, r * chunk), hi = std::min(ph[p].rows, lo + chunk);
        const size_t first = l * layer_halves + ph[p].offset + static_cast<size_t>(lo) * ph[p].cols;
        packed.insert(packed.end(), w.begin() + first, w.begin() + first + static_cast<size_t>(hi - lo) * ph[p].cols);
      }
  return packed;
}

int main() {
  Phase ph[kPhases] = {{960, 576, 0}, {384, 128, 0}, {576, 576, 0}, {3072, 576, 0}, {576, 1536, 0}};
  size_t off = 0;
  for (auto& p : ph) {
    p.offset = off;
    off += static_cast<size_t>(p.rows) * p.cols;
  }
  const size_t layer_halves = off;
  CK(cudaMemcpyToSymbol(c_ph, ph, sizeof ph));
  const int layers = 30;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs; layer %.2f MB fp16, %d distinct layers (%.0f MB: past the L2)\n", prop.name, prop.multiProcessorCount,
         layer_halves * 2 / 1e6, layers, layer_halves * 2.0 * layers / 1e6);
  __half *w, *packed16;
  CK(cudaMalloc(&w, layer_halves * 2 * layers));
  CK(cudaMalloc(&packed16, layer_halves * 2 * layers));
  {
    std::vector<__half> host(layer_halves * layers);
    for (size_t i = 0; i < host.size(); ++i) host[i] = __float2half(((i * 2654435761u) >> 20 & 1023) / 1024.f - 0.5f);
    CK(cudaMemcpy(w, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    const std::vector<__half> packed = PackByBlock(host, ph, layer_halves, layers, 16);
    CK(cudaMemcpy(packed16, packed.data(), packed.size() * 2, cudaMemcpyHostToDevice));
  }
  float *x0, *y, *rx, *rout;
  for (float** p : {&x0, &y, &rx, &rout}) CK(cudaMalloc(p, kMaxVec * 4));
  const size_t n16 = layer_halves * 2 * layers / 16;
  ProbeStreams(reinterpret_cast<const uint4*>(w), n16, reinterpret_cast<unsigned*>(y), prop.multiProcessorCount);
  ProbeTma(reinterpret_cast<const uint4*>(w), n16, reinterpret_cast<unsigned*>(y), prop.multiProcessorCount);
  {
    std::vector<float> h(kMaxVec);
    for (int k = 0; k < kMaxVec; ++k) h[k] = std::sin(0.1f * k);
    CK(cudaMemcpy(x0, h.data(), kMaxVec * 4, cudaMemcpyHostToDevice));
  }
  const std::vector<float> ref = Reference(w, ph, layer_halves, layers, x0, rx, rout);
  const int failed = ProbeChain(w, packed16, layer_halves, layers, ref, x0, y);
  printf(failed ? "FAILED: the layer chain differs from the reference\n" : "the layer chain matches the reference\n");
  return failed ? 1 : 0;
}
