// The register-fed tensor-core form of the split-K decode kernel's warp work (attn_splitk.cuh, Cfg::REG
// and Cfg::MMA), for float16 and bfloat16 caches: K and V go from global memory straight into the
// registers mma.sync takes them from, no shared-memory stage, no ldmatrix. Why: the tensor-core form
// (attn_mma.cuh) streams through cp.async stages, which capped its split pass near 55-65% of the
// bandwidth at batch 1, and the register-streamed form (attn_regs.cuh) spends too many instructions per
// byte on 16-bit elements (unpacking, 8 FMAs per head and chunk, shuffle reductions).
// A warp takes its rows 8 at a time (a unit). q.k: m16n8k16 with A = the group's query rows (rows g < GB
// of 16, the rest zero) and B = K^T of the unit's 8 rows; p.v: m16n8k8 with A = the unit's weights (the
// q.k result's C fragment, as in the tensor-core form) and B = V. The fragments' layouts ask for
// elements that are not adjacent in memory; both products are sums over an index that can be permuted,
// so the head dims are renumbered for each so that every lane reads whole 16-byte chunks and each load
// instruction of the warp reads whole 32-byte sectors (64 or 128 contiguous bytes per row; with each
// lane reading one contiguous slice instead, an instruction used half of every sector it touched, and
// the form was 10% slower at 8192 cached rows):
//   q.k: lane (g, t) reads chunks t + 4c (c < HD/32) of row g; its words w = 4c + i hold dims
//        8 (t + 4c) + 2i, + 1, and k-step kk's B words (k 2t, 2t + 1 and 2t + 8, 2t + 9 of column g)
//        are its words 2kk and 2kk + 1; the query is read in the same order (its A words likewise);
//   p.v: lane (g, t) reads chunks g + 8c (c < HD/64) of rows 2t and 2t + 1; n-tile nt's B word (rows 2t,
//        2t + 1 of column g) is one byte permute of the two rows' elements nt, which are dim
//        8 (g + 8 (nt / 8)) + nt % 8; so the output's column (nt, n) is dim 8 (n + 8 (nt / 8)) + nt % 8.
// Precision as the tensor-core form: q and k enter exactly, products summed in float32, the weights p
// rounded to the element type for p.v, the sums l in float32.
#pragma once
#include <type_traits>

#include "cuda_common.cuh"

namespace {

// d += A.B, m16n8k8: A's rows g (a0: k 2t..2t + 1; rows g + 8 are zero, their C rows not kept), B one word.
template <class T>
__device__ __forceinline__ void MmaK8RowG(float& d0, float& d1, uint32_t a0, uint32_t b0) {
  float d2 = 0.f, d3 = 0.f;
  const uint32_t z = 0u;
  if constexpr (std::is_same<T, __half>::value)
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(z), "r"(b0));
  else
    asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(z), "r"(b0));
}

// Word w (compile-time after unrolling) of an array of 16-byte chunks.
template <int N>
__device__ __forceinline__ uint32_t WordOf(const uint4 (&c)[N], int w) {
  const uint4& x = c[w / 4];
  return w % 4 == 0 ? x.x : w % 4 == 1 ? x.y : w % 4 == 2 ? x.z : x.w;
}

template <class T, int HD, int GB, class Cfg>
struct AttnRegMma {
  static constexpr int NW = Cfg::NW, U = Cfg::U, C16 = HD / 8;
  static constexpr int KS = HD / 16;  // k-steps of q.k
  static constexpr int NT = HD / 8;   // n-tiles of p.v
  static constexpr int KQ = HD / 32;  // 16-byte chunks a lane reads of a K (and the query) row
  static constexpr int VQ = HD / 64;  // 16-byte chunks a lane reads of a V row
  static_assert(sizeof(T) == 2 && (HD == 64 || HD == 128) && GB <= 8 && U >= 1, "register-fed tensor-core attention shape");
  using Raw = uint4[KQ];

  struct Warp {
    int warp, lane;
    uint32_t qa[KS][2];  // A words of head g's query: k-step kk
    float m, l;          // head g's running max (base 2) and this lane's part of its sum
    float o[NT][2];      // O[g][column (nt, 2t + e)]
  };
  // A unit's loads: this lane's K chunks of row g, V chunks of rows 2t and 2t + 1.
  struct Unit {
    uint4 k[KQ];
    uint4 v[2][VQ];
  };

  // This lane's query chunks (head g = lane / 4, chunks t + 4c), raw; zero for the padding heads.
  __device__ static void LoadQuery(const T* q, const AttnSlice& s, int G, int lane, Raw& raw) {
    const int g = lane / 4, t = lane % 4;
    const bool real = g < GB && s.g0 + g < G;
    const uint4* qp = reinterpret_cast<const uint4*>(q + (s.head0 + (real ? g : 0)) * HD) + t;
#pragma unroll
    for (int c = 0; c < KQ; ++c) raw[c] = real ? qp[4 * c] : make_uint4(0u, 0u, 0u, 0u);
  }

