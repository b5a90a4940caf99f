// CPU kernels of the com.meganeura ops (CPUExecutionProvider).
// Work is split over ORT's intra-op thread pool (KernelContext_ParallelFor);
// inner loops are contiguous and written so that -O3 vectorises them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu_elements.h"
#include "cpu_math.h"
#include "cpu_parallel.h"
#include "op_common.h"
#include "rope_attention.h"

namespace mn {
namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;  // index inputs: int64, int32 or uint32
constexpr auto U32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32;

// ------------------------------------------------------------------ Rope
// cos / sin of pos * inv_freq[j] for positions [0, positions), shared by every Rope kernel with the same
// (theta, head_dim) in the process: a model's Rope nodes all use one table, computed once and grown on
// demand (com.microsoft.RotaryEmbedding takes such tables as inputs). The values are bit-identical to
// computing them on the fly. Tables stay below kMaxEntries floats each; farther positions are computed.
class RopeTable {
 public:
  static constexpr int64_t kMaxEntries = int64_t(1) << 21;
  int64_t positions = 0, half = 0;
  std::vector<float> cs, sn;

  static std::shared_ptr<const RopeTable> Get(float theta, int64_t head_dim, const float* inv, int64_t end) {
    const int64_t half = head_dim / 2;
    if (end <= 0 || half <= 0 || end > kMaxEntries / half) return nullptr;
    static std::mutex mu;
    static std::map<std::pair<float, int64_t>, std::shared_ptr<const RopeTable>> tables;
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = tables[{theta, head_dim}];
    if (slot && slot->positions >= end) return slot;
    int64_t n = 256;
    while (n < end) n *= 2;
    n = std::min(n, kMaxEntries / half);
    auto t = std::make_shared<RopeTable>();
    t->positions = n;
    t->half = half;
    t->cs.resize(n * half);
    t->sn.resize(n * half);
    for (int64_t pos = 0; pos < n; ++pos)
      for (int64_t j = 0; j < half; ++j) {
        const float ang = static_cast<float>(pos) * inv[j];
        t->cs[pos * half + j] = std::cos(ang);
        t->sn[pos * half + j] = std::sin(ang);
      }
    slot = t;
    return slot;
  }
};

class RopeCpu : public Kernel {
 public:
  explicit RopeCpu(const RopeAttrs& a) : a_(a), inv_freq_(a.head_dim / 2) { RopeInvFreq(a.theta, a.head_dim, inv_freq_.data()); }
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    RopeAttrs a;
    MN_RETURN_IF(ReadRopeAttrs(info, &a));
    *out = new RopeCpu(a);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor x, off;
    MN_RETURN_IF(GetInput(ctx, 0, &x));
    MN_RETURN_IF(GetInput(ctx, 1, &off));
    RopeProblem p;
    MN_RETURN_IF(CheckRope(a_, x, off, &p));
    void* y = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, x.shape, &y));
    return DispatchFloat(p.type, [&](auto tag) {
      using T = decltype(tag);
      return Run(ctx, p, static_cast<const T*>(x.data), static_cast<T*>(y));
    });
  }

 private:
  template <class T>
  OrtStatus* Run(OrtKernelContext* ctx, const RopeProblem& p, const T* xs, T* y) {
    const int64_t half = p.head_dim / 2, heads = p.D / p.head_dim, rows_total = p.B * p.S;
    const float* inv = inv_freq_.data();
    int64_t last = 0;  // one past the largest position of any row
    for (int64_t v : p.pos0) last = std::max(last, v + p.S);
    const std::shared_ptr<const RopeTable> table =
        last <= RopeTable::kMaxEntries ? RopeTable::Get(a_.theta, p.head_dim, inv, last) : nullptr;
    Chunks rows(rows_total, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.D)), 1024);
    return ParallelFor(ctx, rows.count, [&](size_t c) {
      std::vector<float> cs_row(table ? 0 : half), sn_row(table ? 0 : half);
      // float16 / bfloat16: each row converted to float32, rotated, and converted back.
      std::vector<float> x_row(std::is_same<T, float>::value ? 0 : p.D), y_row(x_row.size());
      for (int64_t r = rows.begin(c); r < rows.end(c); ++r) {
        const int64_t b = r / p.S, pos = p.pos0[p.pos0.size() == 1 ? 0 : b] + r % p.S;
        const float* cs = nullptr;
        const float* sn = nullptr;
        if (table) {
          cs = table->cs.data() + pos * half;
          sn = table->sn.data() + pos * half;
        } else {
          const float fpos = static_cast<float>(pos);
          for (int64_t j = 0; j < half; ++j) {
            const float ang = fpos * inv[j];
            cs_row[j] = std::cos(ang);
            sn_row[j] = std::sin(ang);
          }
          cs = cs_row.data();
          sn = sn_row.data();
        }
        float* out = OutRow(y + r * p.D, y_row.data());
        RotateHeads(FloatRow(xs + r * p.D, p.D, x_row.data()), out, cs, sn, heads, p.head_dim, a_.inverse != 0);
        StoreRow(out, y + r * p.D, p.D);
      }
    });
  }

  RopeAttrs a_;
  std::vector<float> inv_freq_;
};

