// Tensor-core FlashAttention forward and backward for float16/bfloat16 (included by cuda_flash.cu, inside its
// anonymous namespace; no includes of its own): mma.sync
// m16n8k16 with float32 accumulators, for head_dim % 8 == 0 and <= 128 (zero-padded to D = 32, 64
// or 128) and 16-byte aligned tensors; other cases take the SIMT kernels of cuda_flash.cu.
//
// One warp owns 16 rows (its "row operand" X1, X2 kept as A fragments in registers); the block's
// warps stream the other operand through shared memory in tiles of BC rows (cp.async, double
// buffered). Per tile, two GEMMs into float32:
//   forward (rows = queries of one head, tiles = keys of its KV head):
//     S = Q K^T; online softmax (running max and sum per row);  Y += P V;  LSE = max + log(sum)
//   dQ kernel (rows = queries of one head, tiles = keys of its KV head):
//     S = Q K^T, dP = dY V^T;  P = exp(S scale - LSE), dS = P (dP - D);  dQ += dS K
//   dK/dV kernel (rows = keys of one KV head, tiles = queries of each of its query heads):
//     S^T = K Q^T, dP^T = V dY^T;  P^T, dS^T likewise;  dV += P^T dY, dK += dS^T Q
// P and dS are rounded to the element type for the second GEMM (as flash-attention does); the
// second GEMM's B operand is the tile transposed by ldmatrix.trans. Each block owns its output rows
// (no atomics): bit-for-bit deterministic. D_i = dY_i . Y_i comes from the dQ kernel (dsum). Under
// GQA on small grids the dK/dV kernel also splits a KV head's query heads over blocks and a third
// kernel sums their float32 partials in head order.
#pragma once

namespace mma {

constexpr int kPad = 8;  // halves of padding per shared-memory row: 16-byte rows, conflict-free fragment reads

template <typename T>
struct Op;
template <>
struct Op<__half> {
  __device__ static __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static __forceinline__ uint32_t Pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ float2 Unpack(uint32_t u) { return __half22float2(*reinterpret_cast<__half2*>(&u)); }
};
template <>
struct Op<__nv_bfloat16> {
  __device__ static __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static __forceinline__ uint32_t Pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ float2 Unpack(uint32_t u) { return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u)); }
};

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));  // 0: zero fill
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// B fragments of two adjacent n-tiles (columns n0 .. n0 + 15) of the k-chunk rows k0 .. k0 + 15 of a
// row-major [k][n] shared tile, transposed on the fly (the "col" B operand of the MMA).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_addr) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// Rows [r0, r0 + 16) of head `head` of a [B, rows, heads*hd] tensor as A fragments (16 x D, k-chunks
// of 16): lane (g, t) holds rows g, g + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9 of each chunk; zeros
// past r_end and hd. Also returns the float32 values' dot with `other` (the same rows of another
// tensor) when other != nullptr: per row g and g + 8, summed over the 4 lanes of the row.
template <typename T, int D>
__device__ __forceinline__ void LoadRowFrags(uint32_t (&a)[D / 16][4], const T* x, int64_t b, int64_t rows, int64_t heads,
                                             int64_t head, int64_t hd, int64_t r0, int64_t r_end, const T* other, float (&dot)[2]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  dot[0] = dot[1] = 0.f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = r0 + g + 8 * half;
    const bool ok = r < r_end;
    const int64_t base = ((b * rows + (ok ? r : 0)) * heads + head) * hd;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int d = 16 * kc + 8 * hi + 2 * t;
        uint32_t u = 0;
        if (ok && d < hd) {
          u = *reinterpret_cast<const uint32_t*>(x + base + d);
          if (other != nullptr) {
            const float2 xv = Op<T>::Unpack(u), ov = Op<T>::Unpack(*reinterpret_cast<const uint32_t*>(other + base + d));
            dot[half] += xv.x * ov.x + xv.y * ov.y;
          }
        }
        a[kc][half + 2 * hi] = u;
      }
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    dot[0] += __shfl_xor_sync(0xffffffffu, dot[0], off);
    dot[1] += __shfl_xor_sync(0xffffffffu, dot[1], off);
  }
}

