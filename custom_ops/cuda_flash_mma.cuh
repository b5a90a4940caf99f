// Tensor-core FlashAttention forward and backward (included by cuda_flash.cu, inside its anonymous
// namespace; the tile they share: cuda_flash_mma_tile.cuh), one set of kernels for every element type:
//   float16 / bfloat16: mma.sync m16n8k16 with float32 accumulators;
//   float32: 3xTF32 (as CUTLASS's fast-float32 GEMMs): x = big + small with big = tf32(x), small =
//     tf32(x - big), a.b ~= small_a.big_b + big_a.small_b + big_a.big_b on mma.sync m16n8k8 tf32 with
//     float32 accumulators; the dropped small_a.small_b and the tf32 rounding of `small` leave about
//     2^-22 of each product, the same order as float32's own rounding (flash_check and the GPU tests
//     measure it against float64 next to the SIMT kernels).
// head_dim % (16 bytes / element size) == 0 and <= 128 (zero-padded to D = 32, 64 or 128), 16-byte
// aligned tensors, and a device these kernels were compiled for (sm_80 or newer); other cases take
// the SIMT kernels of cuda_flash.cu.
//
// One warp owns 16 rows (its "row operand" X1, X2 kept as raw A fragments in registers); the block's
// warps stream the other operand through shared memory in tiles of BC rows (cp.async, double
// buffered: NextTile). Per tile, two GEMMs into float32 (one Gemm<T, D, BC> serves every kernel):
//   forward (rows = queries of one head, tiles = keys of its KV head):
//     S = Q K^T; online softmax (running max and sum per row);  Y += P V;  LSE = max + log(sum)
//   dQ kernel (rows = queries of one head, tiles = keys of its KV head):
//     S = Q K^T, dP = dY V^T;  P = exp(S scale - LSE), dS = P (dP - D);  dQ += dS K
//   dK/dV kernel (rows = keys of one KV head, tiles = queries of each of its query heads):
//     S^T = K Q^T, dP^T = V dY^T;  P^T, dS^T likewise;  dV += P^T dY, dK += dS^T Q
// The half types round P and dS to the element type for the second GEMM (as flash-attention does);
// float32 splits them like any other operand. Each block owns its output rows (no atomics):
// bit-for-bit deterministic. D_i = dY_i . Y_i comes from the dQ kernel (dsum). Under GQA on small
// grids the dK/dV kernel also splits a KV head's query heads over blocks and a third kernel sums
// their float32 partials in head order.
#pragma once
#include "cuda_flash_mma_tile.cuh"
#include "cuda_flash_keysplit.cuh"

namespace mma {

// dQ and D_i. Block: W warps, 16 query rows each, of head blockIdx.x % H.
template <typename T, int D, int W>
__global__ void __launch_bounds__(32 * W) GradQ(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                const T* __restrict__ y, const T* __restrict__ dy, const float* __restrict__ lse,
                                                T* __restrict__ dq, float* __restrict__ dsum, Dims p) {
  using Tl = Tiles<T, D>;
  using G = Gemm<T, D, Tl::BC>;
  constexpr int BC = Tl::BC, NT = 32 * W;
  __shared__ __align__(16) T Ks[2][BC * Tl::LD], Vs[2][BC * Tl::LD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t b = blockIdx.x / p.H, h = blockIdx.x % p.H, kh = h / (p.H / p.KVH);
  const int64_t i0 = int64_t(gridDim.y - 1 - blockIdx.y) * (16 * W), r0 = i0 + 16 * warp;  // longest causal rows first
  uint32_t qa[Tl::KS][4], da[Tl::KS][4];
  float di[2], unused[2], lse2[2];
  LoadRowFrags<T, D>(qa, q, b, p.T, p.H, h, p.hd, r0, p.T, nullptr, unused);
  LoadRowFrags<T, D>(da, dy, b, p.T, p.H, h, p.hd, r0, p.T, y, di);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = r0 + g + 8 * half, row = (b * p.H + h) * p.T + i;
    lse2[half] = i < p.T ? lse[row] * kLog2e : 0.f;
    if (i < p.T && t == 0) dsum[row] = di[half];
  }
  float acc[D / 8][4] = {};
  const float c2 = p.scale * kLog2e;
  const int64_t kend = p.causal ? min(p.S, i0 + 16 * W) : p.S;
  auto issue = [&](int n) {
    LoadTileAsync<T, D, BC, NT>(Ks[n & 1], k, b, p.S, p.KVH, kh, p.hd, int64_t(n) * BC, kend);
    LoadTileAsync<T, D, BC, NT>(Vs[n & 1], v, b, p.S, p.KVH, kh, p.hd, int64_t(n) * BC, kend);
    CpAsyncCommit();
  };
  const int n_tiles = int((kend + BC - 1) / BC);
  if (n_tiles > 0) issue(0);
  for (int n = 0; n < n_tiles; ++n) {
    NextTile(n, n_tiles, issue);
    float s[BC / 8][4], dp[BC / 8][4];
    G::RowsTileT(s, qa, Ks[n & 1]);
    G::RowsTileT(dp, da, Vs[n & 1]);
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = r0 + g + 8 * (e >> 1), j = int64_t(n) * BC + 8 * nt + 2 * t + (e & 1);
        const bool hidden = j >= kend || (p.causal && j > i);
        const float pr = hidden ? 0.f : exp2f(s[nt][e] * c2 - lse2[e >> 1]);
        s[nt][e] = pr * (dp[nt][e] - di[e >> 1]);  // dS
      }
    G::AccTile(acc, s, Ks[n & 1]);
    __syncthreads();  // the next issue overwrites this buffer
  }
  StoreRows<T, D>(dq, acc, b, p.T, p.H, h, p.hd, r0, p.T, p.scale);
}

