// Key splits of the tensor-core forward's KV-cache form (cuda_flash_mma.cuh; included there, inside
// namespace mma). A chunk of few query rows far into a long cache gives few blocks (one per 64 rows
// of one head), each walking thousands of keys alone, one L2 round trip per tile: on an H200, 128
// rows at position 3968 of SmolLM2-135M's 9 heads are 18 blocks on 132 SMs. So the keys of each row
// block are split over Dims::ks blocks (grid z, flash-decoding style): split z walks its share of the
// row block's key tiles and leaves an unnormalised partial (acc[hd], running max m, sum l) per query
// row in the workspace, and a second kernel (a programmatic dependent launch) merges the partials of
// each row, a thread per 4 columns. Shares are computed on the device from the position, at least
// kMinTiles tiles each, so a chunk near the start of the cache uses fewer splits; where one split
// holds every tile it writes the output itself and the merge leaves that row block alone.
#pragma once

namespace mma {

constexpr int kMinTiles = 4;  // key tiles per split at least: below that the merge costs more than it saves

// The key tiles [t0, t1) of split z of a row block that attends n_tiles tiles, and how many splits
// have any (the others return before reading K or V).
struct KeySlice {
  int t0, t1, active;
};

__device__ __forceinline__ KeySlice KeySliceOf(int n_tiles, int ks, int z) {
  const int per = max(kMinTiles, (n_tiles + ks - 1) / ks);
  const int active = min(ks, max(1, (n_tiles + per - 1) / per));
  return KeySlice{z * per, min((z + 1) * per, n_tiles), active};
}

// The key tiles a row block starting at query row i0 (of 16 * W) attends, from its position `off`.
template <typename T, int D, int W>
__device__ __forceinline__ int RowBlockTiles(const Dims& p, int64_t off, int64_t i0) {
  const int64_t kend = min(p.S, off + min(p.T, i0 + 16 * W));
  return static_cast<int>((kend + Tiles<T, D>::BC - 1) / Tiles<T, D>::BC);
}

// Split blockIdx.z's partial of its warp's rows into the workspace ([B*H*T][ks] acc[hd], (m, l)):
// acc unnormalised, m the running maximum of the base-2 scores, l the row's sum (already summed over
// the 4 lanes of the row).
template <typename T, int D>
__device__ __forceinline__ void StoreKeySplit(const Dims& p, const float (&acc)[D / 8][4], const float (&m)[2], const float (&l)[2],
                                              int64_t b, int64_t h, int64_t r0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = r0 + g + 8 * half;
    if (i >= p.T) continue;
    const int64_t slot = ((b * p.H + h) * p.T + i) * p.ks + blockIdx.z;
    float* dst = p.ws_acc + slot * p.hd;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const int d = 8 * dn + 2 * t;
      if (d < p.hd) *reinterpret_cast<float2*>(dst + d) = make_float2(acc[dn][2 * half], acc[dn][2 * half + 1]);
    }
    if (t == 0) p.ws_ml[slot] = make_float2(m[half], l[half]);
  }
}

// y = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M), M = max_s m_s: a thread per (query row, head, 4
// columns), the splits' loads 8 at a time in flight, folded with a running maximum. A split whose keys
// a row does not see (all hidden by the causal bound) has m = -inf, l = 0 and weighs 0; split 0 holds
// key 0, which every row sees, so the sum is positive. Rows of an invalid position (NaN, written by
// split 0) and of row blocks with one split (written by it) are left alone.
template <typename T, int D, int W>
__global__ void __launch_bounds__(128) MergeKeySplits(T* __restrict__ y, Dims p) {
  GridDependencyWait();  // the splits' partials
  const int64_t cols = p.hd / 4, e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (e >= p.B * p.H * p.T * cols) return;
  const int64_t row = e / cols, i = row % p.T, b = row / p.T / p.H, h = row / p.T % p.H;
  const int d = 4 * static_cast<int>(e % cols);
  const int64_t off = LoadPos(p.pos, b);
  if (off < 0 || off > p.S - p.T) return;
  const int active = KeySliceOf(RowBlockTiles<T, D, W>(p, off, i / (16 * W) * (16 * W)), p.ks, 0).active;
  if (active <= 1) return;
  const float2* ml = p.ws_ml + row * p.ks;
  const float* acc = p.ws_acc + row * p.ks * p.hd + d;
  float M = -INFINITY, L = 0.f;
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = 0; s0 < active; s0 += 8) {
    float2 mls[8];
    float4 xs[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const bool ok = s0 + u < active;
      mls[u] = ok ? __ldcg(ml + s0 + u) : make_float2(-INFINITY, 0.f);
      xs[u] = ok ? __ldcg(reinterpret_cast<const float4*>(acc + (int64_t)(s0 + u) * p.hd)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) FoldPartial(mls[u], xs[u], M, L, a);
  }
  const float inv = 1.f / L;
  T* out = y + ((b * p.T + i) * p.H + h) * p.hd + d;
  Op<T>::Store2(out, a.x * inv, a.y * inv);
  Op<T>::Store2(out + 2, a.z * inv, a.w * inv);
}

// The merge after a split forward (p.ks > 1), as a programmatic dependent launch where the GPU has it.
template <typename T, int D, int W>
int LaunchKeySplitMerge(T* y, const Dims& p, cudaStream_t st) {
  const int64_t n = p.B * p.H * p.T * (p.hd / 4), blocks = (n + 127) / 128;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(128);
  cfg.stream = st;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = HasPdl() ? 1 : 0;
  if (cudaError_t e = cudaLaunchKernelEx(&cfg, MergeKeySplits<T, D, W>, y, p)) return e;
  return cudaGetLastError();
}

}  // namespace mma