// Issues the cp.async copies of rows [r0, r0 + BC) of head `head` into tile[BC][D + kPad] (zeros past
// r_end and hd; hd % 8 == 0, so a 16-byte chunk is all in or all out).
template <typename T, int D, int BC, int NT>
__device__ __forceinline__ void LoadTileAsync(T* tile, const T* x, int64_t b, int64_t rows, int64_t heads, int64_t head, int64_t hd,
                                              int64_t r0, int64_t r_end) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < BC * kChunks; idx += NT) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t row = r0 + r;
    const bool ok = row < r_end && 8 * c < hd;
    const T* src = ok ? x + ((b * rows + row) * heads + head) * hd + 8 * c : x;
    CpAsync16(tile + r * (D + kPad) + 8 * c, src, ok);
  }
}

// c[nt] (16 x 8 per n-tile, BC / 8 n-tiles) = A (16 x D, fragments) . tile^T (tile rows are the columns).
template <typename T, int D, int BC>
__device__ __forceinline__ void GemmRowsTile(float (&c)[BC / 8][4], const uint32_t (&a)[D / 16][4], const T* tile) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < BC / 8; ++nt) {
    c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.f;
    const T* row = tile + (8 * nt + g) * (D + kPad) + 2 * t;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(row + 16 * kc);
      const uint32_t b1 = *reinterpret_cast<const uint32_t*>(row + 16 * kc + 8);
      Op<T>::Mma(c[nt], a[kc], b0, b1);
    }
  }
}

// acc (16 x D, D / 8 n-tiles) += M (16 x BC, accumulator layout, rounded to T) . tile (BC x D).
template <typename T, int D, int BC>
__device__ __forceinline__ void GemmAccTile(float (&acc)[D / 8][4], const float (&m)[BC / 8][4], const T* tile) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kc = 0; kc < BC / 16; ++kc) {
    const uint32_t a[4] = {Op<T>::Pack(m[2 * kc][0], m[2 * kc][1]), Op<T>::Pack(m[2 * kc][2], m[2 * kc][3]),
                           Op<T>::Pack(m[2 * kc + 1][0], m[2 * kc + 1][1]), Op<T>::Pack(m[2 * kc + 1][2], m[2 * kc + 1][3])};
    const T* base = tile + (16 * kc + (lane & 15)) * (D + kPad) + 8 * (lane >> 4);
#pragma unroll
    for (int dn = 0; dn < D / 8; dn += 2) {
      uint32_t b[4];
      LdMatrixX4Trans(b, base + 8 * dn);
      Op<T>::Mma(acc[dn], a, b[0], b[1]);
      Op<T>::Mma(acc[dn + 1], a, b[2], b[3]);
    }
  }
}

// Rows g and g + 8 of a warp's 16 x D accumulator into a [B, rows, heads*hd] tensor, times `mul`.
template <typename T, int D>
__device__ __forceinline__ void StoreRows(T* x, const float (&acc)[D / 8][4], int64_t b, int64_t rows, int64_t heads, int64_t head,
                                          int64_t hd, int64_t r0, int64_t r_end, float mul) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = r0 + g + 8 * half;
    if (r >= r_end) continue;
    T* row = x + ((b * rows + r) * heads + head) * hd;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const int d = 8 * dn + 2 * t;
      if (d < hd) *reinterpret_cast<uint32_t*>(row + d) = Op<T>::Pack(acc[dn][2 * half] * mul, acc[dn][2 * half + 1] * mul);
    }
  }
}

template <int D>
struct Tiles {
  static constexpr int BC = D <= 64 ? 64 : 32;  // streamed rows per tile (registers: S, dP are 16 x BC per warp)
};

