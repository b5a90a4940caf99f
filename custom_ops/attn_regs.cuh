// The register-streamed form of the split-K decode kernel's warp work (attn_splitk.cuh, Cfg::REG): K
// and V go from global memory straight into registers, no shared-memory stage. A row's 16-byte chunks
// are spread over LPR = C16 lanes (one chunk each; a warp load covers RW = 32 / C16 rows), and each warp
// has U loads of its own rows in flight ahead of the ones it computes. Why: streaming through cp.async
// stages capped near 70-75% of the bandwidth however deep the pipeline, while a plain read in the same
// launch geometry reaches 84-86% when the SM has enough threads with loads in flight; with one chunk per
// lane a thread's state is small (query and sums of 4 heads x EPC elements), so a block can have 16
// warps. Per warp load: the 4 heads' dot products of each row, summed over its LPR lanes by a
// transposing butterfly (the four sums in 3 + log2(LPR) - 2 shuffles, then broadcast), online softmax in
// base 2 rescaled only when the warp-uniform maximum rises, acc += p v with the lane's own V chunk.
#pragma once

#include "cuda_common.cuh"

namespace {

template <class T, int HD, int GB, class Cfg>
struct AttnRegs {
  using E = Elem<T>;
  static constexpr int NW = Cfg::NW, U = Cfg::U, EPC = E::EPC, C16 = HD / EPC;
  static constexpr int LPR = C16, RW = 32 / C16;  // lanes per row, rows per warp load
  static_assert((C16 == 8 || C16 == 16 || C16 == 32) && GB <= 4 && U >= 1, "register-streamed attention shape");
  using Raw = uint4[GB];

  struct Warp {
    int warp, lane;
    float q[GB][EPC];
    float acc[GB][EPC];
    float m[GB], l[GB];  // m: running max (base 2, warp-uniform); l: this lane's row group's rows
  };

  // This lane's chunk of the group's query rows, raw: unpacked once the first K/V loads are in flight.
  __device__ static void LoadQuery(const T* q, const AttnSlice& s, int G, int lane, uint4 (&raw)[GB]) {
#pragma unroll
    for (int g = 0; g < GB; ++g)
      raw[g] = s.g0 + g < G ? reinterpret_cast<const uint4*>(q + (s.head0 + g) * HD)[lane % LPR] : make_uint4(0u, 0u, 0u, 0u);
  }

  __device__ static void StartWarp(Warp& w, const uint4 (&raw)[GB], float qscale) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      E::Unpack(raw[g], w.q[g]);
#pragma unroll
      for (int e = 0; e < EPC; ++e) {
        w.q[g][e] *= qscale;
        w.acc[g][e] = 0.f;
      }
      w.m[g] = -INFINITY;
      w.l[g] = 0.f;
    }
  }

  // The four heads' partial dots summed over the row's LPR lanes; every lane gets its row's four sums.
  // After the two exchanges lane l holds head 2 * bit(LPR / 2) + bit(LPR / 4) of its row: lane g * LPR / 4.
  // hi, mid: those two bits of this lane; base: the row's first lane (computed once per warp).
  __device__ static void SumHeads(float (&s)[4], bool hi, bool mid, int base) {
    constexpr unsigned F = 0xffffffffu;
    float a0 = hi ? s[2] : s[0], a1 = hi ? s[3] : s[1];
    a0 += __shfl_xor_sync(F, hi ? s[0] : s[2], LPR / 2);
    a1 += __shfl_xor_sync(F, hi ? s[1] : s[3], LPR / 2);
    float c = mid ? a1 : a0;
    c += __shfl_xor_sync(F, mid ? a0 : a1, LPR / 4);
#pragma unroll
    for (int off = LPR / 8; off > 0; off >>= 1) c += __shfl_xor_sync(F, c, off);
#pragma unroll
    for (int g = 0; g < 4; ++g) s[g] = __shfl_sync(F, c, base + g * (LPR / 4));
  }

  // The row's weights p per head (in: the lane's row is inside the slice), after the online-softmax
  // update of m, l and acc.
  __device__ static void Weights(Warp& w, const float (&s)[4], bool in, float (&p)[GB]) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      const float sg = in ? s[g] : -INFINITY;
      float mt = sg;
