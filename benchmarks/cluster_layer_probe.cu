// Could ONE thread-block cluster run a SmolLM2-135M decode layer (fp16) faster than the DecodeLayer
// kernel, which spreads each layer over every SM and pays ~1 us per grid barrier? A cluster's blocks
// synchronise through distributed shared memory instead, but only its SMs stream the weights. This
// probe measures, on one GPU (sm_90), without ORT:
//   1. plain 16-byte loads (8 per thread in flight) from N SMs, as separate blocks and as clusters of
//      up to 16: the bandwidth one cluster can stream a layer's ~7.2 MB at;
//   2. TMA bulk copies alone (one thread keeps `slots` copies of `piece` bytes in flight per SM);
//   3. the layer's five products chained over 30 layers in one launch on one cluster (8 or 16 blocks): a
//      producer warp copies each block's rows of every phase into a shared-memory ring with TMA, running
//      ahead across phases and layers (weights do not depend on activations); 15 consumer warps wait for
//      a phase's input (each block's outputs: an mbarrier arrival on every block, then DSMEM reads) and
//      take the rows of each slot (float32 accumulation of fp16 weights). Shapes: q|k|v [960 x 576], an
//      attention stand-in reading 98 KB (128 cached rows of k and v), o [576 x 576], gate|up
//      [3072 x 576], down [576 x 1536]; each output is tanh(0.05 * dot) so 150 chained phases stay
//      bounded. Checked against plain per-phase kernels. Then parts switched off (mode bits: 1 products,
//      2 DSMEM gathers, 4 phase syncs; 8 switches the copies off, so the consumers run their control
//      code alone).
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

#include "../custom_ops/cuda_kernels.h"  // the element-type enum check_harness.cuh needs
#include "../custom_ops/check_harness.cuh"  // CK, the kernel harnesses' CUDA error check

namespace cg = cooperative_groups;

constexpr int kConsumerWarps = 15,  // with the producer, 16 warps: 128 registers each
              kConsumers = kConsumerWarps * 32, kThreads = kConsumers + 32;
constexpr int kMaxVec = 3072;
constexpr int kGatherPerThread = (kMaxVec + kConsumers - 1) / kConsumers;
constexpr int kSlotBytes = 32768;
constexpr int kPhases = 5;

struct Phase {
  int rows, cols;
  size_t offset;  // halves, into a layer
};

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

constexpr int kRowsP[kPhases] = {960, 384, 576, 3072, 576};
constexpr int kColsP[kPhases] = {576, 128, 576, 576, 1536};
constexpr size_t OffP(int p) { return p == 0 ? 0 : OffP(p - 1) + static_cast<size_t>(kRowsP[p - 1]) * kColsP[p - 1]; }
constexpr size_t kLayerHalves = OffP(kPhases);

// Phase P's shapes for clusters of C, all compile-time (with runtime shapes the warps' bookkeeping of
// slots and phases, integer divisions and reloads, took 15.3 us per layer on its own; 5.8 now).
template <int P, int C>
struct PhaseC {
  static constexpr int rows = kRowsP[P], cols = kColsP[P], vecs = cols / 8, NV = (vecs + 31) / 32, chunk = (rows + C - 1) / C,
                       per_slot = kSlotBytes / (cols * 2), next_cols = kColsP[(P + 1) % kPhases];
  static constexpr size_t offset = OffP(P);
  __device__ static int Lo(int rank) { return min(rows, rank * chunk); }
  __device__ static int Hi(int rank) { return min(rows, Lo(rank) + chunk); }
  __device__ static int Pieces(int rank) { return (Hi(rank) - Lo(rank) + per_slot - 1) / per_slot; }
};

// A position in the ring: the slot, and how many times the ring went round (its mbarriers' phase).
template <int kSlots>
struct SlotPos {
  int slot = 0;
  unsigned round = 0;
  __device__ void Next() {
    if (++slot == kSlots) slot = 0, ++round;
  }
};