// dQ and D_i. Block: W warps, 16 query rows each, of head blockIdx.x % H.
template <typename T, int D, int W>
__global__ void __launch_bounds__(32 * W) GradQ(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                const T* __restrict__ y, const T* __restrict__ dy, const float* __restrict__ lse,
                                                T* __restrict__ dq, float* __restrict__ dsum, Dims p) {
  constexpr int BC = Tiles<D>::BC, NT = 32 * W, LD = D + kPad;
  __shared__ __align__(16) T Ks[2][BC * LD], Vs[2][BC * LD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t b = blockIdx.x / p.H, h = blockIdx.x % p.H, kh = h / (p.H / p.KVH);
  const int64_t i0 = int64_t(gridDim.y - 1 - blockIdx.y) * (16 * W), r0 = i0 + 16 * warp;  // longest causal rows first
  uint32_t qa[D / 16][4], da[D / 16][4];
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
  const int n_tiles = int((kend + BC - 1) / BC);
  auto issue = [&](int n) {
    LoadTileAsync<T, D, BC, NT>(Ks[n & 1], k, b, p.S, p.KVH, kh, p.hd, int64_t(n) * BC, kend);
    LoadTileAsync<T, D, BC, NT>(Vs[n & 1], v, b, p.S, p.KVH, kh, p.hd, int64_t(n) * BC, kend);
    CpAsyncCommit();
  };
  if (n_tiles > 0) issue(0);
  for (int n = 0; n < n_tiles; ++n) {
    if (n + 1 < n_tiles) {
      issue(n + 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const T *Kt = Ks[n & 1], *Vt = Vs[n & 1];
    float s[BC / 8][4], dp[BC / 8][4];
    GemmRowsTile<T, D, BC>(s, qa, Kt);
    GemmRowsTile<T, D, BC>(dp, da, Vt);
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = r0 + g + 8 * (e >> 1), j = int64_t(n) * BC + 8 * nt + 2 * t + (e & 1);
        const bool hidden = j >= kend || (p.causal && j > i);
        const float pr = hidden ? 0.f : exp2f(s[nt][e] * c2 - lse2[e >> 1]);
        s[nt][e] = pr * (dp[nt][e] - di[e >> 1]);  // dS
      }
    GemmAccTile<T, D, BC>(acc, s, Kt);
    __syncthreads();  // the next issue overwrites this buffer
  }
  StoreRows<T, D>(dq, acc, b, p.T, p.H, h, p.hd, r0, p.T, p.scale);
}

// Rows g and g + 8 of a warp's 16 x D accumulator into a float32 [B, rows, heads*hd] plane, times `mul`.
template <int D>
__device__ __forceinline__ void StoreRowsF32(float* x, const float (&acc)[D / 8][4], int64_t b, int64_t rows, int64_t heads,
                                             int64_t head, int64_t hd, int64_t r0, int64_t r_end, float mul) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = r0 + g + 8 * half;
    if (r >= r_end) continue;
    float* row = x + ((b * rows + r) * heads + head) * hd;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const int d = 8 * dn + 2 * t;
      if (d < hd) *reinterpret_cast<float2*>(row + d) = make_float2(acc[dn][2 * half] * mul, acc[dn][2 * half + 1] * mul);
    }
  }
}