  __device__ static void StartWarp(Warp& w, const Raw& raw, float) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      w.qa[kk][0] = WordOf(raw, 2 * kk);
      w.qa[kk][1] = WordOf(raw, 2 * kk + 1);
    }
    w.m = -INFINITY;
    w.l = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) w.o[n][0] = w.o[n][1] = 0.f;
  }

  // The unit of rows [r0, r0 + 8); rows past `end` are zero (not read). kb, vb: row 0 at the lane's
  // first chunk (t, g); g, t2: its K row and first V row in the unit.
  __device__ static void Load(const uint4* kb, const uint4* vb, int64_t kvw16, int64_t r0, int64_t end, int g, int t2, Unit& u) {
    const int64_t rk = r0 + g, rv = r0 + t2;
#pragma unroll
    for (int c = 0; c < KQ; ++c) u.k[c] = rk < end ? __ldcs(kb + rk * kvw16 + 4 * c) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int c = 0; c < VQ; ++c) u.v[j][c] = rv + j < end ? __ldcs(vb + (rv + j) * kvw16 + 8 * c) : make_uint4(0u, 0u, 0u, 0u);
  }

  // One unit: scores of rows r0 + t2 (+1) for head g, online softmax, o += p V.
  __device__ static void Compute(Warp& w, const Unit& u, int64_t r0, int64_t end, int t2, float qscale) {
    float c[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // two accumulators: two chains of KS / 2 dependent mma, not one of KS
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      MmaRowG<T>(c[kk % 2][0], c[kk % 2][1], w.qa[kk][0], w.qa[kk][1], WordOf(u.k, 2 * kk), WordOf(u.k, 2 * kk + 1));
    const float c0 = c[0][0] + c[1][0], c1 = c[0][1] + c[1][1];
    const int64_t rr = r0 + t2;
    const float s0 = rr < end ? c0 * qscale : -INFINITY, s1 = rr + 1 < end ? c1 * qscale : -INFINITY;
    RaiseHeadMax(fmaxf(s0, s1), w.m, w.l, w.o);  // finite: row r0 is inside the slice
    const float p0 = exp2f(s0 - w.m), p1 = exp2f(s1 - w.m);
    w.l += p0 + p1;
    const uint32_t a0 = PackPair<T>(p0, p1);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint32_t b = __byte_perm(WordOf(u.v[0], nt / 2), WordOf(u.v[1], nt / 2), nt % 2 ? 0x7632 : 0x5410);
      MmaK8RowG<T>(w.o[nt][0], w.o[nt][1], a0, b);
    }
  }

  // The warp's units: unit i of the warp starts NW * 8 rows after its unit i - 1; U units in registers
  // are computed while the next U are in flight. start(): the warp's query and sums, once the first
  // loads are issued. Then l summed over head g's 4 lanes.
  template <class Start>
  __device__ static void Stream(Warp& w, const T* k, const T* v, const AttnSlice& s, const AttnArgs& a, Start start) {
    const unsigned lane = LaneOnce();
    const int g = static_cast<int>(lane / 4), t2 = static_cast<int>(lane % 4) * 2;
    const int64_t kvw16 = (int64_t)a.KVH * C16;  // row stride in chunks
    const int64_t head = (int64_t)s.b * a.max_seq * kvw16 + (int64_t)s.kvh * C16;
    const uint4* kb = reinterpret_cast<const uint4*>(k) + head + t2 / 2;
    const uint4* vb = reinterpret_cast<const uint4*>(v) + head + g;
    constexpr int64_t kStep = (int64_t)NW * 8;
    const int64_t first = s.start + (int64_t)w.warp * 8, end = s.end;
    Unit cur[U];
#pragma unroll
    for (int u = 0; u < U; ++u) Load(kb, vb, kvw16, first + u * kStep, end, g, t2, cur[u]);
    start();
    for (int64_t r = first; r < end; r += U * kStep) {  // warp-uniform
      Unit nxt[U];
#pragma unroll
      for (int u = 0; u < U; ++u) Load(kb, vb, kvw16, r + (U + u) * kStep, end, g, t2, nxt[u]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (r + u * kStep >= end) break;
        Compute(w, cur[u], r + u * kStep, end, t2, a.qscale);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) cur[u] = nxt[u];
    }
    w.l += __shfl_xor_sync(0xffffffffu, w.l, 1);
    w.l += __shfl_xor_sync(0xffffffffu, w.l, 2);
  }

  // The warp's partial into the block's merge area (attn_splitk.cuh's FoldWarps layout), dims restored.
  __device__ static void StorePartial(const Warp& w, float* sm_acc, float* sm_ml) {
    const int g = w.lane / 4, t = w.lane % 4;
    if (g >= GB) return;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) sm_acc[(w.warp * GB + g) * HD + 8 * (2 * t + e + 8 * (nt / 8)) + nt % 8] = w.o[nt][e];
    if (t == 0) {
      sm_ml[(w.warp * GB + g) * 2] = w.m;
      sm_ml[(w.warp * GB + g) * 2 + 1] = w.l;
    }
  }
};

}  // namespace
