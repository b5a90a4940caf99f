// The templated tensor-core tile of the FlashAttention kernels (cuda_flash_mma.cuh; included by
// cuda_flash.cu inside its anonymous namespace, no includes of its own): per element type the MMA
// and how operands enter it (Op<T>), sizes (Tiles<T, D>), the loads of a warp's row fragments and of
// the streamed shared tiles (cp.async), the double-buffered pipeline (NextTile), the two GEMMs of
// a warp's 16 rows with a tile (Gemm<T, D, BC>) and the stores of the accumulators.
#pragma once

// Device code for an architecture without these instructions (a build for sm_75, say) traps;
// TensorCoresHere() keeps the host from launching it there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MN_FLASH_NO_MMA 1
#endif

namespace mma {

// Lane (g, t) = (lane / 4, lane % 4) of a warp. Every MMA here has the float32 accumulator layout
// c0, c1 = row g, columns 2t, 2t + 1 and c2, c3 = row g + 8, same columns; its A fragment holds rows
// g and g + 8, 32-bit words t and t + 4 of each k-step (KR elements: 16 halves or 8 floats); its B
// fragment words t and t + 4 of column g.

// The MMA of each element type: A (what Prep makes of four raw words), Mma, the second GEMM's
// operands (FromAcc: A from a float32 accumulator tile; LoadB2: B of two n-tiles from a row-major
// [k][n] shared tile), Dot (of two raw words, as float32) and Store2 (two float32 values).
template <typename T>
struct Half;  // float16 / bfloat16: m16n8k16, one MMA per product
template <>
struct Half<__half> {
  __device__ static __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef MN_FLASH_NO_MMA
    __trap();
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
  __device__ static __forceinline__ uint32_t Pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ float2 Unpack(uint32_t u) { return __half22float2(*reinterpret_cast<__half2*>(&u)); }
};
template <>
struct Half<__nv_bfloat16> {
  __device__ static __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef MN_FLASH_NO_MMA
    __trap();
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
  __device__ static __forceinline__ uint32_t Pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ float2 Unpack(uint32_t u) { return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u)); }
};

// B fragments of two adjacent n-tiles (columns n0 .. n0 + 15) of the k-chunk rows k0 .. k0 + 15 of a
// row-major [k][n] shared tile of 16-bit elements, transposed on the fly (the "col" B operand).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_addr) {
#ifdef MN_FLASH_NO_MMA
  __trap();
#else
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#endif
}

template <typename T>
struct Op {
  static constexpr int KR = 16;  // elements per k-step
  struct A {
    uint32_t w[4];
  };
  __device__ static __forceinline__ A Prep(const uint32_t (&w)[4]) { return A{{w[0], w[1], w[2], w[3]}}; }
  __device__ static __forceinline__ void Mma(float (&c)[4], const A& a, uint32_t b0, uint32_t b1) { Half<T>::Mma(c, a.w, b0, b1); }
  // k-step kc of M (16 x BC) spans its n-tiles 2 kc and 2 kc + 1, rounded to T.
  template <int BC>
  __device__ static __forceinline__ A FromAcc(const float (&m)[BC / 8][4], int kc) {
    return A{{Half<T>::Pack(m[2 * kc][0], m[2 * kc][1]), Half<T>::Pack(m[2 * kc][2], m[2 * kc][3]),
              Half<T>::Pack(m[2 * kc + 1][0], m[2 * kc + 1][1]), Half<T>::Pack(m[2 * kc + 1][2], m[2 * kc + 1][3])}};
  }
  template <int LD>
  __device__ static __forceinline__ void LoadB2(uint32_t (&b)[4], const T* tile, int kc, int dn) {
    const int lane = threadIdx.x & 31;
    LdMatrixX4Trans(b, tile + (16 * kc + (lane & 15)) * LD + 8 * (lane >> 4) + 8 * dn);
  }
  __device__ static __forceinline__ float Dot(uint32_t x, uint32_t o) {
    const float2 a = Half<T>::Unpack(x), b = Half<T>::Unpack(o);
    return a.x * b.x + a.y * b.y;
  }
  __device__ static __forceinline__ void Store2(T* dst, float lo, float hi) { *reinterpret_cast<uint32_t*>(dst) = Half<T>::Pack(lo, hi); }
};