// dK and dV. Block: W warps, 16 key rows each, of KV head blockIdx.x % KVH; the queries of its query
// heads stream. With `partial` (GQA, small grids: more blocks), block z takes query head z of the
// group only and writes float32 partial sums (dK planes [rep], then dV planes [rep]) for SumHeads.
template <typename T, int D, int W>
__global__ void __launch_bounds__(32 * W) GradKV(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                 const T* __restrict__ dy, const float* __restrict__ lse,
                                                 const float* __restrict__ dsum, T* __restrict__ dk, T* __restrict__ dv,
                                                 float* __restrict__ partial, Dims p) {
  using Tl = Tiles<T, D>;
  using G = Gemm<T, D, Tl::BC>;
  constexpr int BC = Tl::BC, NT = 32 * W;
  __shared__ __align__(16) T Qs[2][BC * Tl::LD], dOs[2][BC * Tl::LD];
  __shared__ float Ls[2][BC], Ds[2][BC];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t b = blockIdx.x / p.KVH, kh = blockIdx.x % p.KVH, rep = p.H / p.KVH;
  const int64_t j0 = int64_t(blockIdx.y) * (16 * W), r0 = j0 + 16 * warp;  // causal: the first key tiles see the most queries
  uint32_t ka[Tl::KS][4], va[Tl::KS][4];
  float unused[2];
  LoadRowFrags<T, D>(ka, k, b, p.S, p.KVH, kh, p.hd, r0, p.S, nullptr, unused);
  LoadRowFrags<T, D>(va, v, b, p.S, p.KVH, kh, p.hd, r0, p.S, nullptr, unused);
  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  const float c2 = p.scale * kLog2e;
  const int64_t istart = p.causal ? j0 : 0;  // queries before j0 see none of these keys
  const int64_t heads = partial != nullptr ? 1 : rep, h_first = kh * rep + (partial != nullptr ? blockIdx.z : 0);
  const int per_head = p.T > istart ? int((p.T - istart + BC - 1) / BC) : 0;
  auto issue = [&](int n) {
    const int64_t h = h_first + n / per_head, c0 = istart + int64_t(n % per_head) * BC;
    LoadTileAsync<T, D, BC, NT>(Qs[n & 1], q, b, p.T, p.H, h, p.hd, c0, p.T);
    LoadTileAsync<T, D, BC, NT>(dOs[n & 1], dy, b, p.T, p.H, h, p.hd, c0, p.T);
    CpAsyncCommit();
    for (int c = threadIdx.x; c < BC; c += NT) {
      const int64_t i = c0 + c, row = (b * p.H + h) * p.T + i;
      Ls[n & 1][c] = i < p.T ? lse[row] * kLog2e : 0.f;
      Ds[n & 1][c] = i < p.T ? dsum[row] : 0.f;
    }
  };
  const int n_tiles = per_head * int(heads);
  if (n_tiles > 0) issue(0);
  for (int n = 0; n < n_tiles; ++n) {
    NextTile(n, n_tiles, issue);
    const T *Qt = Qs[n & 1], *dOt = dOs[n & 1];
    const float *Lt = Ls[n & 1], *Dt = Ds[n & 1];
    const int64_t c0 = istart + int64_t(n % per_head) * BC;
    float s[BC / 8][4], dp[BC / 8][4];
    G::RowsTileT(s, ka, Qt);
    G::RowsTileT(dp, va, dOt);
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * nt + 2 * t + (e & 1);
        const int64_t j = r0 + g + 8 * (e >> 1), i = c0 + c;
        const bool hidden = i >= p.T || (p.causal && j > i);
        const float pr = hidden ? 0.f : exp2f(s[nt][e] * c2 - Lt[c]);
        s[nt][e] = pr;                         // P^T
        dp[nt][e] = pr * (dp[nt][e] - Dt[c]);  // dS^T
      }
    G::AccTile(dva, s, dOt);
    G::AccTile(dka, dp, Qt);
    __syncthreads();  // the next issue overwrites this buffer
  }
  if (partial == nullptr) {
    StoreRows<T, D>(dk, dka, b, p.S, p.KVH, kh, p.hd, r0, p.S, p.scale);
    StoreRows<T, D>(dv, dva, b, p.S, p.KVH, kh, p.hd, r0, p.S, 1.f);
  } else {
    const int64_t plane = p.B * p.S * p.KVH * p.hd;
    StoreRows<float, D>(partial + blockIdx.z * plane, dka, b, p.S, p.KVH, kh, p.hd, r0, p.S, p.scale);
    StoreRows<float, D>(partial + (rep + blockIdx.z) * plane, dva, b, p.S, p.KVH, kh, p.hd, r0, p.S, 1.f);
  }
}