// ------------------------------------------------------------------ CacheWrite
// A pure row copy: any element type, by bytes.
class CacheWriteCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    const int64_t one = 1;
    int64_t check = 1;  // accepted and validated; the CPU kernel checks positions either way
    MN_RETURN_IF(AttrInt(info, "CacheWrite", "check_positions", &check, &one));
    MN_RETURN_IF(CheckPositionsFlag("CacheWrite", check));
    *out = new CacheWriteCpu();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor nw, cache, pos;
    MN_RETURN_IF(GetInput(ctx, 0, &nw));
    MN_RETURN_IF(GetInput(ctx, 1, &cache));
    MN_RETURN_IF(GetInput(ctx, 2, &pos));
    CacheWriteProblem p;
    MN_RETURN_IF(CheckCacheWrite(nw, cache, pos, &p));
    void* out_v = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, cache.shape, &out_v));
    const size_t es = ElementSize(p.type);
    char* out = static_cast<char*>(out_v);
    const char* src = static_cast<const char*>(cache.data);
    if (out != src) MN_RETURN_IF(CopyCache(ctx, out, src, p.B * p.max_seq * p.dim * static_cast<int64_t>(es)));
    const size_t row = es * static_cast<size_t>(p.dim);
    const char* nws = static_cast<const char*>(nw.data);
    for (int64_t b = 0; b < p.B; ++b)
      if (p.T * p.dim > 0)
        std::memcpy(out + (b * p.max_seq + p.kv_pos[b]) * row, nws + b * p.T * row, row * static_cast<size_t>(p.T));
    return nullptr;
  }
};

// ------------------------------------------------------------------ CachedAttention
// Dot product with 16 independent partial sums (4 SSE vectors): no single dependent add chain.
inline float Dot(const float* __restrict__ a, const float* __restrict__ b, int64_t n) {
  float part[16] = {};
  int64_t d = 0;
  for (; d + 16 <= n; d += 16)
    for (int i = 0; i < 16; ++i) part[i] += a[d + i] * b[d + i];
  float s = 0.f;
  for (; d < n; ++d) s += a[d] * b[d];
  for (int i = 0; i < 8; ++i) part[i] += part[i + 8];
  for (int i = 0; i < 4; ++i) part[i] += part[i + 4];
  return s + (part[0] + part[1]) + (part[2] + part[3]);
}

// Online-softmax attention of the H query rows q[h * hd] of one token over cache rows [r0, r1),
// all their KV heads (kc/vc point at the first) at once: m[h] (running max), l[h] (sum of exp), acc[h * hd] (unnormalised output).
// Cache rows hold every KV head side by side (kvw floats), so walking whole rows streams K and V
// contiguously (the hardware prefetcher follows; per-head walks stride 4 KiB and stall on
// memory latency). Per tile of rows: the scores of all heads (each K segment read once for its
// group of G query heads), one rescale per tile, then P V (each V segment read once per group).
constexpr int64_t kAttnTile = 64, kAttnMinChunk = 4 * kAttnTile;

