// The tensor-core form of the split-K decode kernel's warp work (attn_splitk.cuh, Cfg::MMA), for
// float16 and bfloat16 caches: q.k and p.v as mma.sync m16n8k16 with float32 accumulation. The scalar
// form spends ~475 instructions per warp on 4 KiB of a 16-bit cache (unpack, 4 heads' FMAs, shuffle
// reductions), which at 8 warps per SM caps it near 3 TB/s; here a 16-row tile costs 32 mma and 16
// ldmatrix. Layout (the FlashAttention-2 one, M = query heads): A = the group's query rows (rows g < GB
// of 16, the rest zero), B = K^T from shared memory (ldmatrix), C = scores S[head][row]; the scores'
// C fragment is the A fragment of P.V, B = V (ldmatrix.trans). Precision: q and k enter exactly (the
// scale log2(e)/sqrt(hd) is applied to the float32 scores, not to q), products are summed in float32;
// the weights p in [0, 1] are rounded to the element type for P.V (relative 2^-11 for float16, 2^-8 for
// bfloat16 per weight, averaged over the rows), the sums l stay in float32.
// The stages in shared memory are swizzled (16-byte chunk c of row r at c ^ (r & 7)) so that ldmatrix's
// 8 rows hit 8 different bank groups; rows past the slice are zero-filled (p = 0 must not meet garbage).
#pragma once
#include <type_traits>

#include "cuda_common.cuh"

namespace {

template <class T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same<T, __half>::value) {
    const __half2 h = __floats2half2_rn(lo, hi);
    u = *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    u = *reinterpret_cast<const uint32_t*>(&h);
  }
  return u;
}

template <class T>
__device__ __forceinline__ float2 UnpackPair(uint32_t u) {
  if constexpr (std::is_same<T, __half>::value) return __half22float2(*reinterpret_cast<const __half2*>(&u));
  else return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}

// d += A.B for the rows g of A (a0: k 2t..2t+1, a2: k 2t+8..2t+9); A's rows g + 8 are zero, so the
// C rows g + 8 stay zero and are not kept.
template <class T>
__device__ __forceinline__ void MmaRowG(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  float d2 = 0.f, d3 = 0.f;
  const uint32_t z = 0u;
  if constexpr (std::is_same<T, __half>::value)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(z), "r"(a2), "r"(z), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(z), "r"(a2), "r"(z), "r"(b0), "r"(b1));
}

// Four 8x8 matrices of 16-bit elements; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], const uint4* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], const uint4* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// cp.async of 16 bytes, or 16 zero bytes when !in (gmem must still be a valid address).
__device__ __forceinline__ void CpAsync16Z(void* smem, const void* gmem, bool in) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(in ? 16 : 0) : "memory");
}

// Head g's maximum of the tile's scores (mt: this lane's) over its 4 lanes; where it rises past the
// running maximum m, the sum l and the accumulators o are rescaled (RaiseMax). Both tensor-core forms.
template <int NT>
__device__ __forceinline__ void RaiseHeadMax(float mt, float& m, float& l, float (&o)[NT][2]) {
  mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
  mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
  RaiseMax(mt, m, l, reinterpret_cast<float(&)[2 * NT]>(o));
}

template <class T, int HD, int GB, class Cfg>
struct AttnMma {
  static constexpr int TR = Cfg::TR, C16 = Cfg::C16, NST = Cfg::NST;
  static constexpr int KS = HD / 16;  // k-steps of q.k
  static constexpr int NT = HD / 8;   // n-tiles of p.v
  static_assert(sizeof(T) == 2 && TR % 16 == 0 && C16 >= 8 && (C16 & (C16 - 1)) == 0 && GB <= 8, "tensor-core attention tile");

  struct Warp {
    int warp, lane, g, t;    // g = lane / 4: the head (A/C row) of this lane; t = lane % 4
    uint32_t qa[KS][2];      // A fragments of the head's query: k-step kk, dims 16kk + 2t (+8)
    float m, l;              // head g's running max (base 2) and this lane's part of its sum
    float o[NT][2];          // O[g][8n + 2t + {0, 1}]
  };

  __device__ static bool RealHead(const AttnSlice& s, int G, int g) { return g < GB && s.g0 + g < G; }