// dK, dV = the sums of GradKV's per-query-head partials, in head order (deterministic).
template <typename T>
__global__ void SumHeads(const float* __restrict__ partial, int64_t rep, int64_t plane, T* __restrict__ dk, T* __restrict__ dv) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < plane; e += int64_t(gridDim.x) * blockDim.x) {
    float a = 0.f, c = 0.f;
    for (int64_t h = 0; h < rep; ++h) {
      a += partial[h * plane + e];
      c += partial[(rep + h) * plane + e];
    }
    dk[e] = FromF<T>(a);
    dv[e] = FromF<T>(c);
  }
}

// flash_check's switch for the dK/dV head split: -1 chooses by the grid size, 0 / 1 force it off / on.
int g_flash_split_heads = -1;

// Y and LSE. Block: W warps, 16 query rows each, of head blockIdx.x % H; keys stream with an online
// softmax (running max m and sum l per row, float32). With a KV cache (Dims::pos: CachedAttention's
// chunks of T > 1 rows) the keys are the cache's rows up to each row's position, and no LSE is written.
template <typename T, int D, int W>
__global__ void __launch_bounds__(32 * W) Forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                  T* __restrict__ y, float* __restrict__ lse, Dims p) {
  using Tl = Tiles<T, D>;
  using G = Gemm<T, D, Tl::BC>;
  constexpr int BC = Tl::BC, NT = 32 * W;
  __shared__ __align__(16) T Ks[2][BC * Tl::LD], Vs[2][BC * Tl::LD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t b = blockIdx.x / p.H, h = blockIdx.x % p.H, kh = h / (p.H / p.KVH);
  const int64_t i0 = int64_t(gridDim.y - 1 - blockIdx.y) * (16 * W), r0 = i0 + 16 * warp;  // longest causal rows first
  uint32_t qa[Tl::KS][4];
  float unused[2];
  // Key splits past the first (a KV cache's chunk, cuda_flash_keysplit.cuh) learn their share before
  // loading q: those without keys (a chunk near the start of its cache) return at once.
  int64_t off = blockIdx.z > 0 ? LoadPos(p.pos, b) : 0;
  if (blockIdx.z > 0 && (off < 0 || off > p.S - p.T ||
                         static_cast<int>(blockIdx.z) >= KeySliceOf(RowBlockTiles<T, D, W>(p, off, i0), p.ks, 0).active))
    return;  // block-uniform
  LoadRowFrags<T, D>(qa, q, b, p.T, p.H, h, p.hd, r0, p.T, nullptr, unused);
  float acc[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // l: this lane's part of the row sum
  // A KV cache: query row i at position off + i. An invalid position: NaN rows, no K/V read.
  if (blockIdx.z == 0 && p.pos.ptr != nullptr) off = LoadPos(p.pos, b);
  if (p.pos.ptr != nullptr && (off < 0 || off > p.S - p.T)) {
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[dn][e] = __int_as_float(0x7fc00000);
    StoreRows<T, D>(y, acc, b, p.T, p.H, h, p.hd, r0, p.T, 1.f);  // (split 0 only: the others returned above)
    return;  // block-uniform
  }
  const float c2 = p.scale * kLog2e;
  // Causal: the block's last row (at most T - 1) sees keys up to off + that row; past them (a cache's
  // unwritten rows) nothing is read, so no stale value reaches P V even with weight 0.
  const int64_t kend = p.causal ? min(p.S, off + min(p.T, i0 + 16 * W)) : p.S;
  // Key splits (cuda_flash_keysplit.cuh): this block's tiles [ks.t0, ks.t1) (a split without any returned above).
  const KeySlice ks = KeySliceOf(int((kend + BC - 1) / BC), p.ks, static_cast<int>(blockIdx.z));
  auto issue = [&](int n) {
    LoadTileAsync<T, D, BC, NT>(Ks[n & 1], k, b, p.S, p.KVH, kh, p.hd, int64_t(ks.t0 + n) * BC, kend);
    LoadTileAsync<T, D, BC, NT>(Vs[n & 1], v, b, p.S, p.KVH, kh, p.hd, int64_t(ks.t0 + n) * BC, kend);
    CpAsyncCommit();
  };
  const int n_tiles = ks.t1 - ks.t0;
  if (n_tiles > 0) issue(0);
  for (int n = 0; n < n_tiles; ++n) {
    NextTile(n, n_tiles, issue);
    float s[BC / 8][4], mx[2] = {m[0], m[1]};
    G::RowsTileT(s, qa, Ks[n & 1]);
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = r0 + g + 8 * (e >> 1), j = int64_t(ks.t0 + n) * BC + 8 * nt + 2 * t + (e & 1);
        s[nt][e] = (j >= kend || (p.causal && j > off + i)) ? -INFINITY : s[nt][e] * c2;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float base = mx[r] == -INFINITY ? 0.f : mx[r];  // a row with every key so far hidden
      const float a = exp2f(m[r] - base);                    // rescales what was summed under the old max
      l[r] *= a;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) acc[dn][2 * r] *= a, acc[dn][2 * r + 1] *= a;
      m[r] = mx[r];
      mx[r] = base;
    }
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - mx[e >> 1]);  // hidden: exp2(-inf) = 0
        l[e >> 1] += s[nt][e];
      }
    G::AccTile(acc, s, Vs[n & 1]);
    __syncthreads();  // the next issue overwrites this buffer
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  if (ks.active > 1) {  // block-uniform: MergeKeySplits writes these rows
    StoreKeySplit<T, D>(p, acc, m, l, b, h, r0);
    return;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = 1.f / l[r];
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) acc[dn][2 * r] *= inv, acc[dn][2 * r + 1] *= inv;
    const int64_t i = r0 + g + 8 * r;
    if (lse != nullptr && i < p.T && t == 0) lse[(b * p.H + h) * p.T + i] = (m[r] + log2f(l[r])) * kLn2;  // none for a cache
  }
  StoreRows<T, D>(y, acc, b, p.T, p.H, h, p.hd, r0, p.T, 1.f);
}