// Asks for rows [r0, r1) of a cache (leading `width` values of rows `stride` apart) in the core's L2:
// a decode step's cache rows were evicted by the weights streamed since the last step, and a layer
// attends to a few hundred KB of them, too little for the hardware prefetcher to ramp up: without
// these, the loads of every tile wait on DRAM one stream at a time.
template <class T>
inline void PrefetchRows(const T* base, int64_t stride, int64_t r0, int64_t r1, int64_t width) {
  const int64_t bytes = width * static_cast<int64_t>(sizeof(T));
  for (int64_t r = r0; r < r1; ++r) {
    const char* row = reinterpret_cast<const char*>(base + r * stride);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
  }
}

// One tile's online-softmax step for each of the H heads: the scores sc[h * kAttnTile + j] (j < n) become
// exp(s - m_new), l[h] gains their sum, and acc[h] (and l[h]) are rescaled when the running max moved.
inline __attribute__((always_inline)) void TileSoftmax(float* __restrict__ sc, int64_t n, int64_t H, int64_t hd, float* __restrict__ m,
                                                       float* __restrict__ l, float* __restrict__ acc) {
  for (int64_t h = 0; h < H; ++h) {
    float* s = sc + h * kAttnTile;
    float mt = m[h];
    for (int64_t j = 0; j < n; ++j) mt = std::max(mt, s[j]);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      s[j] = ExpNeg(s[j] - mt);
      sum += s[j];
    }
    if (m[h] != mt) {  // the max moved: rescale what was accumulated so far
      const float corr = m[h] == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(m[h] - mt);
      l[h] *= corr;
      float* a = acc + h * hd;
      for (int64_t d = 0; d < hd; ++d) a[d] *= corr;
      m[h] = mt;
    }
    l[h] += sum;
  }
}

inline void StartRows(int64_t H, int64_t hd, float* m, float* l, float* acc) {
  std::fill(m, m + H, -std::numeric_limits<float>::infinity());
  std::fill(l, l + H, 0.f);
  std::fill(acc, acc + H * hd, 0.f);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MN_ATTEND_AVX2 1
// AttendRows of float32 cache rows on a CPU with AVX2 + FMA. The portable loops below spend most of
// a decode step's attention in horizontal sums and in loading and storing acc once per cache row and
// head; here a dot product runs on four independent FMA chains of 8 lanes, and P V keeps 32 of a
// head's output values in registers for the whole tile (SmolLM2-135M's decode on one core: about half
// the attention's time).
__attribute__((target("avx2,fma"))) inline float DotAvx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t d = 0;
  for (; d + 32 <= n; d += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), _mm256_loadu_ps(b + d + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 16), _mm256_loadu_ps(b + d + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 24), _mm256_loadu_ps(b + d + 24), s3);
  }
  for (; d + 8 <= n; d += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float t = _mm_cvtss_f32(h);
  for (; d < n; ++d) t += a[d] * b[d];
  return t;
}

// acc[d] += sum_j p[j] * v(j)[d] for the n rows v(j) = v + j * kvw, d < hd, rows in order.
__attribute__((target("avx2,fma"))) inline void WeightedRowsAvx2(const float* p, const float* v, int64_t n, int64_t kvw, int64_t hd,
                                                                 float* acc) {
  int64_t d = 0;
  for (; d + 32 <= hd; d += 32) {
    __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8), a2 = _mm256_loadu_ps(acc + d + 16),
           a3 = _mm256_loadu_ps(acc + d + 24);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 w = _mm256_broadcast_ss(p + j);
      const float* vr = v + j * kvw + d;
      a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vr), a0);
      a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vr + 8), a1);
      a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vr + 16), a2);
      a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vr + 24), a3);
    }
    _mm256_storeu_ps(acc + d, a0);
    _mm256_storeu_ps(acc + d + 8, a1);
    _mm256_storeu_ps(acc + d + 16, a2);
    _mm256_storeu_ps(acc + d + 24, a3);
  }
  for (; d < hd; ++d)
    for (int64_t j = 0; j < n; ++j) acc[d] += p[j] * v[j * kvw + d];
}

