// The split-K decode kernel of com.meganeura CachedAttention (AttnSplit) and its pieces; included by
// cuda_attention.cu, whose launcher picks the tile configuration and the workspace.
#pragma once
#include <type_traits>

#include "attn_cfg.cuh"
#include "cuda_common.cuh"

namespace {

// ------------------------------------------------------------------ CachedAttention
// Split-K ("flash decoding"). Grid (KV head x head group, split, sequence x query row), one block per
// SM: a block streams its slice [start, end) of the cache rows of one KV head of one sequence once, for
// all query heads of the group (GQA: K/V are read once per group), and keeps a partial (m, l, acc[hd])
// per head. The splits' partials are merged in the same launch: where there are at most 8 splits and
// their clusters fit (batch > 1), the splits of a group form a thread-block cluster and merge through
// distributed shared memory (MergeCluster); else the last block of a (sequence, row, KV head, group)
// to finish (an atomic counter per group, reset by that block) merges them from a workspace.
// Inside a block each warp runs its own cp.async pipeline: NST stages of TR rows of K and V (STB bytes
// per stage) in shared memory, 16-byte loads, no block barrier in the main loop. The warp's work:
//   scalar form (float32, and other head_dims):
//   QK: lanes (sub, sl) = (row of the step, 16-byte slice): C chunks (16 elements) per lane, LPR lanes
//       per row, shuffle-reduced dots; online softmax per tile in base 2 (q pre-scaled by log2(e)/sqrt(hd)).
//   PV: lanes over head_dim (PL lanes per row), p broadcast by shuffle, acc in float registers.
//   tensor-core form (Cfg::MMA: float16/bfloat16, head_dim 64 and 128): attn_mma.cuh.
// float16/bfloat16 caches are read as such (half the bytes); sums in float32.
int g_attn_waves = 1;           // split-K grid = waves x resident blocks (tuning knob for attn_check)
bool g_attn_skip_merge = false;  // attn_check times the split pass alone (output then invalid)
int g_attn_last_splits = 0;      // the split count of the last launch (reported by attn_check)
bool g_attn_pdl = true;          // programmatic dependent launch where the GPU has it (attn_check compares)
int g_attn_blocks_per_sm = 1;    // > 0: at most this many blocks per SM in the grid, 0: as many as fit (attn_check compares)
int g_attn_cluster_max = 8;      // splits merged through a thread-block cluster when there are at most this many (0: never)
int g_attn_last_cluster = 0;     // the cluster size of the last launch (0: the atomic-counter merge)
int g_attn_flash = -1;           // chunks on the flash forward: -1 where FlashForChunk says so, 0 never, 1 always (attn_check)
int g_attn_key_splits = 0;       // the flash forward's key splits for chunks: 0 as it chooses, n > 0 at most n (attn_check)

// The lane index from one volatile read of %laneid, for the register forms' loops: the compiler cannot
// re-read it inside them, as it does threadIdx.x to save a register (an S2R in each row's shuffle chain
// cost the register-streamed form 13% at 16384 rows).
__device__ __forceinline__ unsigned LaneOnce() {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

// Online softmax, shared by every form: when a new maximum mn (base 2)
// exceeds the running one m, the sum l and the accumulators acc are rescaled by 2^(m - mn) and m takes
// mn. Warp-uniform where m and mn are; rare after the first rows.
template <int N>
__device__ __forceinline__ void RaiseMax(float mn, float& m, float& l, float (&acc)[N]) {
  if (mn > m) {
    const float corr = exp2f(m - mn);
    l *= corr;
#pragma unroll
    for (int c = 0; c < N; ++c) acc[c] *= corr;
    m = mn;
  }
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

struct AttnArgs {
  int T, H, KVH, G, ngroups, splits;
  MnPos pos;
  int64_t max_seq;
  float qscale;
  float* ws_acc;         // [B*T*H][splits][hd] partial sums (splits > 1)
  float2* ws_ml;         // [B*T*H][splits] (m, l)
  unsigned* counters;    // [B*T][KVH*ngroups] finished splits, reset to 0 by the last one
  int skip_merge;        // timing only (attn_check): stop after the split pass
  int cluster;            // the splits of a (sequence, row, head group) form one thread-block cluster (DSMEM merge)
};

// What one block works on: a KV head's head group of one (sequence, row) and a slice of its cache rows.
struct AttnSlice {
  int kvh, g0, b, bt;
  bool valid;          // the sequence's position is in range (else its output is NaN and nothing is read)
  int64_t kv_pos;      // the sequence's position (its first new row)
  int64_t start, end;  // this split's cache rows [start, end); empty past the attended rows
  int64_t head0;       // (sequence, row, first head of the group)
};

// RopeCachedAttention's form of the kernel (ROPE): q and k_new arrive unrotated; the rows
// [kv_pos, kv_pos + T) of the caches are this step's (rotated k_new, v_new). Each block writes the new
// rows inside its own slice into the caches (its KV head's columns), makes them visible, then streams
// its slice as usual; no block reads a new row it did not write, and blocks writing one row (the rows
// of T > 1 queries, head groups of G > 4) write the same values. inv: the rope frequencies (HD / 2).
template <class T, int HD, bool ROPE>
struct RopeIn {
  const T* k_new;  // [B*T][KVH*HD]
  const T* v_new;
  T* k;  // the caches the kernel reads (and writes the new rows into)
  T* v;
  float inv[HD / 2];
};
template <class T, int HD>
struct RopeIn<T, HD, false> {};

}  // namespace

#include "attn_merge.cuh"
#include "attn_mma.cuh"
#include "attn_regmma.cuh"
#include "attn_regs.cuh"

namespace {

// The pieces of the split-K kernel, for one element type, head_dim, head-group size GB and tile shape.
template <class T, int HD, int GB, class Cfg>
struct AttnBlock {
  using E = Elem<T>;
  static constexpr int NW = Cfg::NW, NST = Cfg::NST, C = Cfg::C, LPR = Cfg::LPR, R = Cfg::R, TR = Cfg::TR;
  static constexpr int STEPS = Cfg::STEPS, PL = Cfg::PL, RV = Cfg::RV, CV = Cfg::CV, AV = Cfg::AV, C16 = Cfg::C16;
  static constexpr int EPC = Cfg::EPC, QE = C * EPC;  // QE: query elements per lane and head

  // One warp's running state: its lane layouts, the scaled query slices and the online softmax.
  struct Warp {
    int warp, lane;
    int sub, sl;  // QK layout: row of the step, 16-byte slice
    int rv, pl;   // PV layout: row in parallel, lane over head_dim
    float qr[GB][QE];
    float m[GB], l[GB];  // m: running max (base 2, warp-uniform); l: this lane's rows only
    float acc[GB][AV];
  };

  // Which heads of which (sequence, row) the block serves; the rows come from its position (Rows).
  __device__ static AttnSlice Heads(const AttnArgs& a) {
    AttnSlice s;
    s.kvh = blockIdx.x / a.ngroups;
    s.g0 = (blockIdx.x % a.ngroups) * GB;
    s.bt = blockIdx.z;
    s.b = s.bt / a.T;
    s.head0 = (int64_t)s.bt * a.H + (int64_t)s.kvh * a.G + s.g0;
    return s;
  }

  __device__ static void Rows(const AttnArgs& a, AttnSlice& s) {
    const int t = s.bt % a.T;
    // The grid is sized for max_seq; each block finds its slice of the rows its sequence attends to.
    const int64_t kv_pos = LoadPos(a.pos, s.b);
    s.kv_pos = kv_pos;
    s.valid = kv_pos >= 0 && kv_pos <= a.max_seq - a.T;
    const int64_t L = s.valid ? kv_pos + t + 1 : 0;  // query row t attends to cache rows [0, L)
    constexpr int64_t kRowsPerPass = (int64_t)NW * TR;
    const int64_t chunk = ((L + a.splits - 1) / a.splits + kRowsPerPass - 1) / kRowsPerPass * kRowsPerPass;
    s.start = (int64_t)blockIdx.y * chunk;
    s.end = min(s.start + chunk, L);
  }

  // This lane's QK slices of the group's query rows, raw: unpacked once the first K/V loads are in flight.
  __device__ static void LoadQuery(const T* q, const AttnSlice& s, int G, int sl, uint4 (&raw)[GB][C]) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      const uint4* qp = reinterpret_cast<const uint4*>(q + (s.head0 + g) * HD);
#pragma unroll
      for (int c = 0; c < C; ++c) raw[g][c] = s.g0 + g < G ? qp[c * LPR + sl] : make_uint4(0u, 0u, 0u, 0u);
    }
  }

  __device__ static void StartWarp(Warp& w, const uint4 (&raw)[GB][C], float qscale) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
#pragma unroll
      for (int c = 0; c < C; ++c) E::Unpack(raw[g][c], &w.qr[g][c * EPC]);
#pragma unroll
      for (int e = 0; e < QE; ++e) w.qr[g][e] *= qscale;
      w.m[g] = -INFINITY;
      w.l[g] = 0.f;
#pragma unroll
      for (int c = 0; c < AV; ++c) w.acc[g][c] = 0.f;
    }
  }

  // ROPE: the partner of each QK slice (the other half of its head: chunk ci +- C16 / 2), loaded with it.
  __device__ static void LoadPartner(const T* q, const AttnSlice& s, int G, int sl, uint4 (&raw)[GB][C]) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      const uint4* qp = reinterpret_cast<const uint4*>(q + (s.head0 + g) * HD);
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int ci = c * LPR + sl;
        raw[g][c] = s.g0 + g < G ? qp[ci < C16 / 2 ? ci + C16 / 2 : ci - C16 / 2] : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }

  // ROPE: StartWarp with the query rotated first, at position `pos` (the Rope kernel's arithmetic), and
  // rounded to T as the unfused Rope's output is. One angle per element of the slice, shared by the heads.
  __device__ static void StartWarpRope(Warp& w, const uint4 (&raw)[GB][C], const uint4 (&partner)[GB][C], float qscale,
                                       const float2* angles) {
    StartWarp(w, raw, 1.f);
    float cs[QE], sn[QE];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int j0 = ((c * LPR + w.sl) % (C16 / 2)) * EPC;  // the pair index of the chunk's first element
#pragma unroll
      for (int e = 0; e < EPC; ++e) {
        cs[c * EPC + e] = angles[j0 + e].x;
        sn[c * EPC + e] = angles[j0 + e].y;
      }
    }