template <typename T, int D>
int LaunchGradD(const T* q, const T* k, const T* v, const T* y, const T* dy, const float* lse, T* dq, T* dk, T* dv, const Dims& p,
                cudaStream_t st) {
  constexpr int WQ = 4;
  const int64_t qx = p.B * p.H, qy = (p.T + 16 * WQ - 1) / (16 * WQ), rep = p.H / p.KVH;
  // dK/dV: 4 warps (64 keys) per block when that still gives two blocks per SM, else 2 (more blocks);
  // GQA with fewer than four 2-warp blocks per SM also splits the query heads over blocks (float32
  // partials, summed in head order by SumHeads).
  const int64_t narrow_blocks = p.B * p.KVH * ((p.S + 31) / 32);
  const bool split = rep > 1 && rep <= 65535 &&
                     (g_flash_split_heads >= 0 ? g_flash_split_heads == 1 : narrow_blocks < 4 * NumSMs());
  const bool wide = !split && p.B * p.KVH * ((p.S + 63) / 64) >= 2 * NumSMs();
  const int64_t kx = p.B * p.KVH, ky = (p.S + (wide ? 63 : 31)) / (wide ? 64 : 32), plane = p.B * p.S * p.KVH * p.hd;
  if (!GridFits(qx, qy) || !GridFits(kx, ky)) return cudaErrorInvalidConfiguration;
  // Stream-ordered scratch (capturable in a CUDA graph): D_i per query row, then the split's partials.
  const int64_t n_dsum = (p.B * p.H * p.T + 3) / 4 * 4;
  float* scratch = nullptr;
  if (cudaError_t e = cudaMallocAsync(&scratch, sizeof(float) * (n_dsum + (split ? 2 * rep * plane : 0)), st)) return e;
  float *dsum = scratch, *partial = split ? scratch + n_dsum : nullptr;
  GradQ<T, D, WQ><<<dim3((unsigned)qx, (unsigned)qy), 32 * WQ, 0, st>>>(q, k, v, y, dy, lse, dq, dsum, p);
  if (wide)
    GradKV<T, D, 4><<<dim3((unsigned)kx, (unsigned)ky), 128, 0, st>>>(q, k, v, dy, lse, dsum, dk, dv, nullptr, p);
  else
    GradKV<T, D, 2><<<dim3((unsigned)kx, (unsigned)ky, split ? (unsigned)rep : 1u), 64, 0, st>>>(q, k, v, dy, lse, dsum, dk, dv,
                                                                                             partial, p);
  if (split) {
    const int64_t blocks = std::min<int64_t>((plane + 255) / 256, 8 * NumSMs());
    SumHeads<T><<<(unsigned)blocks, 256, 0, st>>>(partial, rep, plane, dk, dv);
  }
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t freed = cudaFreeAsync(scratch, st);
  return launch ? launch : freed;
}