// What a block's consumers work on: x (the phase's input) and the outputs in shared memory, the ring
// and its mbarriers (full / empty per slot, ready: two alternating phase barriers), and the mode.
struct Ctx {
  const float* x;
  float* x_w;
  float* outs;
  unsigned char* ring;
  uint64_t *full, *empty, *ready;
  int rank;
  bool compute, gather, sync, weights;
};

// The producer's copies of phase P: the block's rows, a slot at a time as the consumers free them.
template <int P, int C, int kSlots>
__device__ void ProducePhase(const __half* lw, int rank, unsigned char* ring, uint64_t* full, uint64_t* empty, SlotPos<kSlots>& pos) {
  using Ph = PhaseC<P, C>;
  const int lo = Ph::Lo(rank), hi = Ph::Hi(rank), pieces = Ph::Pieces(rank);
  for (int piece = 0; piece < pieces; ++piece, pos.Next()) {
    if (pos.round > 0) MbarWait(&empty[pos.slot], (pos.round - 1) & 1);
    const int r0 = lo + piece * Ph::per_slot, n = min(Ph::per_slot, hi - r0);
    const unsigned bytes = static_cast<unsigned>(n) * Ph::cols * 2;
    MbarExpect(&full[pos.slot], bytes);
    BulkCopy(ring + static_cast<size_t>(pos.slot) * kSlotBytes, lw + Ph::offset + static_cast<size_t>(r0) * Ph::cols, bytes, &full[pos.slot]);
  }
}

