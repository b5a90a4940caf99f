// CPU kernels of the com.meganeura ops (CPUExecutionProvider).
// Work is split over ORT's intra-op thread pool (KernelContext_ParallelFor);
// inner loops are contiguous and written so that -O3 vectorises them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "op_common.h"

namespace mn {
namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;  // index inputs: int64, int32 or uint32

// Runs f(i) for i in [0, total) on ORT's intra-op pool.
template <class F>
OrtStatus* ParallelFor(OrtKernelContext* ctx, size_t total, F&& f) {
  if (total == 0) return nullptr;
  if (total == 1) {
    f(size_t{0});
    return nullptr;
  }
  using Fn = typename std::remove_reference<F>::type;
  auto tramp = [](void* p, size_t i) { (*static_cast<Fn*>(p))(i); };
  return g_api->KernelContext_ParallelFor(ctx, tramp, total, 0, &f);
}

// Splits n items into at most `max_chunks` chunks of at least `min_chunk`.
struct Chunks {
  int64_t n, size, count;
  Chunks(int64_t n_, int64_t min_chunk, int64_t max_chunks) : n(n_) {
    count = std::max<int64_t>(1, std::min<int64_t>(max_chunks, n / std::max<int64_t>(1, min_chunk)));
    size = (n + count - 1) / std::max<int64_t>(1, count);
    count = size ? (n + size - 1) / size : 0;
  }
  int64_t begin(int64_t c) const { return c * size; }
  int64_t end(int64_t c) const { return std::min(n, (c + 1) * size); }
};

// ------------------------------------------------------------------ Rope
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
    float* y = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, x.shape, &y));
    const float* xs = x.f32();
    const int64_t half = p.head_dim / 2, heads = p.D / p.head_dim;
    const float* inv = inv_freq_.data();
    Chunks rows(p.S, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.D)), 1024);
    return ParallelFor(ctx, rows.count, [&](size_t c) {
      std::vector<float> cs(half), sn(half);
      for (int64_t r = rows.begin(c); r < rows.end(c); ++r) {
        const float pos = static_cast<float>(p.pos0 + r);
        for (int64_t j = 0; j < half; ++j) {
          const float ang = pos * inv[j];
          cs[j] = std::cos(ang);
          sn[j] = std::sin(ang);
        }
        for (int64_t h = 0; h < heads; ++h) {
          const float* xi = xs + r * p.D + h * p.head_dim;
          float* yo = y + r * p.D + h * p.head_dim;
          for (int64_t j = 0; j < half; ++j) {
            const float a = xi[j], b = xi[j + half];
            yo[j] = a * cs[j] - b * sn[j];
            yo[j + half] = b * cs[j] + a * sn[j];
          }
        }
      }
    });
  }

 private:
  RopeAttrs a_;
  std::vector<float> inv_freq_;
};

// ------------------------------------------------------------------ CacheWrite
class CacheWriteCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
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
    float* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, cache.shape, &out));
    const float* src = cache.f32();
    if (out != src) {  // ORT gave us a distinct buffer: copy the untouched rows
      CountCacheCopy();
      const int64_t n = p.max_seq * p.dim;
      Chunks ch(n, 1 << 16, 64);
      MN_RETURN_IF(ParallelFor(ctx, ch.count, [&](size_t c) {
        std::memcpy(out + ch.begin(c), src + ch.begin(c), sizeof(float) * (ch.end(c) - ch.begin(c)));
      }));
    }
    if (p.T * p.dim > 0) std::memcpy(out + p.kv_pos * p.dim, nw.f32(), sizeof(float) * p.T * p.dim);
    return nullptr;
  }
};

// ------------------------------------------------------------------ CachedAttention
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
    float* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, q.shape, &out));
    const int64_t hd = p.hd, G = p.H / p.KVH, kvw = p.KVH * hd, qw = p.H * hd;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const float *qs = q.f32(), *ks = k.f32(), *vs = v.f32();
    // One work item = one query row t and one KV head with its G query heads, so each
    // K/V row is read once for the whole group.
    return ParallelFor(ctx, static_cast<size_t>(p.T * p.KVH), [&](size_t item) {
      const int64_t t = static_cast<int64_t>(item) / p.KVH, kh = static_cast<int64_t>(item) % p.KVH;
      const int64_t L = p.kv_pos + t + 1;  // attends to cache rows [0, kv_pos + t]
      std::vector<float> sc(static_cast<size_t>(G * L));
      std::vector<float> acc(static_cast<size_t>(G * hd), 0.f), inv_sum(static_cast<size_t>(G));
      for (int64_t j = 0; j < L; ++j) {
        const float* kr = ks + j * kvw + kh * hd;
        for (int64_t g = 0; g < G; ++g) {
          const float* qr = qs + t * qw + (kh * G + g) * hd;
          float s = 0.f;
#pragma omp simd reduction(+ : s)
          for (int64_t d = 0; d < hd; ++d) s += qr[d] * kr[d];
          sc[g * L + j] = s * scale;
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        float* srow = sc.data() + g * L;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < L; ++j) m = std::max(m, srow[j]);
        float sum = 0.f;
        for (int64_t j = 0; j < L; ++j) {
          srow[j] = std::exp(srow[j] - m);
          sum += srow[j];
        }
        inv_sum[g] = 1.0f / sum;
      }
      // V rows are read once for the whole head group.
      for (int64_t j = 0; j < L; ++j) {
        const float* vr = vs + j * kvw + kh * hd;
        for (int64_t g = 0; g < G; ++g) {
          const float w = sc[g * L + j];
          float* a = acc.data() + g * hd;
#pragma omp simd
          for (int64_t d = 0; d < hd; ++d) a[d] += w * vr[d];
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        float* o = out + t * qw + (kh * G + g) * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] = acc[g * hd + d] * inv_sum[g];
      }
    });
  }

 private:
  AttnAttrs a_;
};

// ------------------------------------------------------------------ ScatterAdd
class ScatterAddCpu : public Kernel {
 public:
  explicit ScatterAddCpu(int64_t num_rows) : num_rows_(num_rows) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    int64_t n = 0;
    MN_RETURN_IF(AttrInt(info, "ScatterAdd", "num_rows", &n, nullptr));
    if (n < 0) return MN_INVALID("ScatterAdd: attribute num_rows must be >= 0, got %lld", (long long)n);
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

}  // namespace

void AddCpuOps(std::vector<OpDef*>* ops) {
  const char* ep = "CPUExecutionProvider";
  ops->push_back(new OpDef("Rope", ep, {F32, ANY}, {F32}, {false, true}, {false, false}, RopeCpu::Create, 0));
  ops->push_back(new OpDef("CacheWrite", ep, {F32, F32, ANY}, {F32}, {false, false, false}, {false, false, false},
                           CacheWriteCpu::Create, 1, /*cache_inplace=*/true));
  ops->push_back(new OpDef("CachedAttention", ep, {F32, F32, F32, ANY}, {F32}, {false, false, false, false},
                           {false, false, false, false}, CachedAttentionCpu::Create, 0));
  ops->push_back(new OpDef("ScatterAdd", ep, {ANY, F32}, {F32}, {false, false}, {false, false},
                           ScatterAddCpu::Create, -1));
}

}  // namespace mn