#pragma unroll
    for (int g = 0; g < GB; ++g) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const bool first = c * LPR + w.sl < C16 / 2;  // first half of the head: a cos - b sin; second: b cos + a sin
        float y[EPC];
        E::Unpack(partner[g][c], y);
#pragma unroll
        for (int e = 0; e < EPC; ++e) {
          const int i = c * EPC + e;
          const float x = w.qr[g][i];
          const float r = first ? x * cs[i] - y[e] * sn[i] : x * cs[i] + y[e] * sn[i];
          w.qr[g][i] = E::ToF(E::FromF(r)) * qscale;
        }
      }
    }
  }

  // ROPE: this step's rows inside the block's slice, [max(start, kv_pos), end), written into the caches
  // (the KV head's columns: rotated k_new, v_new as is) and made visible to the block's cp.async loads.
  // angles: (cos, sin) at the query row's position qpos (computed once per block). patch (T == 1, one
  // new row): the row's K and V are also kept there, for the warp that streams the row to put into its
  // stage (Pipe::Patch) instead of reading it back: no fence before the streaming.
  __device__ static void WriteNewRows(const RopeIn<T, HD, true>& r, const AttnSlice& s, const AttnArgs& a, const float2* angles,
                                      int64_t qpos, T* patch) {
    const int64_t lo = max(s.start, s.kv_pos), hi = s.end;
    if (lo >= hi) return;  // block-uniform
    constexpr int HALF = HD / 2;
    const int64_t kvw = (int64_t)a.KVH * HD, n = (hi - lo) * HALF;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t row = lo + i / HALF;
      const int j = static_cast<int>(i % HALF);
      const int64_t src = ((int64_t)s.b * a.T + (row - s.kv_pos)) * kvw + (int64_t)s.kvh * HD + j;
      const int64_t dst = ((int64_t)s.b * a.max_seq + row) * kvw + (int64_t)s.kvh * HD + j;
      float sn, cs;
      if (row == qpos) {
        cs = angles[j].x;
        sn = angles[j].y;
      } else {
        sincosf(static_cast<float>(row) * r.inv[j], &sn, &cs);
      }
      const float x = E::ToF(r.k_new[src]), y = E::ToF(r.k_new[src + HALF]);
      const T k0 = E::FromF(x * cs - y * sn), k1 = E::FromF(y * cs + x * sn), v0 = r.v_new[src], v1 = r.v_new[src + HALF];
      r.k[dst] = k0;
      r.k[dst + HALF] = k1;
      r.v[dst] = v0;
      r.v[dst + HALF] = v1;
      if (patch != nullptr) {
        patch[j] = k0;
        patch[j + HALF] = k1;
        patch[HD + j] = v0;
        patch[HD + j + HALF] = v1;
      }
    }
    if (patch == nullptr) __threadfence();  // the rows reach L2, where cp.async.cg reads them
    __syncthreads();
  }

  // A warp's cp.async pipeline over its tiles (tile i covers rows row0(i) .. + TR of the slice).
  struct Pipe {
    uint4* wsm;             // this warp's NST stages
    const uint4 *kb, *vb;   // row 0 of the KV head's K and V (16-byte chunks)
    int64_t kvw16, start, end;
    int warp, lane, tiles;  // tiles: how many this warp streams
    int64_t patch_row;      // ROPE, T == 1: the new row (-1: none in this slice), its K then V at `patch`
    const uint4* patch;

    // The new row into tile i's stage, once the tile's copies are complete (SWZ: the tensor-core layout).
    template <bool SWZ>
    __device__ void Patch(int i) const {
      const int64_t row0 = Row0(i);
      if (patch_row < row0 || patch_row >= row0 + TR) return;  // warp-uniform
      const int r = static_cast<int>(patch_row - row0);
      uint4* st = wsm + (i % NST) * Cfg::STAGE16;
      for (int c = lane; c < C16; c += 32) {
        const int dc = SWZ ? (c ^ (r & 7)) : c;
        st[r * C16 + dc] = patch[c];
        st[TR * C16 + r * C16 + dc] = patch[C16 + c];
      }
      __syncwarp();
    }

    __device__ int64_t Row0(int i) const { return start + (int64_t)(warp + i * NW) * TR; }
    __device__ const uint4* Stage(int i) const { return wsm + (i % NST) * Cfg::STAGE16; }
    // Local tile i into stage i % NST; commits a (possibly empty) group either way.
    __device__ void Issue(int i) const {
      if (i < tiles) {
        const int64_t row0 = Row0(i);
        uint4* st = wsm + (i % NST) * Cfg::STAGE16;
#pragma unroll
        for (int j = 0; j < TR * C16 / 32; ++j) {
          const int e = j * 32 + lane, r = e / C16, col = e % C16;
          if (row0 + r < end) {
            CpAsync16(st + r * C16 + col, kb + (row0 + r) * kvw16 + col);
            CpAsync16(st + TR * C16 + r * C16 + col, vb + (row0 + r) * kvw16 + col);
          }
        }
      }
      CpAsyncCommit();
    }
  };

  __device__ static Pipe MakePipe(const T* k, const T* v, const AttnSlice& s, const AttnArgs& a, uint4* smem, int warp, int lane) {
    Pipe p;
    const int64_t nrows = s.end > s.start ? s.end - s.start : 0;
    const int ntiles = static_cast<int>((nrows + TR - 1) / TR);
    p.wsm = smem + warp * NST * Cfg::STAGE16;
    p.kvw16 = (int64_t)a.KVH * C16;  // row stride in chunks
    const int64_t head_off = (int64_t)s.b * a.max_seq * p.kvw16 + (int64_t)s.kvh * C16;
    p.kb = reinterpret_cast<const uint4*>(k) + head_off;
    p.vb = reinterpret_cast<const uint4*>(v) + head_off;
    p.start = s.start;
    p.end = s.end;
    p.warp = warp;
    p.lane = lane;
    p.tiles = ntiles > warp ? (ntiles - warp + NW - 1) / NW : 0;
    p.patch_row = -1;
    p.patch = nullptr;
    return p;
  }

  // Base-2 scores of the tile's rows for every head of the group (-inf past the slice).
  __device__ static void Scores(const Warp& w, const uint4* Ks, int64_t row0, int64_t end, float (&s)[STEPS][GB]) {
#pragma unroll
    for (int stp = 0; stp < STEPS; ++stp) {
      const int r = stp * R + w.sub;
      float kf[QE];
#pragma unroll
      for (int c = 0; c < C; ++c) E::Unpack(Ks[r * C16 + c * LPR + w.sl], &kf[c * EPC]);
#pragma unroll
      for (int g = 0; g < GB; ++g) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < QE; ++e) d = fmaf(w.qr[g][e], kf[e], d);
#pragma unroll
        for (int off = LPR / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
        s[stp][g] = row0 + r < end ? d : -INFINITY;
      }
    }
  }

  // Online softmax over one tile: new running max, rescaled l and acc, the tile's weights p.
  __device__ static void Softmax(Warp& w, const float (&s)[STEPS][GB], float (&p)[STEPS][GB]) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      float mt = s[0][g];