#pragma unroll
      for (int off = LPR; off < 32; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      RaiseMax(mt, w.m[g], w.l[g], w.acc[g]);
      p[g] = exp2f(sg - w.m[g]);  // the warp's first load has a row inside: m is finite here
      w.l[g] += p[g];
    }
  }

  // The warp's rows of the slice: a warp load covers RW rows, the warp's loads are NW * RW rows apart;
  // U loads in registers are computed while the next U are in flight. start(): the warp's query and
  // sums, once the first loads are issued. Then its totals: l and acc over the row groups.
  template <class Start>
  __device__ static void Stream(Warp& w, const T* k, const T* v, const AttnSlice& s, const AttnArgs& a, Start start) {
    const int64_t kvw16 = (int64_t)a.KVH * C16;  // row stride in chunks
    const int64_t off = (int64_t)s.b * a.max_seq * kvw16 + (int64_t)s.kvh * C16 + w.lane % LPR;
    const uint4* kb = reinterpret_cast<const uint4*>(k) + off;
    const uint4* vb = reinterpret_cast<const uint4*>(v) + off;
    constexpr int64_t kStep = (int64_t)NW * RW;  // rows from one of the warp's loads to its next
    const int64_t first = s.start + (int64_t)w.warp * RW, end = s.end;  // first: the warp's first load's first row
    const int64_t mine = first + w.lane / LPR;  // this lane's row of that load
    const unsigned lane = LaneOnce();
    const bool hi = lane & (LPR / 2), mid = lane & (LPR / 4);
    const int base = static_cast<int>(lane & ~(LPR - 1u));
    auto load = [&](int64_t row, uint4& kx, uint4& vx) {
      kx = row < end ? __ldcs(kb + row * kvw16) : make_uint4(0u, 0u, 0u, 0u);
      vx = row < end ? __ldcs(vb + row * kvw16) : make_uint4(0u, 0u, 0u, 0u);
    };
    uint4 kc[U], vc[U];
#pragma unroll
    for (int u = 0; u < U; ++u) load(mine + u * kStep, kc[u], vc[u]);
    start();
    for (int64_t r = first; r < end; r += U * kStep) {  // r: the step's first row (warp-uniform)
      uint4 kn[U], vn[U];
#pragma unroll
      for (int u = 0; u < U; ++u) load(mine + (r - first) + (U + u) * kStep, kn[u], vn[u]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (r + u * kStep >= end) break;  // warp-uniform
        float kf[EPC], vf[EPC], sc[4], p[GB];
        E::Unpack(kc[u], kf);
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          sc[g] = 0.f;
          if (g < GB)
#pragma unroll
            for (int e = 0; e < EPC; ++e) sc[g] = fmaf(w.q[g][e], kf[e], sc[g]);
        }
        SumHeads(sc, hi, mid, base);
        Weights(w, sc, RW == 1 || mine + (r - first) + u * kStep < end, p);
        E::Unpack(vc[u], vf);
#pragma unroll
        for (int g = 0; g < GB; ++g)
#pragma unroll
          for (int e = 0; e < EPC; ++e) w.acc[g][e] = fmaf(p[g], vf[e], w.acc[g][e]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        kc[u] = kn[u];
        vc[u] = vn[u];
      }
    }
#pragma unroll
    for (int g = 0; g < GB; ++g)
#pragma unroll
      for (int o = LPR; o < 32; o <<= 1) {
        w.l[g] += __shfl_xor_sync(0xffffffffu, w.l[g], o);
#pragma unroll
        for (int e = 0; e < EPC; ++e) w.acc[g][e] += __shfl_xor_sync(0xffffffffu, w.acc[g][e], o);
      }
  }

  // The warp's partial (acc over head_dim, m, l per head) into the block's merge area.
  __device__ static void StorePartial(const Warp& w, float* sm_acc, float* sm_ml) {
    if (w.lane >= LPR) return;
#pragma unroll
    for (int g = 0; g < GB; ++g) {
#pragma unroll
      for (int e = 0; e < EPC; ++e) sm_acc[(w.warp * GB + g) * HD + w.lane * EPC + e] = w.acc[g][e];
      if (w.lane == 0) {
        sm_ml[(w.warp * GB + g) * 2] = w.m[g];
        sm_ml[(w.warp * GB + g) * 2 + 1] = w.l[g];
      }
    }
  }
};

}  // namespace