// Whether this device runs the tensor-core kernels: code for sm_80 or newer was built and loaded for
// it (a build for older GPUs compiles them to traps). Cached per device.
inline bool TensorCoresHere() {
  static int cached[64] = {};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev >= 0 && dev < 64 && cached[dev] != 0) return cached[dev] == 1;
  cudaFuncAttributes a{};
  const bool yes = cudaFuncGetAttributes(&a, Forward<__half, 64, 4>) == cudaSuccess && a.ptxVersion >= 80;
  if (dev >= 0 && dev < 64) cached[dev] = yes ? 1 : 2;
  return yes;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Whether the tensor-core kernels take this problem: head_dim a whole number of 16-byte chunks,
// <= 128, aligned tensors, and a device they run on.
template <typename T>
bool MmaApplies(const Dims& p, std::initializer_list<const void*> tensors) {
  if (p.hd % Tiles<T, 32>::EPC != 0 || p.hd > 128) return false;
  for (const void* ptr : tensors)
    if (!Aligned16(ptr)) return false;
  return TensorCoresHere();
}

// The tensor-core forward when it applies (returns -1 otherwise: the caller runs the SIMT kernel).
template <typename T>
int LaunchForwardMma(const T* q, const T* k, const T* v, T* y, float* lse, const Dims& p, cudaStream_t st) {
  if (!MmaApplies<T>(p, {q, k, v, y})) return -1;
  constexpr int W = 4;
  const int64_t gx = p.B * p.H, gy = (p.T + 16 * W - 1) / (16 * W);
  if (!GridFits(gx, gy) || p.ks < 1 || p.ks > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)p.ks);
  if (p.hd <= 32) {
    Forward<T, 32, W><<<grid, 32 * W, 0, st>>>(q, k, v, y, lse, p);
    if (p.ks > 1) return LaunchKeySplitMerge<T, 32, W>(y, p, st);
  } else if (p.hd <= 64) {
    Forward<T, 64, W><<<grid, 32 * W, 0, st>>>(q, k, v, y, lse, p);
    if (p.ks > 1) return LaunchKeySplitMerge<T, 64, W>(y, p, st);
  } else {
    Forward<T, 128, W><<<grid, 32 * W, 0, st>>>(q, k, v, y, lse, p);
    if (p.ks > 1) return LaunchKeySplitMerge<T, 128, W>(y, p, st);
  }
  return cudaGetLastError();
}

// The tensor-core backward when it applies (returns -1 otherwise: the caller runs the SIMT kernels).
template <typename T>
int LaunchGradMma(const T* q, const T* k, const T* v, const T* y, const T* dy, const float* lse, T* dq, T* dk, T* dv, const Dims& p,
                  cudaStream_t st) {
  if (!MmaApplies<T>(p, {q, k, v, y, dy, dq, dk, dv})) return -1;
  if (p.hd <= 32) return LaunchGradD<T, 32>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
  if (p.hd <= 64) return LaunchGradD<T, 64>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
  return LaunchGradD<T, 128>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
}

}  // namespace mma