#pragma unroll
      for (int stp = 1; stp < STEPS; ++stp) mt = fmaxf(mt, s[stp][g]);
#pragma unroll
      for (int off = LPR; off < 32; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float mn = fmaxf(w.m[g], mt);
      RaiseMax(mn, w.m[g], w.l[g], w.acc[g]);
      const float mu = mn == -INFINITY ? 0.f : mn;  // avoids (-inf) - (-inf)
      float ls = w.l[g];
#pragma unroll
      for (int stp = 0; stp < STEPS; ++stp) {
        p[stp][g] = exp2f(s[stp][g] - mu);
        ls += p[stp][g];
      }
      w.l[g] = ls;
    }
  }

  // acc += p V over the tile's rows; each row's weights come from the QK lane that scored it.
  __device__ static void Values(Warp& w, const uint4* Vs, const float (&p)[STEPS][GB], int64_t row0, int64_t end) {
#pragma unroll
    for (int j = 0; j < TR / RV; ++j) {
      const int stp = (j * RV) / R;               // compile-time after unrolling
      const int src = ((j * RV) % R + w.rv) * LPR;  // a QK lane that holds row r's score
      const int r = j * RV + w.rv;
      float pr[GB];
#pragma unroll
      for (int g = 0; g < GB; ++g) pr[g] = __shfl_sync(0xffffffffu, p[stp][g], src);
      if (row0 + r < end) {
#pragma unroll
        for (int c = 0; c < CV; ++c) {
          float vf[EPC];
          E::Unpack(Vs[r * C16 + c * PL + w.pl], vf);
#pragma unroll
          for (int g = 0; g < GB; ++g)
#pragma unroll
            for (int e = 0; e < EPC; ++e) w.acc[g][c * EPC + e] = fmaf(pr[g], vf[e], w.acc[g][c * EPC + e]);
        }
      }
    }
  }

  // The warp's tiles, NST - 1 loads ahead of the one it computes; then its totals: l over the QK row
  // groups, acc over the PV row groups (m is warp-uniform).
  // start(): the warp's query and sums (StartWarp or StartWarpRope), once the first loads are issued.
  template <class Start>
  __device__ static void Stream(Warp& w, const Pipe& pipe, Start start) {
#pragma unroll
    for (int i = 0; i < NST - 1; ++i) pipe.Issue(i);
    start();
    for (int i = 0; i < pipe.tiles; ++i) {
      pipe.Issue(i + NST - 1);  // into the stage consumed in iteration i - 1
      CpAsyncWait<NST - 1>();
      __syncwarp();
      pipe.template Patch<false>(i);
      const uint4* Ks = pipe.Stage(i);
      const int64_t row0 = pipe.Row0(i);
      float s[STEPS][GB], p[STEPS][GB];
      Scores(w, Ks, row0, pipe.end, s);
      Softmax(w, s, p);
      Values(w, Ks + TR * C16, p, row0, pipe.end);
      __syncwarp();  // every lane is done with this stage before it is refilled
    }
    CpAsyncWait<0>();
#pragma unroll
    for (int g = 0; g < GB; ++g) {
#pragma unroll
      for (int off = LPR; off < 32; off <<= 1) w.l[g] += __shfl_xor_sync(0xffffffffu, w.l[g], off);
#pragma unroll
      for (int off = PL; off < 32; off <<= 1)
#pragma unroll
        for (int c = 0; c < AV; ++c) w.acc[g][c] += __shfl_xor_sync(0xffffffffu, w.acc[g][c], off);
    }
  }

  // The warp's partial (acc over head_dim, m, l per head) into the block's merge area.
  __device__ static void StorePartial(const Warp& w, float* sm_acc, float* sm_ml) {
    if (w.rv == 0) {
#pragma unroll
      for (int g = 0; g < GB; ++g) {
#pragma unroll
        for (int c = 0; c < CV; ++c)
#pragma unroll
          for (int e = 0; e < EPC; ++e) sm_acc[(w.warp * GB + g) * HD + (c * PL + w.pl) * EPC + e] = w.acc[g][c * EPC + e];
        if (w.lane == 0) {
          sm_ml[(w.warp * GB + g) * 2] = w.m[g];
          sm_ml[(w.warp * GB + g) * 2 + 1] = w.l[g];
        }
      }
    }
  }
};