__attribute__((target("avx2,fma"))) void AttendRowsAvx2(const float* __restrict__ q, const float* __restrict__ kc,
                                                       const float* __restrict__ vc, int64_t H, int64_t G, int64_t hd, int64_t kvw,
                                                       int64_t r0, int64_t r1, float scale, float* __restrict__ sc,
                                                       float* __restrict__ m, float* __restrict__ l, float* __restrict__ acc) {
  const int64_t width = H / G * hd;
  StartRows(H, hd, m, l, acc);
  PrefetchRows(kc, kvw, r0, std::min(r1, r0 + kAttnTile), width);
  for (int64_t r = r0; r < r1; r += kAttnTile) {
    const int64_t n = std::min(kAttnTile, r1 - r);
    PrefetchRows(vc, kvw, r, r + n, width);
    PrefetchRows(kc, kvw, r + n, std::min(r1, r + n + kAttnTile), width);
    for (int64_t j = 0; j < n; ++j) {
      const float* kr = kc + (r + j) * kvw;
      for (int64_t h = 0; h < H; ++h) sc[h * kAttnTile + j] = DotAvx2(q + h * hd, kr + (h / G) * hd, hd) * scale;
    }
    TileSoftmax(sc, n, H, hd, m, l, acc);
    for (int64_t h = 0; h < H; ++h) WeightedRowsAvx2(sc + h * kAttnTile, vc + r * kvw + (h / G) * hd, n, kvw, hd, acc + h * hd);
  }
}
#endif

template <class T>
void AttendRows(const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, int64_t H, int64_t G,
                int64_t hd, int64_t kvw, int64_t r0, int64_t r1, float scale, float* __restrict__ sc, float* __restrict__ m,
                float* __restrict__ l, float* __restrict__ acc, float* __restrict__ rowbuf) {
#ifdef MN_ATTEND_AVX2
  if constexpr (std::is_same<T, float>::value) {
    if (HasAvx2Fma()) return AttendRowsAvx2(q, kc, vc, H, G, hd, kvw, r0, r1, scale, sc, m, l, acc);
  }
#endif
  const int64_t width = H / G * hd;  // the KV heads of these query heads (a row's leading `width` values)
  StartRows(H, hd, m, l, acc);
  PrefetchRows(kc, kvw, r0, std::min(r1, r0 + kAttnTile), width);
  for (int64_t r = r0; r < r1; r += kAttnTile) {
    const int64_t n = std::min(kAttnTile, r1 - r);
    PrefetchRows(vc, kvw, r, r + n, width);  // this tile's V rows, read after its scores
    PrefetchRows(kc, kvw, r + n, std::min(r1, r + n + kAttnTile), width);  // the next tile's K rows
    for (int64_t j = 0; j < n; ++j) {
      const float* kr = FloatRow(kc + (r + j) * kvw, width, rowbuf);
      for (int64_t h = 0; h < H; ++h) sc[h * kAttnTile + j] = Dot(q + h * hd, kr + (h / G) * hd, hd) * scale;
    }
    TileSoftmax(sc, n, H, hd, m, l, acc);
    for (int64_t j = 0; j < n; ++j) {
      const float* __restrict__ vr = FloatRow(vc + (r + j) * kvw, width, rowbuf);
      for (int64_t h = 0; h < H; ++h) {
        const float w = sc[h * kAttnTile + j];
        const float* __restrict__ vh = vr + (h / G) * hd;
        float* __restrict__ a = acc + h * hd;
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) a[d] += w * vh[d];
      }
    }
  }
}