  // The lane's query words (pairs of elements) as they are in memory; zero for the padding heads.
  __device__ static void LoadQuery(const T* q, const AttnSlice& s, int G, int g, int t, uint32_t (&raw)[KS][2]) {
    const bool real = RealHead(s, G, g);
    const uint32_t* qp = reinterpret_cast<const uint32_t*>(q + (s.head0 + (real ? g : 0)) * HD);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      raw[kk][0] = real ? qp[8 * kk + t] : 0u;
      raw[kk][1] = real ? qp[8 * kk + 4 + t] : 0u;
    }
  }

  __device__ static void StartWarp(Warp& w, const uint32_t (&raw)[KS][2]) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      w.qa[kk][0] = raw[kk][0];
      w.qa[kk][1] = raw[kk][1];
    }
    w.m = -INFINITY;
    w.l = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) w.o[n][0] = w.o[n][1] = 0.f;
  }

  // ROPE: the query rotated at `pos` first (the Rope kernel's arithmetic, rounded to T as its output
  // is). Dimension d pairs with d +- HD/2, which is k-step kk +- KS/2 of the same lane: no exchange.
  __device__ static void StartWarpRope(Warp& w, const uint32_t (&raw)[KS][2], const float2* angles) {
    uint32_t rot[KS][2];
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      const bool first = kk < KS / 2;
      const int kp = first ? kk + KS / 2 : kk - KS / 2;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float2 x = UnpackPair<T>(raw[kk][e]), y = UnpackPair<T>(raw[kp][e]);
        const int j = (16 * kk + 8 * e + 2 * w.t) % (HD / 2);
        const float c0 = angles[j].x, s0 = angles[j].y, c1 = angles[j + 1].x, s1 = angles[j + 1].y;
        const float r0 = first ? x.x * c0 - y.x * s0 : x.x * c0 + y.x * s0;
        const float r1 = first ? x.y * c1 - y.y * s1 : x.y * c1 + y.y * s1;
        rot[kk][e] = PackPair<T>(r0, r1);
      }
    }
    StartWarp(w, rot);
  }

  // Tile i of a warp's pipeline (attn_splitk.cuh's Pipe), swizzled, rows past the slice zero-filled.
  template <class Pipe>
  __device__ static void Issue(const Pipe& p, int i) {
    if (i < p.tiles) {
      const int64_t row0 = p.Row0(i);
      uint4* st = p.wsm + (i % NST) * Cfg::STAGE16;
#pragma unroll
      for (int j = 0; j < TR * C16 / 32; ++j) {
        const int e = j * 32 + p.lane, r = e / C16, col = e % C16;
        const bool in = row0 + r < p.end;
        const int64_t src = (in ? row0 + r : 0) * p.kvw16 + col;
        const int dst = r * C16 + (col ^ (r & 7));
        CpAsync16Z(st + dst, p.kb + src, in);
        CpAsync16Z(st + TR * C16 + dst, p.vb + src, in);
      }
    }
    CpAsyncCommit();
  }

  // 16 rows of a stage (r16 .. r16 + 15): scores, online softmax for head g, acc += p V.
  __device__ static void Rows16(Warp& w, const uint4* Ks, const uint4* Vs, int r16, int64_t row0, int64_t end, float qscale) {
    float s[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float c0 = 0.f, c1 = 0.f;
      const int r = r16 + nt * 8 + (w.lane & 7);
#pragma unroll
      for (int j = 0; j < HD / 32; ++j) {
        uint32_t b[4];
        Ldsm4(b, Ks + r * C16 + ((4 * j + (w.lane >> 3)) ^ (r & 7)));
        MmaRowG<T>(c0, c1, w.qa[2 * j][0], w.qa[2 * j][1], b[0], b[1]);
        MmaRowG<T>(c0, c1, w.qa[2 * j + 1][0], w.qa[2 * j + 1][1], b[2], b[3]);
      }
      const int64_t rr = row0 + r16 + nt * 8 + 2 * w.t;
      s[nt][0] = rr < end ? c0 * qscale : -INFINITY;
      s[nt][1] = rr + 1 < end ? c1 * qscale : -INFINITY;
    }
    RaiseHeadMax(fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1])), w.m, w.l, w.o);
    const float mu = w.m == -INFINITY ? 0.f : w.m;  // avoids (-inf) - (-inf)
    float p[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        p[nt][e] = exp2f(s[nt][e] - mu);
        w.l += p[nt][e];
      }
    const uint32_t a0 = PackPair<T>(p[0][0], p[0][1]), a2 = PackPair<T>(p[1][0], p[1][1]);
    const int vr = r16 + (w.lane & 7) + ((w.lane >> 3) & 1) * 8;
#pragma unroll
    for (int dn = 0; dn < HD / 16; ++dn) {
      uint32_t b[4];
      Ldsm4T(b, Vs + vr * C16 + ((2 * dn + (w.lane >> 4)) ^ (vr & 7)));
      MmaRowG<T>(w.o[2 * dn][0], w.o[2 * dn][1], a0, a2, b[0], b[1]);
      MmaRowG<T>(w.o[2 * dn + 1][0], w.o[2 * dn + 1][1], a0, a2, b[2], b[3]);
    }
  }

  // The warp's tiles, NST - 1 loads ahead; then l summed over the head's 4 lanes.
  template <class Pipe, class Start>
  __device__ static void Stream(Warp& w, const Pipe& pipe, float qscale, Start start) {
#pragma unroll
    for (int i = 0; i < NST - 1; ++i) Issue(pipe, i);
    start();
    for (int i = 0; i < pipe.tiles; ++i) {
      Issue(pipe, i + NST - 1);
      CpAsyncWait<NST - 1>();
      __syncwarp();
      pipe.template Patch<true>(i);
      const uint4* Ks = pipe.Stage(i);
      const int64_t row0 = pipe.Row0(i);
#pragma unroll
      for (int r16 = 0; r16 < TR; r16 += 16) Rows16(w, Ks, Ks + TR * C16, r16, row0, pipe.end, qscale);
      __syncwarp();  // every lane is done with this stage before it is refilled
    }
    CpAsyncWait<0>();
    w.l += __shfl_xor_sync(0xffffffffu, w.l, 1);
    w.l += __shfl_xor_sync(0xffffffffu, w.l, 2);
  }

  // The warp's partial into the block's merge area (attn_splitk.cuh's FoldWarps layout).
  __device__ static void StorePartial(const Warp& w, float* sm_acc, float* sm_ml) {
    if (w.g >= GB) return;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      sm_acc[(w.warp * GB + w.g) * HD + 8 * n + 2 * w.t] = w.o[n][0];
      sm_acc[(w.warp * GB + w.g) * HD + 8 * n + 2 * w.t + 1] = w.o[n][1];
    }
    if (w.t == 0) {
      sm_ml[(w.warp * GB + w.g) * 2] = w.m;
      sm_ml[(w.warp * GB + w.g) * 2 + 1] = w.l;
    }
  }
};

}  // namespace