// ROPE: the block's rotation angles and its new rows (after Rows): (cos, sin) at the query row's
// position into `angles`, computed once per block (sincosf is some 40 instructions); then the new rows
// inside the slice into the caches (WriteNewRows), for T == 1 also into `patch`, which the pipeline puts
// into the stage of the row (Pipe::Patch).
template <class T, int HD, int GB, class Cfg>
__device__ __forceinline__ void RopeBlock(const RopeIn<T, HD, true>& rope, const AttnSlice& s, const AttnArgs& a, float2* angles,
                                          T* patch, typename AttnBlock<T, HD, GB, Cfg>::Pipe& pipe) {
  const int64_t qpos = s.kv_pos + s.bt % a.T;
  for (int j = threadIdx.x; j < HD / 2; j += blockDim.x) {
    float sn, cs;
    sincosf(static_cast<float>(qpos) * rope.inv[j], &sn, &cs);
    angles[j] = make_float2(cs, sn);
  }
  __syncthreads();
  const bool one_row = a.T == 1 && s.valid && s.kv_pos >= s.start && s.kv_pos < s.end;
  AttnBlock<T, HD, GB, Cfg>::WriteNewRows(rope, s, a, angles, qpos, one_row ? patch : nullptr);
  if (one_row) {
    pipe.patch_row = s.kv_pos;
    pipe.patch = reinterpret_cast<const uint4*>(patch);
  }
}