// Phase P on the consumers: each slot's rows (a warp per row), then the phase's sync (an mbarrier
// arrival on every block of the cluster, a wait on this block's) and the next phase's input gathered
// from every block's outputs (row r is block r / chunk's) through distributed shared memory.
template <int P, int C, int kSlots>
__device__ void ConsumePhase(const Ctx& c, unsigned step, SlotPos<kSlots>& pos, cg::cluster_group& cl) {
  using Ph = PhaseC<P, C>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lo = Ph::Lo(c.rank), hi = Ph::Hi(c.rank), pieces = Ph::Pieces(c.rank);
  float* out = c.outs + (step & 1) * kMaxVec;
  float xr[Ph::NV][8];
#pragma unroll
  for (int j = 0; j < Ph::NV; ++j) {
    const int col = lane + 32 * j;
    const float4 a = col < Ph::vecs ? reinterpret_cast<const float4*>(c.x)[2 * col] : make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 b = col < Ph::vecs ? reinterpret_cast<const float4*>(c.x)[2 * col + 1] : make_float4(0.f, 0.f, 0.f, 0.f);
    xr[j][0] = a.x, xr[j][1] = a.y, xr[j][2] = a.z, xr[j][3] = a.w, xr[j][4] = b.x, xr[j][5] = b.y, xr[j][6] = b.z, xr[j][7] = b.w;
  }
  for (int piece = 0; piece < pieces; ++piece, pos.Next()) {
    if (lane == 0 && c.weights) MbarWait(&c.full[pos.slot], pos.round & 1);
    __syncwarp();
    const int r0 = lo + piece * Ph::per_slot, n = min(Ph::per_slot, hi - r0);
    const uint4* slot = reinterpret_cast<const uint4*>(c.ring + static_cast<size_t>(pos.slot) * kSlotBytes);
    for (int i = warp; i < n; i += kConsumerWarps) {
      float acc = 0.f;
      if (c.compute) {
#pragma unroll
        for (int j = 0; j < Ph::NV; ++j) {
          const int col = lane + 32 * j;
          if (col < Ph::vecs) {
            const uint4 q = slot[i * Ph::vecs + col];
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
      }
      if (lane == 0) out[r0 + i] = c.compute ? tanhf(acc * 0.05f) : xr[0][0];
    }
    __syncwarp();
    if (lane == 0 && c.weights) MbarArrive(&c.empty[pos.slot]);
  }
  ConsumerSync();
  if (c.sync) {
    if (threadIdx.x < C) MbarArriveRemote(&c.ready[step & 1], threadIdx.x);
    if (lane == 0) MbarWaitCluster(&c.ready[step & 1], (step >> 1) & 1);
    __syncwarp();
  }
  float v[kGatherPerThread];
#pragma unroll
  for (int i = 0; i < kGatherPerThread; ++i) {
    const int k = threadIdx.x + i * kConsumers, r = k % Ph::rows;
    if (k < Ph::next_cols) v[i] = c.gather ? cl.map_shared_rank(out, r / Ph::chunk)[r] : out[r];
  }
#pragma unroll
  for (int i = 0; i < kGatherPerThread; ++i) {
    const int k = threadIdx.x + i * kConsumers;
    if (k < Ph::next_cols) c.x_w[k] = v[i];
  }
  ConsumerSync();
}

// `layers` layers of the five phases on one cluster of C blocks: a producer warp (TMA copies, running
// ahead across phases and layers), 15 consumer warps. mode bits: 1 products, 2 gathers, 4 syncs;
// 8: no copies (the consumers run their control code alone). y <- the final x of block 0.
template <int C, int kSlots>
__global__ void __launch_bounds__(kThreads, 1) Layers(const __half* w, int layers, int rotate, const float* x0, float* y, int mode) {
  extern __shared__ __align__(128) unsigned char smem[];
  cg::cluster_group cl = cg::this_cluster();
  const int rank = cl.block_rank();
  float* x = reinterpret_cast<float*>(smem + static_cast<size_t>(kSlots) * kSlotBytes);
  uint64_t* bars = reinterpret_cast<uint64_t*>(x + 3 * kMaxVec);
  Ctx c{x, x, x + kMaxVec, smem, bars, bars + kSlots, bars + 2 * kSlots, rank, (mode & 1) != 0, (mode & 2) != 0, (mode & 4) != 0, !(mode & 8)};
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      MbarInit(&c.full[s], 1);
      MbarInit(&c.empty[s], kConsumerWarps);
    }
    MbarInit(&c.ready[0], C);
    MbarInit(&c.ready[1], C);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  for (int k = threadIdx.x; k < kMaxVec; k += kThreads) x[k] = x0[k];
  cl.sync();
  if (threadIdx.x >= kConsumers) {
    if (threadIdx.x == kConsumers && c.weights) {
      SlotPos<kSlots> pos;
      for (int l = 0; l < layers; ++l) {
        const __half* lw = w + static_cast<size_t>(l % rotate) * kLayerHalves;
        ProducePhase<0, C, kSlots>(lw, rank, smem, c.full, c.empty, pos);
        ProducePhase<1, C, kSlots>(lw, rank, smem, c.full, c.empty, pos);
        ProducePhase<2, C, kSlots>(lw, rank, smem, c.full, c.empty, pos);
        ProducePhase<3, C, kSlots>(lw, rank, smem, c.full, c.empty, pos);
        ProducePhase<4, C, kSlots>(lw, rank, smem, c.full, c.empty, pos);
      }
    }
    __syncwarp();
  } else {
    SlotPos<kSlots> pos;
    unsigned step = 0;
    for (int l = 0; l < layers; ++l) {
      ConsumePhase<0, C, kSlots>(c, step++, pos, cl);
      ConsumePhase<1, C, kSlots>(c, step++, pos, cl);
      ConsumePhase<2, C, kSlots>(c, step++, pos, cl);
      ConsumePhase<3, C, kSlots>(c, step++, pos, cl);
      ConsumePhase<4, C, kSlots>(c, step++, pos, cl);
    }
    if (rank == 0)
      for (int k = threadIdx.x; k < kMaxVec; k += kConsumers) y[k] = x[k];
  }
  cl.sync();
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
static std::vector<float> Reference(const __half* w, int layers, const float* x0, float* rx, float* rout) {
  CK(cudaMemcpy(rx, x0, kMaxVec * 4, cudaMemcpyDeviceToDevice));
  for (int l = 0; l < layers; ++l)
    for (int p = 0; p < kPhases; ++p) {
      const Phase q{kRowsP[p], kColsP[p], OffP(p) + static_cast<size_t>(l) * kLayerHalves};
      RefPhase<<<(q.rows + 7) / 8, 256>>>(w, q, rx, rout);
      RefNext<<<1, 1024>>>(rout, q.rows, rx);
    }
  std::vector<float> ref(kMaxVec);
  CK(cudaMemcpy(ref.data(), rx, kMaxVec * 4, cudaMemcpyDeviceToHost));
  return ref;
}

// 3. the layer chain on one cluster of C blocks, 5 slots; returns how many checked runs differ from the reference.
template <int C>
static int ProbeChain(const __half* w, int layers, const std::vector<float>& ref, const float* x0, float* y) {
  constexpr int kSlots = 5;
  const size_t smem = static_cast<size_t>(kSlots) * kSlotBytes + 3 * kMaxVec * 4 + (2 * kSlots + 2) * 8;
  CK(cudaFuncSetAttribute(Layers<C, kSlots>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaFuncSetAttribute(Layers<C, kSlots>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int failed = 0;
  std::vector<float> got(kMaxVec);
  for (int mode : {7, 6, 4, 0, 14, 12, 8})
    for (int rotate : {layers, 1}) {
      if (rotate == 1 && mode != 7 && mode != 0) continue;
      std::vector<float> t;
      for (int rep = 0; rep < 7; ++rep) {
        CK(cudaMemset(y, 0, kMaxVec * 4));
        t.push_back(TimeLaunch(Layers<C, kSlots>, C, C, kThreads, smem, w, layers, rotate, x0, y, mode) * 1e3f / layers);
      }
      const bool checked = mode == 7 && rotate == layers;
      double err = 0;
      if (checked) {
        CK(cudaMemcpy(got.data(), y, kMaxVec * 4, cudaMemcpyDeviceToHost));
        for (int k = 0; k < kColsP[0]; ++k) err = std::max(err, static_cast<double>(std::fabs(got[k] - ref[k])));
        failed += !(err < 1e-4);
      }
      printf("layer chain, cluster of %2d, products %d gathers %d syncs %d, weights %s: %6.2f us per layer (%.2f-%.2f)", C, mode & 1,
             (mode >> 1) & 1, (mode >> 2) & 1, mode & 8 ? "none (no copies)" : rotate == 1 ? "one layer's (L2)" : "30 layers' (DRAM)",
             Median(t), *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()));
      if (checked) printf(", max |error| vs reference %.1e", err);
      printf("\n");
    }
  return failed;
}

int main() {
  const int layers = 30;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs; layer %.2f MB fp16, %d distinct layers (%.0f MB: past the L2)\n", prop.name, prop.multiProcessorCount,
         kLayerHalves * 2 / 1e6, layers, kLayerHalves * 2.0 * layers / 1e6);
  __half* w;
  CK(cudaMalloc(&w, kLayerHalves * 2 * layers));
  {
    std::vector<__half> host(kLayerHalves * layers);
    for (size_t i = 0; i < host.size(); ++i) host[i] = __float2half(((i * 2654435761u) >> 20 & 1023) / 1024.f - 0.5f);
    CK(cudaMemcpy(w, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  }
  float *x0, *y, *rx, *rout;
  for (float** p : {&x0, &y, &rx, &rout}) CK(cudaMalloc(p, kMaxVec * 4));
  const size_t n16 = kLayerHalves * 2 * layers / 16;
  ProbeStreams(reinterpret_cast<const uint4*>(w), n16, reinterpret_cast<unsigned*>(y), prop.multiProcessorCount);
  ProbeTma(reinterpret_cast<const uint4*>(w), n16, reinterpret_cast<unsigned*>(y), prop.multiProcessorCount);
  {
    std::vector<float> h(kMaxVec);
    for (int k = 0; k < kMaxVec; ++k) h[k] = std::sin(0.1f * k);
    CK(cudaMemcpy(x0, h.data(), kMaxVec * 4, cudaMemcpyHostToDevice));
  }
  const std::vector<float> ref = Reference(w, layers, x0, rx, rout);
  const int failed = ProbeChain<8>(w, layers, ref, x0, y) + ProbeChain<16>(w, layers, ref, x0, y);
  printf(failed ? "FAILED: the layer chain differs from the reference\n" : "the layer chain matches the reference\n");
  return failed ? 1 : 0;
}