class CachedAttentionCpu : public Kernel {
 public:
  explicit CachedAttentionCpu(const AttnAttrs& a) : a_(a) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    AttnAttrs a;
    MN_RETURN_IF(ReadAttnAttrs(info, &a));
    *out = new CachedAttentionCpu(a);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor q, k, v, pos;
    MN_RETURN_IF(GetInput(ctx, 0, &q));
    MN_RETURN_IF(GetInput(ctx, 1, &k));
    MN_RETURN_IF(GetInput(ctx, 2, &v));
    MN_RETURN_IF(GetInput(ctx, 3, &pos));
    AttnProblem p;
    MN_RETURN_IF(CheckCachedAttention(a_, q, k, v, pos, &p));
    void* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, q.shape, &out));
    if (p.T == 0 || p.B == 0) return nullptr;  // no query rows: an empty output (and no division by T below)
    return DispatchFloat(p.type, [&](auto tag) {
      using T = decltype(tag);
      return Run(ctx, p, static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
                 static_cast<T*>(out));
    });
  }

 private:
  template <class T>
  static OrtStatus* Run(const Pool& ctx, const AttnProblem& p, const T* qs, const T* ks, const T* vs, T* out) {
    const int64_t hd = p.hd, H = p.H, G = p.H / p.KVH, kvw = p.KVH * hd, qw = p.H * hd, T_ = p.T, B = p.B;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // Work item = (sequence b, query row t, chunk of cache rows), all heads. Decode (T = 1) splits the
    // cache into chunks (flash-decoding style) so that every thread gets work; the chunks' partial
    // softmax states are merged afterwards. Long prefills (B * T >= 64) use one item per row. A chunk
    // holds at least kAttnMinChunk rows: a shorter cache is one item on the calling thread, since
    // waking a pool thread for it (and the merge's second parallel region) costs more than the few
    // microseconds of work (SmolLM2-135M at 190 cached rows: 68 us per layer on one thread, 123 us
    // split in 64-row chunks over two).
    int64_t maxL = 0;
    for (int64_t b = 0; b < B; ++b) maxL = std::max(maxL, p.kv_pos[b] + T_);
    int64_t nch = 1, chunk = maxL;
    if (B * T_ < 64) {
      nch = (64 + B * T_ - 1) / (B * T_);
      chunk = std::max<int64_t>(kAttnMinChunk, (maxL + nch - 1) / nch);
      chunk = (chunk + kAttnTile - 1) / kAttnTile * kAttnTile;
      nch = (maxL + chunk - 1) / chunk;
    }
    // On a DecodeLayer's team (its threads are awake) an item covers one KV head's group of query heads;
    // each head's arithmetic is the same either way, so the results are too.
    const int64_t rows = B * T_, groups = ctx.team != nullptr ? p.KVH : 1, Hg = H / groups, items = rows * nch * groups;
    const int64_t pstride = Hg * (hd + 2);  // state of one item: acc[Hg * hd], m[Hg], l[Hg]
    std::vector<float> part(nch > 1 ? static_cast<size_t>(items * pstride) : 0);
    MN_RETURN_IF(ParallelFor(ctx, static_cast<size_t>(items), [&](size_t item) {
      const int64_t g = static_cast<int64_t>(item) % groups, bc = static_cast<int64_t>(item) / groups;
      const int64_t bt = bc / nch, c = bc % nch, b = bt / T_, t = bt % T_;
      const int64_t L = p.kv_pos[b] + t + 1;  // attends to its sequence's cache rows [0, kv_pos[b] + t]
      const int64_t r0 = c * chunk, r1 = std::min(L, r0 + chunk), qg = g * Hg * hd;  // qg: the group's first q value
      std::vector<float> sc(static_cast<size_t>(Hg * kAttnTile)), own(nch > 1 ? 0 : static_cast<size_t>(pstride));
      // float16 / bfloat16: Q, each cache row and the output row go through float32 buffers.
      const bool half_type = !std::is_same<T, float>::value;
      std::vector<float> qbuf(half_type ? Hg * hd : 0), rowbuf(half_type ? kvw : 0), outbuf(half_type && nch == 1 ? Hg * hd : 0);
      float* acc = nch > 1 ? part.data() + item * pstride : own.data();
      float *m = acc + Hg * hd, *l = m + Hg;
      if (r0 >= r1) {  // chunk past this row's causal limit (T > 1, or a shorter sequence of the batch)
        std::fill(acc, acc + Hg * hd, 0.f);
        std::fill(m, m + Hg, -std::numeric_limits<float>::infinity());
        std::fill(l, l + Hg, 0.f);
        return;
      }
      const float* qf = FloatRow(qs + bt * qw + qg, Hg * hd, qbuf.data());
      const int64_t cache_off = b * p.max_seq * kvw + qg / G;  // the group's first KV head in the rows
      AttendRows(qf, ks + cache_off, vs + cache_off, Hg, G, hd, kvw, r0, r1, scale, sc.data(), m, l, acc, rowbuf.data());
      if (nch == 1) {
        float* o = OutRow(out + bt * qw + qg, outbuf.data());
        for (int64_t h = 0; h < Hg; ++h) {
          const float inv = 1.0f / l[h];
          for (int64_t d = 0; d < hd; ++d) o[h * hd + d] = acc[h * hd + d] * inv;
        }
        StoreRow(o, out + bt * qw + qg, Hg * hd);
      }
    }));
    if (nch == 1) return nullptr;
    return ParallelFor(ctx, static_cast<size_t>(rows * H), [&](size_t th) {
      const int64_t bt = static_cast<int64_t>(th) / H, h = static_cast<int64_t>(th) % H, hl = h % Hg;
      const float* base = part.data() + (bt * nch * groups + h / Hg) * pstride;  // chunk c's state: + c * groups * pstride
      const int64_t cstride = groups * pstride;
      float M = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < nch; ++c) M = std::max(M, base[c * cstride + Hg * hd + hl]);
      std::vector<float> o(static_cast<size_t>(hd), 0.f);
      float lt = 0.f;
      for (int64_t c = 0; c < nch; ++c) {
        const float* pc = base + c * cstride;
        const float mc = pc[Hg * hd + hl];
        if (mc == -std::numeric_limits<float>::infinity()) continue;
        const float w = std::exp(mc - M);
        lt += pc[Hg * hd + Hg + hl] * w;
        const float* a = pc + hl * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] += a[d] * w;
      }
      const float inv = 1.0f / lt;
      for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
      FromFloatRow(o.data(), out + bt * qw + h * hd, hd);
    });
  }

  AttnAttrs a_;
  friend OrtStatus* mn::CachedAttentionCpuRun(const Pool&, const AttnProblem&, const void*, const void*, const void*, void*);
};