// float32: 3xTF32 on m16n8k8 (k-step of 8 floats), every operand split into big + small.
template <>
struct Op<float> {
  static constexpr int KR = 8;
  struct A {
    uint32_t big[4], small[4];
  };
  __device__ static __forceinline__ void Split(uint32_t x, uint32_t& big, uint32_t& small) {
#ifdef MN_FLASH_NO_MMA
    __trap();
#else
    // volatile: split where used, never hoisted out of the tile loop (the split row operands would
    // take twice their registers)
    asm volatile("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(__uint_as_float(x)));
    asm volatile("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(__uint_as_float(x) - __uint_as_float(big)));  // x - big: exact
#endif
  }
  __device__ static __forceinline__ void Tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef MN_FLASH_NO_MMA
    __trap();
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
  __device__ static __forceinline__ A Prep(const uint32_t (&w)[4]) {
    A a;
#pragma unroll
    for (int i = 0; i < 4; ++i) Split(w[i], a.big[i], a.small[i]);
    return a;
  }
  __device__ static __forceinline__ void Mma(float (&c)[4], const A& a, uint32_t b0, uint32_t b1) {
    uint32_t big0, small0, big1, small1;
    Split(b0, big0, small0);
    Split(b1, big1, small1);
    Tf32(c, a.small, big0, big1);  // the small terms first: they are added to the smallest partial sums
    Tf32(c, a.big, small0, small1);
    Tf32(c, a.big, big0, big1);
  }
  // k-step kc of M is its n-tile kc, with k permuted (A's k = t and t + 4 hold columns 2t and 2t + 1,
  // as the accumulator layout has them; LoadB2 reads tile rows 2t and 2t + 1 to match).
  template <int BC>
  __device__ static __forceinline__ A FromAcc(const float (&m)[BC / 8][4], int kc) {
    const uint32_t w[4] = {__float_as_uint(m[kc][0]), __float_as_uint(m[kc][2]), __float_as_uint(m[kc][1]), __float_as_uint(m[kc][3])};
    return Prep(w);
  }
  template <int LD>
  __device__ static __forceinline__ void LoadB2(uint32_t (&b)[4], const float* tile, int kc, int dn) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float* r = tile + (8 * kc + 2 * t) * LD + 8 * dn + g;  // LD % 32 == 4: conflict-free
    b[0] = __float_as_uint(r[0]);
    b[1] = __float_as_uint(r[LD]);
    b[2] = __float_as_uint(r[8]);
    b[3] = __float_as_uint(r[LD + 8]);
  }
  __device__ static __forceinline__ float Dot(uint32_t x, uint32_t o) { return __uint_as_float(x) * __uint_as_float(o); }
  __device__ static __forceinline__ void Store2(float* dst, float lo, float hi) { *reinterpret_cast<float2*>(dst) = make_float2(lo, hi); }
};

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
#ifdef MN_FLASH_NO_MMA
  __trap();
#else
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));  // 0: zero fill
#endif
}
__device__ __forceinline__ void CpAsyncCommit() {
#ifndef MN_FLASH_NO_MMA
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
#ifndef MN_FLASH_NO_MMA
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Sizes per element type and padded head_dim D.
template <typename T, int D>
struct Tiles {
  static constexpr int KR = Op<T>::KR;          // elements per k-step
  static constexpr int KS = D / KR;             // k-steps of a row (A fragments per row operand)
  static constexpr int EPC = 16 / sizeof(T);    // elements per 16-byte chunk
  static constexpr int LD = D + EPC;            // shared row: 16 bytes of padding, conflict-free fragment reads
  // Streamed rows per tile: registers (S, dP are 16 x BC per warp) and the 48 KB of static shared
  // memory (two operands, double buffered) for float32.
  static constexpr int BC = sizeof(T) == 2 ? (D <= 64 ? 64 : 32) : (D <= 64 ? 32 : 16);
};

// Rows [r0, r0 + 16) of head `head` of a [B, rows, heads*hd] tensor as raw A fragments (16 x D, KS
// k-steps): lane (g, t) holds rows g, g + 8, words t, t + 4 of each k-step; zeros past r_end and hd.
// Also returns the float32 values' dot with `other` (the same rows of another tensor) when other !=
// nullptr: per row g and g + 8, summed over the 4 lanes of the row.
template <typename T, int D>
__device__ __forceinline__ void LoadRowFrags(uint32_t (&a)[Tiles<T, D>::KS][4], const T* x, int64_t b, int64_t rows, int64_t heads,
                                             int64_t head, int64_t hd, int64_t r0, int64_t r_end, const T* other, float (&dot)[2]) {
  constexpr int KR = Tiles<T, D>::KR, PW = KR / 8;  // PW: elements per 32-bit word
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  dot[0] = dot[1] = 0.f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = r0 + g + 8 * half;
    const bool ok = r < r_end;
    const int64_t base = ((b * rows + (ok ? r : 0)) * heads + head) * hd;
#pragma unroll
    for (int kc = 0; kc < Tiles<T, D>::KS; ++kc)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int d = KR * kc + PW * (4 * hi + t);
        uint32_t u = 0;
        if (ok && d < hd) {
          u = *reinterpret_cast<const uint32_t*>(x + base + d);
          if (other != nullptr) dot[half] += Op<T>::Dot(u, *reinterpret_cast<const uint32_t*>(other + base + d));
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

// Issues the cp.async copies of rows [r0, r0 + BC) of head `head` into tile[BC][LD] (zeros past r_end
// and hd; hd % EPC == 0, so a 16-byte chunk is all in or all out).
template <typename T, int D, int BC, int NT>
__device__ __forceinline__ void LoadTileAsync(T* tile, const T* x, int64_t b, int64_t rows, int64_t heads, int64_t head, int64_t hd,
                                              int64_t r0, int64_t r_end) {
  constexpr int EPC = Tiles<T, D>::EPC, kChunks = D / EPC;
  for (int idx = threadIdx.x; idx < BC * kChunks; idx += NT) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t row = r0 + r;
    const bool ok = row < r_end && EPC * c < hd;
    const T* src = ok ? x + ((b * rows + row) * heads + head) * hd + EPC * c : x;
    CpAsync16(tile + r * Tiles<T, D>::LD + EPC * c, src, ok);
  }
}

// The block's pipeline, at the top of step n of a loop over n_tiles tiles (issue(0) before the loop;
// issue(n) starts the copies of tile n into buffer n & 1 and commits them): starts tile n + 1, waits
// for tile n, and makes it visible to the block. The step ends with __syncthreads(), which frees the
// buffer for issue(n + 2). (A loop body passed as a lambda instead made the compiler spill in the
// half types' head_dim-128 dK/dV kernel.)
template <typename Issue>
__device__ __forceinline__ void NextTile(int n, int n_tiles, Issue& issue) {
  if (n + 1 < n_tiles) {
    issue(n + 1);
    CpAsyncWait<1>();
  } else {
    CpAsyncWait<0>();
  }
  __syncthreads();
}

// The two GEMMs of a warp's 16 rows with a shared tile of BC rows, for every element type.
template <typename T, int D, int BC>
struct Gemm {
  using O = Op<T>;
  static constexpr int KS = Tiles<T, D>::KS, LD = Tiles<T, D>::LD;
  // c[nt] (16 x 8 per n-tile, BC / 8 n-tiles) = A (16 x D, raw fragments) . tile^T (tile rows are the columns).
  // float32: k-steps outside, so each A fragment is split once per tile; the half types keep n-tiles
  // outside, with the addressing of the kernels before float32 joined them (other forms spill in
  // their head_dim-128 dK/dV kernel). Each c[nt] sums its k-steps in order either way.
  __device__ static __forceinline__ void RowsTileT(float (&c)[BC / 8][4], const uint32_t (&a)[KS][4], const T* tile) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t* rows = reinterpret_cast<const uint32_t*>(tile + g * LD) + t;  // word t of row g; n-tile nt: + 8 nt rows
    constexpr int RW = LD * sizeof(T) / 4;  // words per shared row
#pragma unroll
    for (int nt = 0; nt < BC / 8; ++nt) c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.f;
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int kc = 0; kc < KS; ++kc) {
        const typename O::A ak = O::Prep(a[kc]);
#pragma unroll
        for (int nt = 0; nt < BC / 8; ++nt) O::Mma(c[nt], ak, rows[8 * nt * RW + 8 * kc], rows[8 * nt * RW + 8 * kc + 4]);
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < BC / 8; ++nt) {
        const T* row = tile + (8 * nt + g) * LD + 2 * t;
#pragma unroll
        for (int kc = 0; kc < KS; ++kc) {
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(row + 16 * kc);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(row + 16 * kc + 8);
          Half<T>::Mma(c[nt], a[kc], b0, b1);
        }
      }
    }
  }
  // acc (16 x D, D / 8 n-tiles) += M (16 x BC, accumulator layout) . tile (BC x D).
  __device__ static __forceinline__ void AccTile(float (&acc)[D / 8][4], const float (&m)[BC / 8][4], const T* tile) {
#pragma unroll
    for (int kc = 0; kc < BC / O::KR; ++kc) {
      const typename O::A a = O::template FromAcc<BC>(m, kc);
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t b[4];
        O::template LoadB2<LD>(b, tile, kc, dn);
        O::Mma(acc[dn], a, b[0], b[1]);
        O::Mma(acc[dn + 1], a, b[2], b[3]);
      }
    }
  }
};

// Rows g and g + 8 of a warp's 16 x D accumulator into a [B, rows, heads*hd] tensor of U (T, or float32
// partials), times `mul`.
template <typename U, int D>
__device__ __forceinline__ void StoreRows(U* x, const float (&acc)[D / 8][4], int64_t b, int64_t rows, int64_t heads, int64_t head,
                                          int64_t hd, int64_t r0, int64_t r_end, float mul) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t r = r0 + g + 8 * half;
    if (r >= r_end) continue;
    U* row = x + ((b * rows + r) * heads + head) * hd;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const int d = 8 * dn + 2 * t;
      if (d < hd) Op<U>::Store2(row + d, acc[dn][2 * half] * mul, acc[dn][2 * half + 1] * mul);
    }
  }
}

}  // namespace mma