// dK and dV. Block: W warps, 16 key rows each, of KV head blockIdx.x % KVH; the queries of its query
// heads stream. With `partial` (GQA, small grids: more blocks), block z takes query head z of the
// group only and writes float32 partial sums (dK planes [rep], then dV planes [rep]) for SumHeads.
template <typename T, int D, int W>
__global__ void __launch_bounds__(32 * W) GradKV(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                 const T* __restrict__ dy, const float* __restrict__ lse,
                                                 const float* __restrict__ dsum, T* __restrict__ dk, T* __restrict__ dv,
                                                 float* __restrict__ partial, Dims p) {
  constexpr int BC = Tiles<D>::BC, NT = 32 * W, LD = D + kPad;
  __shared__ __align__(16) T Qs[2][BC * LD], dOs[2][BC * LD];
  __shared__ float Ls[2][BC], Ds[2][BC];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t b = blockIdx.x / p.KVH, kh = blockIdx.x % p.KVH, rep = p.H / p.KVH;
  const int64_t j0 = int64_t(blockIdx.y) * (16 * W), r0 = j0 + 16 * warp;  // causal: the first key tiles see the most queries
  uint32_t ka[D / 16][4], va[D / 16][4];
  float unused[2];
  LoadRowFrags<T, D>(ka, k, b, p.S, p.KVH, kh, p.hd, r0, p.S, nullptr, unused);
  LoadRowFrags<T, D>(va, v, b, p.S, p.KVH, kh, p.hd, r0, p.S, nullptr, unused);
  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  const float c2 = p.scale * kLog2e;
  const int64_t istart = p.causal ? j0 : 0;  // queries before j0 see none of these keys
  const int64_t heads = partial != nullptr ? 1 : rep, h_first = kh * rep + (partial != nullptr ? blockIdx.z : 0);
  const int per_head = p.T > istart ? int((p.T - istart + BC - 1) / BC) : 0, n_tiles = per_head * int(heads);
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
  if (n_tiles > 0) issue(0);
  for (int n = 0; n < n_tiles; ++n) {
    if (n + 1 < n_tiles) {
      issue(n + 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const T *Qt = Qs[n & 1], *dOt = dOs[n & 1];
    const float *Lt = Ls[n & 1], *Dt = Ds[n & 1];
    const int64_t c0 = istart + int64_t(n % per_head) * BC;
    float s[BC / 8][4], dp[BC / 8][4];
    GemmRowsTile<T, D, BC>(s, ka, Qt);
    GemmRowsTile<T, D, BC>(dp, va, dOt);
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * nt + 2 * t + (e & 1);
        const int64_t j = r0 + g + 8 * (e >> 1), i = c0 + c;
        const bool hidden = i >= p.T || (p.causal && j > i);
        const float pr = hidden ? 0.f : exp2f(s[nt][e] * c2 - Lt[c]);
        s[nt][e] = pr;                      // P^T
        dp[nt][e] = pr * (dp[nt][e] - Dt[c]);  // dS^T
      }
    GemmAccTile<T, D, BC>(dva, s, dOt);
    GemmAccTile<T, D, BC>(dka, dp, Qt);
    __syncthreads();  // the next issue overwrites this buffer
  }
  if (partial == nullptr) {
    StoreRows<T, D>(dk, dka, b, p.S, p.KVH, kh, p.hd, r0, p.S, p.scale);
    StoreRows<T, D>(dv, dva, b, p.S, p.KVH, kh, p.hd, r0, p.S, 1.f);
  } else {
    const int64_t plane = p.B * p.S * p.KVH * p.hd;
    StoreRowsF32<D>(partial + blockIdx.z * plane, dka, b, p.S, p.KVH, kh, p.hd, r0, p.S, p.scale);
    StoreRowsF32<D>(partial + (rep + blockIdx.z) * plane, dva, b, p.S, p.KVH, kh, p.hd, r0, p.S, 1.f);
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
// softmax (running max m and sum l per row, float32; P rounded to T for the P V GEMM).
template <typename T, int D, int W>
__global__ void __launch_bounds__(32 * W) Forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                  T* __restrict__ y, float* __restrict__ lse, Dims p) {
  constexpr int BC = Tiles<D>::BC, NT = 32 * W, LD = D + kPad;
  __shared__ __align__(16) T Ks[2][BC * LD], Vs[2][BC * LD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t b = blockIdx.x / p.H, h = blockIdx.x % p.H, kh = h / (p.H / p.KVH);
  const int64_t i0 = int64_t(gridDim.y - 1 - blockIdx.y) * (16 * W), r0 = i0 + 16 * warp;  // longest causal rows first
  uint32_t qa[D / 16][4];
  float unused[2];
  LoadRowFrags<T, D>(qa, q, b, p.T, p.H, h, p.hd, r0, p.T, nullptr, unused);
  float acc[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // l: this lane's part of the row sum
  const float c2 = p.scale * kLog2e;
  const int64_t kend = p.causal ? min(p.S, i0 + 16 * W) : p.S;
  const int n_tiles = int((kend + BC - 1) / BC);
  auto issue = [&](int n) {
    LoadTileAsync<T, D, BC, NT>(Ks[n & 1], k, b, p.S, p.KVH, kh, p.hd, int64_t(n) * BC, kend);
    LoadTileAsync<T, D, BC, NT>(Vs[n & 1], v, b, p.S, p.KVH, kh, p.hd, int64_t(n) * BC, kend);
    CpAsyncCommit();
  };
  if (n_tiles > 0) issue(0);
  for (int n = 0; n < n_tiles; ++n) {
    if (n + 1 < n_tiles) {
      issue(n + 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    float s[BC / 8][4], mx[2] = {m[0], m[1]};
    GemmRowsTile<T, D, BC>(s, qa, Ks[n & 1]);
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = r0 + g + 8 * (e >> 1), j = int64_t(n) * BC + 8 * nt + 2 * t + (e & 1);
        s[nt][e] = (j >= kend || (p.causal && j > i)) ? -INFINITY : s[nt][e] * c2;
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
    GemmAccTile<T, D, BC>(acc, s, Vs[n & 1]);
    __syncthreads();  // the next issue overwrites this buffer
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const float inv = 1.f / l[r];
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) acc[dn][2 * r] *= inv, acc[dn][2 * r + 1] *= inv;
    const int64_t i = r0 + g + 8 * r;
    if (i < p.T && t == 0) lse[(b * p.H + h) * p.T + i] = (m[r] + log2f(l[r])) * kLn2;
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

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Whether the tensor-core kernels take this problem: head_dim % 8 == 0 (16-byte chunks), <= 128, aligned tensors.
bool MmaApplies(const Dims& p, std::initializer_list<const void*> tensors) {
  if (p.hd % 8 != 0 || p.hd > 128) return false;
  for (const void* ptr : tensors)
    if (!Aligned16(ptr)) return false;
  return true;
}

// The tensor-core forward when it applies (returns -1 otherwise: the caller runs the SIMT kernel).
template <typename T>
int LaunchForwardMma(const T* q, const T* k, const T* v, T* y, float* lse, const Dims& p, cudaStream_t st) {
  if (!MmaApplies(p, {q, k, v, y})) return -1;
  constexpr int W = 4;
  const int64_t gx = p.B * p.H, gy = (p.T + 16 * W - 1) / (16 * W);
  if (!GridFits(gx, gy)) return cudaErrorInvalidConfiguration;
  const dim3 grid((unsigned)gx, (unsigned)gy);
  if (p.hd <= 32)
    Forward<T, 32, W><<<grid, 32 * W, 0, st>>>(q, k, v, y, lse, p);
  else if (p.hd <= 64)
    Forward<T, 64, W><<<grid, 32 * W, 0, st>>>(q, k, v, y, lse, p);
  else
    Forward<T, 128, W><<<grid, 32 * W, 0, st>>>(q, k, v, y, lse, p);
  return cudaGetLastError();
}

// The tensor-core backward when it applies (returns -1 otherwise: the caller runs the SIMT kernels).
template <typename T>
int LaunchGradMma(const T* q, const T* k, const T* v, const T* y, const T* dy, const float* lse, T* dq, T* dk, T* dv, const Dims& p,
                  cudaStream_t st) {
  if (!MmaApplies(p, {q, k, v, y, dy, dq, dk, dv})) return -1;
  if (p.hd <= 32) return LaunchGradD<T, 32>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
  if (p.hd <= 64) return LaunchGradD<T, 64>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
  return LaunchGradD<T, 128>(q, k, v, y, dy, lse, dq, dk, dv, p, st);
}

}  // namespace mma