// ------------------------------------------------------------------ ScatterAdd
class ScatterAddCpu : public Kernel {
 public:
  explicit ScatterAddCpu(int64_t num_rows) : num_rows_(num_rows) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    int64_t n = 0;
    MN_RETURN_IF(AttrInt(info, "ScatterAdd", "num_rows", &n, nullptr));
    if (n < 1) return MN_INVALID("ScatterAdd: attribute num_rows must be >= 1, got %lld", (long long)n);
    const int64_t one = 1;
    int64_t check = 1;  // accepted and validated; the CPU kernel checks every index either way
    MN_RETURN_IF(AttrInt(info, "ScatterAdd", "check_positions", &check, &one));
    MN_RETURN_IF(CheckPositionsFlag("ScatterAdd", check));
    *out = new ScatterAddCpu(n);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor idx, src;
    MN_RETURN_IF(GetInput(ctx, 0, &idx));
    MN_RETURN_IF(GetInput(ctx, 1, &src));
    ScatterAddProblem p;
    MN_RETURN_IF(CheckScatterAdd(num_rows_, idx, src, &p));  // validates every index first
    float* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, {p.num_rows, p.D}, &out));
    const float* s = src.f32();
    // Threads own disjoint column ranges: no races, and the sum order (ascending i) is
    // deterministic whatever the thread count.
    Chunks cols(p.D, std::max<int64_t>(16, (1 << 14) / std::max<int64_t>(1, p.N)), 64);
    std::vector<int64_t> rows(static_cast<size_t>(p.N));
    for (int64_t i = 0; i < p.N; ++i) rows[i] = IndexAt(idx, i);
    return ParallelFor(ctx, cols.count, [&](size_t c) {
      const int64_t c0 = cols.begin(c), c1 = cols.end(c);
      for (int64_t r = 0; r < p.num_rows; ++r) std::fill(out + r * p.D + c0, out + r * p.D + c1, 0.f);
      for (int64_t i = 0; i < p.N; ++i) {
        float* o = out + rows[i] * p.D;
        const float* si = s + i * p.D;
        for (int64_t d = c0; d < c1; ++d) o[d] += si[d];
      }
    });
  }

 private:
  int64_t num_rows_;
};