// A register form's warp work (W: AttnRegs or AttnRegMma) once its query is loaded (raw) and the
// block's slice is known, then its partial in shared memory (no stages: the merge area is free).
template <class W, class T>
__device__ __forceinline__ void RegWarp(const typename W::Raw& raw, const T* k, const T* v, const AttnArgs& a, const AttnSlice& s,
                                        int warp, int lane, float* sm_acc, float* sm_ml) {
  typename W::Warp w;
  w.warp = warp;
  w.lane = lane;
  W::Stream(w, k, v, s, a, [&] { W::StartWarp(w, raw, a.qscale); });
  W::StorePartial(w, sm_acc, sm_ml);
}

// The warps' streaming (scalar, tensor-core or register form), then their partials in shared memory.
template <class T, int HD, int GB, class Cfg, bool ROPE>
__device__ __forceinline__ void AttnWarps(const T* __restrict__ q, const T* k, const T* v, const AttnArgs& a, AttnSlice& s,
                                          const RopeIn<T, HD, ROPE>& rope, uint4* smem, float* sm_acc, float* sm_ml) {
  using A = AttnBlock<T, HD, GB, Cfg>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ float2 angles[ROPE ? HD / 2 : 1];
  __shared__ __align__(16) T patch[ROPE ? 2 * HD : 8];
  if constexpr (Cfg::REG) {
    static_assert(!ROPE, "RopeCachedAttention streams through stages (its new rows patched in)");
    using W = std::conditional_t<Cfg::MMA, AttnRegMma<T, HD, GB, Cfg>, AttnRegs<T, HD, GB, Cfg>>;
    typename W::Raw raw;
    W::LoadQuery(q, s, a.G, lane, raw);  // in flight together with the position
    A::Rows(a, s);
    RegWarp<W>(raw, k, v, a, s, warp, lane, sm_acc, sm_ml);
  } else if constexpr (Cfg::MMA) {
    using M = AttnMma<T, HD, GB, Cfg>;
    typename M::Warp w;
    w.warp = warp;
    w.lane = lane;
    w.g = lane / 4;
    w.t = lane % 4;
    uint32_t raw[M::KS][2];
    M::LoadQuery(q, s, a.G, w.g, w.t, raw);  // in flight together with the position
    if constexpr (Cfg::PAIR) {  // the register-fed form for a long slice (the query in its order too)
      using R = AttnRegMma<T, HD, GB, typename Cfg::RegCfg>;
      typename R::Raw rraw;
      R::LoadQuery(q, s, a.G, lane, rraw);
      A::Rows(a, s);
      if (s.end - s.start >= Cfg::MIN_ROWS) {  // block-uniform
        RegWarp<R>(rraw, k, v, a, s, warp, lane, sm_acc, sm_ml);
        return;
      }
    } else {
      A::Rows(a, s);
    }
    auto pipe = A::MakePipe(k, v, s, a, smem, warp, lane);
    if constexpr (ROPE) {
      RopeBlock<T, HD, GB, Cfg>(rope, s, a, angles, patch, pipe);
      M::Stream(w, pipe, a.qscale, [&] { M::StartWarpRope(w, raw, angles); });
    } else {
      M::Stream(w, pipe, a.qscale, [&] { M::StartWarp(w, raw); });
    }
    __syncthreads();
    M::StorePartial(w, sm_acc, sm_ml);
  } else {
    typename A::Warp w;
    w.warp = warp;
    w.lane = lane;
    w.sub = lane / Cfg::LPR;
    w.sl = lane % Cfg::LPR;
    w.rv = lane / Cfg::PL;
    w.pl = lane % Cfg::PL;
    uint4 raw[GB][Cfg::C];
    A::LoadQuery(q, s, a.G, w.sl, raw);  // in flight together with the position
    if constexpr (ROPE) {
      uint4 partner[GB][Cfg::C];
      A::LoadPartner(q, s, a.G, w.sl, partner);
      A::Rows(a, s);
      auto pipe = A::MakePipe(k, v, s, a, smem, warp, lane);
      RopeBlock<T, HD, GB, Cfg>(rope, s, a, angles, patch, pipe);
      A::Stream(w, pipe, [&] { A::StartWarpRope(w, raw, partner, a.qscale, angles); });
    } else {
      A::Rows(a, s);
      A::Stream(w, A::MakePipe(k, v, s, a, smem, warp, lane), [&] { A::StartWarp(w, raw, a.qscale); });
    }
    __syncthreads();
    A::StorePartial(w, sm_acc, sm_ml);
  }
}

