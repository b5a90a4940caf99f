// The merges of the split-K decode kernel (attn_splitk.cuh): the warps' partials into the block's, and
// the splits' partials into the output, through a thread-block cluster's shared memory or through the
// workspace by the last block to finish.
#pragma once
#include <cooperative_groups.h>

#include "cuda_common.cuh"

namespace {

template <class T, int HD, int GB, int NW>
struct AttnMerge {
  using E = Elem<T>;

  // Merges the warps' partials (StorePartial, in shared memory: the stage buffers are free now) into
  // the block's partial per head: the output itself when there is one split, else this split's
  // (m, l, acc): in shared memory `part` ([GB][HD] acc, then [GB] (m, l)) when the splits form a
  // cluster, else in the workspace.
  __device__ static void FoldWarps(const AttnSlice& s, const AttnArgs& a, T* out, const float* sm_acc, const float* sm_ml,
                                    float* part) {
    __syncthreads();
    for (int e = threadIdx.x; e < GB * HD; e += blockDim.x) {
      const int g = e / HD, d = e % HD;
      if (s.g0 + g >= a.G) continue;
      float M = -INFINITY;
#pragma unroll
      for (int x = 0; x < NW; ++x) M = fmaxf(M, sm_ml[(x * GB + g) * 2]);
      float lt = 0.f, at = 0.f;
      if (M != -INFINITY) {
#pragma unroll
        for (int x = 0; x < NW; ++x) {
          const float mw = sm_ml[(x * GB + g) * 2];
          if (mw == -INFINITY) continue;
          const float c = exp2f(mw - M);
          lt += sm_ml[(x * GB + g) * 2 + 1] * c;
          at += sm_acc[(x * GB + g) * HD + d] * c;
        }
      }
      const int64_t th = s.head0 + g;
      if (a.splits == 1) {  // split 0 covers every row
        out[th * HD + d] = E::FromF(s.valid ? at / lt : __int_as_float(0x7fc00000));
      } else if (a.cluster) {
        part[g * HD + d] = at;
        if (d == 0) reinterpret_cast<float2*>(part + GB * HD)[g] = make_float2(M, lt);
      } else {
        a.ws_acc[(th * a.splits + blockIdx.y) * HD + d] = at;
        if (d == 0) a.ws_ml[th * a.splits + blockIdx.y] = make_float2(M, lt);
      }
    }
  }

  // The cluster's splits merged through distributed shared memory: after the cluster barrier (release/
  // acquire: every block's `part` is complete), block r of the cluster computes its share of the
  // group's GB * HD outputs from the CL partials; a second barrier keeps each block's shared memory
  // alive until the others have read it. Replaces the workspace, the fence and the atomic counter.
  __device__ static void MergeCluster(const AttnSlice& s, const AttnArgs& a, T* out, float* part) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // clusters are launched on compute capability 9.0 only
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int CL = a.splits, r = static_cast<int>(cluster.block_rank());
    const int per = (GB * HD + CL - 1) / CL;
    for (int e = r * per + threadIdx.x; e < min((r + 1) * per, GB * HD); e += blockDim.x) {
      const int g = e / HD, d = e % HD;
      if (s.g0 + g >= a.G) continue;
      float M = -INFINITY, lsum = 0.f, acc = 0.f;
      for (int x = 0; x < CL; ++x) {
        const float* px = cluster.map_shared_rank(part, x);
        const float2 ml = reinterpret_cast<const float2*>(px + GB * HD)[g];
        const float y = px[g * HD + d];
        const float mn = fmaxf(M, ml.x);
        const float mu = mn == -INFINITY ? 0.f : mn;
        const float old = exp2f(M - mu), wt = exp2f(ml.x - mu);
        lsum = fmaf(lsum, old, ml.y * wt);
        acc = fmaf(acc, old, y * wt);
        M = mn;
      }
      out[(s.head0 + g) * HD + d] = E::FromF(s.valid ? acc / lsum : __int_as_float(0x7fc00000));
    }
    cluster.sync();
#endif
  }

  // Counts this block's split done; true in the last block of its group to finish, which then sees
  // every split's partial. One acquire-release atomic per block (thread 0, after the barrier that
  // orders the block's writes before it; the release covers them, the acquire the other splits'
  // writes released before their counts), as a semaphore between blocks. In place of a fence before
  // a relaxed atomic and one after it: up to 0.25 us less per launch on an H200 (attn_check, batch 1).
  __device__ static bool ArriveLast(const AttnSlice& s, const AttnArgs& a) {
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned* counter = a.counters + (int64_t)s.bt * gridDim.x + blockIdx.x;
      unsigned before;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(before) : "l"(counter) : "memory");
      last = before == static_cast<unsigned>(a.splits - 1);
      if (last) *counter = 0u;  // ready for the next launch (or CUDA-graph replay)
    }
    __syncthreads();
    return last;
  }

  // out = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M), M = max_s m_s. A thread per (head, 4 columns)
  // loads 16 splits at once (one round trip to L2), takes their maximum, then weighs them all (the 16
  // exponentials independent of each other, not a chain through a running maximum); an empty split has
  // m = -inf, l = 0 and acc = 0, and weighs 0.
  __device__ static void MergeSplits(const AttnSlice& s, const AttnArgs& a, T* out) {
    constexpr int COLS = HD / 4;
    for (int e = threadIdx.x; e < GB * COLS; e += NW * 32) {
      const int g = e / COLS, c = e % COLS;
      if (s.g0 + g >= a.G) continue;
      const int64_t th = s.head0 + g;
      const float2* ml = a.ws_ml + th * a.splits;
      const float4* src = reinterpret_cast<const float4*>(a.ws_acc + th * a.splits * HD) + c;
      float M = -INFINITY, lsum = 0.f;
      float4 s4 = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int sp0 = 0; sp0 < a.splits; sp0 += 16) {  // 16 splits' loads in flight at once: one round trip to L2
        float2 x[16];
        float4 y[16];
#pragma unroll
        for (int u = 0; u < 16; ++u) {
          x[u] = sp0 + u < a.splits ? __ldcg(ml + sp0 + u) : make_float2(-INFINITY, 0.f);
          y[u] = sp0 + u < a.splits ? __ldcg(src + (int64_t)(sp0 + u) * COLS) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float mc = M;
#pragma unroll
        for (int u = 0; u < 16; ++u) mc = fmaxf(mc, x[u].x);
        const float mu = mc == -INFINITY ? 0.f : mc;  // avoids (-inf) - (-inf)
        const float old = exp2f(M - mu);
        lsum *= old;
        s4 = make_float4(s4.x * old, s4.y * old, s4.z * old, s4.w * old);
#pragma unroll
        for (int u = 0; u < 16; ++u) {
          const float wt = exp2f(x[u].x - mu);
          lsum = fmaf(x[u].y, wt, lsum);
          s4 = make_float4(fmaf(y[u].x, wt, s4.x), fmaf(y[u].y, wt, s4.y), fmaf(y[u].z, wt, s4.z), fmaf(y[u].w, wt, s4.w));
        }
        M = mc;
      }
      const float inv = s.valid ? 1.f / lsum : __int_as_float(0x7fc00000);
      T* o = out + th * HD + c * 4;
      o[0] = E::FromF(s4.x * inv);
      o[1] = E::FromF(s4.y * inv);
      o[2] = E::FromF(s4.z * inv);
      o[3] = E::FromF(s4.w * inv);
    }
  }
};

}  // namespace