// ------------------------------------------------------------------ GreedyStep
// The index of the row's largest value, the first on ties, a NaN counting as larger than any number
// (numpy.argmax, and the function body's ArgMax on these inputs).
template <class T>
int64_t RowArgmax(const T* row, int64_t V) {
  int64_t best = 0;
  float top = ToFloat(row[0]);
  for (int64_t i = 0; i < V; ++i) {
    const float v = ToFloat(row[i]);
    if (std::isnan(v)) return i;
    if (v > top) top = v, best = i;
  }
  return best;
}

class GreedyStepCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new GreedyStepCpu;
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    GreedyStepCall c;
    MN_RETURN_IF(PrepareGreedyStep(ctx, &c));
    const GreedyStepProblem& p = c.p;
    const uint32_t* kv = static_cast<const uint32_t*>(c.kv_pos.data);
    if (p.B * p.n > 0 && c.next_log != c.token_log.data)  // an empty tensor's data may be null: memcpy must not see it
      std::memcpy(c.next_log, c.token_log.data, sizeof(uint32_t) * static_cast<size_t>(p.B * p.n));
    return DispatchFloat(c.logits.type, [&](auto tag) -> OrtStatus* {
      using T = decltype(tag);
      for (int64_t b = 0; b < p.B; ++b) {
        const uint32_t chosen = static_cast<uint32_t>(RowArgmax(static_cast<const T*>(c.logits.data) + b * p.V, p.V));
        const uint32_t at = kv[b] + 1u;  // modulo 2^32; read before next_pos (which may be kv_pos's buffer) is written
        c.token[b] = chosen;
        c.next_pos[b] = at;
        c.next_log[b * p.n + std::min<int64_t>(at, p.n - 1)] = chosen;
      }
      return nullptr;
    });
  }
};

}  // namespace

OrtStatus* CachedAttentionCpuRun(const Pool& ctx, const AttnProblem& p, const void* q, const void* k, const void* v,
                                 void* out) {
  if (p.T == 0 || p.B == 0) return nullptr;
  return DispatchFloat(p.type, [&](auto tag) {
    using T = decltype(tag);
    return CachedAttentionCpu::Run(ctx, p, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                                   static_cast<T*>(out));
  });
}

void AddCpuOps(std::vector<OpDef*>* ops) {
  const char* ep = "CPUExecutionProvider";
  // One registration per element type: ORT picks the kernel by the inputs' type (float16/bfloat16
  // are the op table's half_types of these ops; all three run the same kernel classes).
  for (const auto T : {F32, F16, BF16}) {
    ops->push_back(new OpDef("Rope", ep, {T, ANY}, {T}, {false, true}, {false, false}, RopeCpu::Create, 0));
    ops->push_back(new OpDef("CacheWrite", ep, {T, T, ANY}, {T}, {false, false, false}, {false, false, false},
                             CacheWriteCpu::Create, 1, /*cache_inplace=*/true));
    ops->push_back(new OpDef("CachedAttention", ep, {T, T, T, ANY}, {T}, {false, false, false, false},
                             {false, false, false, false}, CachedAttentionCpu::Create, 0));
  }
  ops->push_back(new OpDef("ScatterAdd", ep, {ANY, F32}, {F32}, {false, false}, {false, false},
                           ScatterAddCpu::Create, -1));
  for (const auto T : {F32, F16, BF16}) {
    ops->push_back(new OpDef("GreedyStep", ep, {T, U32, U32}, {U32, U32, U32}, {false, false, false}, {false, false, false},
                             GreedyStepCpu::Create, 1));
    ops->back()->UseKvCacheOutputs(1);  // outputs 1, 2: kv_pos's and token_log's shapes (may be updated in place)
  }
}

}  // namespace mn