// k and v are read through cp.async only (no __restrict__: the ROPE form writes its new rows into them).
template <class T, int HD, int GB, class Cfg, bool ROPE = false>
__global__ void __launch_bounds__(Cfg::NW * 32)
    AttnSplit(const T* __restrict__ q, const T* k, const T* v, T* __restrict__ out, AttnArgs a, RopeIn<T, HD, ROPE> rope) {
  using A = AttnBlock<T, HD, GB, Cfg>;
  using Merge = AttnMerge<T, HD, GB, Cfg::NW>;
  extern __shared__ uint4 smem[];
  AttnSlice s = A::Heads(a);
  GridDependencyWait();  // q, the caches and the positions may come from the previous kernel
  GridDependentsRelease();
  float* sm_acc = reinterpret_cast<float*>(smem);      // [NW][GB][HD]
  float* sm_ml = sm_acc + Cfg::NW * GB * HD;            // [NW][GB][2]
  AttnWarps<T, HD, GB, Cfg, ROPE>(q, k, v, a, s, rope, smem, sm_acc, sm_ml);
  float* part = sm_ml + Cfg::NW * GB * 2;  // this block's partial when the splits form a cluster
  static_assert((Cfg::NW * GB * HD + Cfg::NW * GB * 2 + GB * HD + GB * 2) * 4 <= Cfg::SMEM, "merge area");
  Merge::FoldWarps(s, a, out, sm_acc, sm_ml, part);
  if (a.cluster && !a.skip_merge) {
    Merge::MergeCluster(s, a, out, part);
    return;
  }
  if (a.splits == 1 || a.skip_merge) return;  // skip_merge: attn_check times the split pass alone
  if (Merge::ArriveLast(s, a)) Merge::MergeSplits(s, a, out);
}

}  // namespace
