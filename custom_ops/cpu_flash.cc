// com.meganeura.FlashAttention / FlashAttentionGrad on the CPU (layout: flash_attention.h), and the
// attribute and shape checks the CUDA kernels share (flash_ops.h).
//
// Forward: one task per (sequence, query head) on ORT's thread pool; a tile of kQ query rows walks the
// keys in tiles of kK rows: scores of the tile, then an online softmax (running max and sum per row)
// rescales the fp32 accumulator, so no S x S matrix is formed. LSE = max + log(sum) per row.
// Backward: one task per (sequence, KV head), which owns its dK/dV rows and the dQ rows of its query
// heads (no two tasks write the same row, no atomics). Per key tile, for each query row:
// p = exp(s - LSE), dp = dY . v, ds = p (dp - D) with D = dY . Y, then dq += ds k, dk += ds q, dv += p dY.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu_parallel.h"
#include "flash_ops.h"

namespace mn {

OrtStatus* ReadFlashAttrs(const OrtKernelInfo* info, bool grad, FlashAttrs* a) {
  if (grad) {
    MN_RETURN_IF(AttrInt(info, "FlashAttentionGrad", "num_heads", &a->num_heads, nullptr));
    MN_RETURN_IF(AttrInt(info, "FlashAttentionGrad", "num_kv_heads", &a->num_kv_heads, nullptr));
    MN_RETURN_IF(AttrInt(info, "FlashAttentionGrad", "head_dim", &a->head_dim, nullptr));
    MN_RETURN_IF(AttrInt(info, "FlashAttentionGrad", "causal", &a->causal, nullptr));
  } else {
    MN_RETURN_IF(AttrInt(info, "FlashAttention", "num_heads", &a->num_heads, nullptr));
    MN_RETURN_IF(AttrInt(info, "FlashAttention", "num_kv_heads", &a->num_kv_heads, nullptr));
    MN_RETURN_IF(AttrInt(info, "FlashAttention", "head_dim", &a->head_dim, nullptr));
    MN_RETURN_IF(AttrInt(info, "FlashAttention", "causal", &a->causal, nullptr));
  }
  const char* op = grad ? "FlashAttentionGrad" : "FlashAttention";
  if (a->num_heads < 1 || a->num_kv_heads < 1 || a->num_heads > kMaxHeads || a->num_kv_heads > kMaxHeads)
    return MN_INVALID("%s: num_heads %lld and num_kv_heads %lld must be in [1, 2^20]", op, (long long)a->num_heads,
                      (long long)a->num_kv_heads);
  if (a->head_dim < 1 || a->head_dim > MN_FLASH_MAX_HEAD_DIM)
    return MN_INVALID("%s: head_dim must be in [1, %d], got %lld", op, MN_FLASH_MAX_HEAD_DIM, (long long)a->head_dim);
  if (a->causal != 0 && a->causal != 1) return MN_INVALID("%s: causal must be 0 or 1, got %lld", op, (long long)a->causal);
  if (a->num_heads % a->num_kv_heads != 0)
    return MN_INVALID("%s: num_heads %lld is not a multiple of num_kv_heads %lld", op, (long long)a->num_heads,
                      (long long)a->num_kv_heads);
  return nullptr;
}

OrtStatus* CheckFlash(const char* op, const FlashAttrs& a, OrtKernelContext* ctx, bool grad, FlashProblem* p,
                      std::vector<Tensor>* in) {
  const char* names[6] = {"Q", "K", "V", "Y", "dY", "LSE"};
  in->resize(grad ? 6 : 3);
  for (size_t i = 0; i < in->size(); ++i) {
    MN_RETURN_IF(GetInput(ctx, i, &(*in)[i]));
    MN_RETURN_IF(CheckTensor(op, names[i], (*in)[i], ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, i == 5 ? 3 : 3));
  }
  const Tensor &q = (*in)[0], &k = (*in)[1], &v = (*in)[2];
  const int64_t qw = a.num_heads * a.head_dim, kw = a.num_kv_heads * a.head_dim;
  if (q.shape[2] != qw)
    return MN_INVALID("%s: Q must be [batch, seq, %lld] (num_heads * head_dim), got %s", op, (long long)qw, ShapeStr(q.shape).c_str());
  if (k.shape[0] != q.shape[0] || k.shape[2] != kw || v.shape != k.shape)
    return MN_INVALID("%s: K and V must both be [%lld, kv_seq, %lld] (batch of Q, num_kv_heads * head_dim), got K %s and V %s", op,
                      (long long)q.shape[0], (long long)kw, ShapeStr(k.shape).c_str(), ShapeStr(v.shape).c_str());
  *p = {q.shape[0], q.shape[1], k.shape[1], a.num_heads, a.num_kv_heads, a.head_dim, a.causal != 0};
  if (p->causal && p->S != p->T)
    return MN_INVALID("%s: causal attention needs Q and K of the same length, got %lld and %lld", op, (long long)p->T, (long long)p->S);
  if (p->T > 0 && p->S == 0) return MN_INVALID("%s: K and V have no rows (shape %s) but Q has %lld", op, ShapeStr(k.shape).c_str(), (long long)p->T);
  if (grad) {
    for (int i = 3; i < 5; ++i)
      if ((*in)[i].shape != q.shape)
        return MN_INVALID("%s: %s must have the shape of Q %s, got %s", op, names[i], ShapeStr(q.shape).c_str(), ShapeStr((*in)[i].shape).c_str());
    const std::vector<int64_t> lse_shape = {p->B, p->H, p->T};
    if ((*in)[5].shape != lse_shape)
      return MN_INVALID("%s: LSE must be %s ([batch, num_heads, seq]), got %s", op, ShapeStr(lse_shape).c_str(),
                        ShapeStr((*in)[5].shape).c_str());
  }
  return nullptr;
}

namespace {

constexpr int64_t kQ = 16;  // query rows per tile
constexpr int64_t kK = 64;  // key rows per tile

struct View {  // element (b, row, head, d) of a [B, rows, heads * hd] tensor
  int64_t rows, heads, hd;
  int64_t at(int64_t b, int64_t row, int64_t head) const { return ((b * rows + row) * heads + head) * hd; }
};

inline float Dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

inline void Axpy(float* y, float a, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

void ForwardHead(const FlashProblem& p, const float* q, const float* k, const float* v, float* y, float* lse, int64_t b, int64_t h) {
  const View qv{p.T, p.H, p.hd}, kv{p.S, p.KVH, p.hd};
  const int64_t kh = h / (p.H / p.KVH);
  const float scale = 1.f / std::sqrt(static_cast<float>(p.hd)), ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> acc(kQ * p.hd), sc(kQ * kK), m(kQ), l(kQ);
  for (int64_t i0 = 0; i0 < p.T; i0 += kQ) {
    const int64_t nq = std::min(kQ, p.T - i0), kend = p.causal ? i0 + nq : p.S;
    std::fill(acc.begin(), acc.end(), 0.f);
    std::fill(m.begin(), m.end(), ninf);
    std::fill(l.begin(), l.end(), 0.f);
    for (int64_t j0 = 0; j0 < kend; j0 += kK) {
      const int64_t nk = std::min(kK, kend - j0);
      for (int64_t r = 0; r < nq; ++r) {
        const int64_t i = i0 + r;
        const float* qi = q + qv.at(b, i, h);
        float* s = &sc[r * kK];
        float mx = m[r];
        for (int64_t c = 0; c < nk; ++c) {
          const int64_t j = j0 + c;
          s[c] = (p.causal && j > i) ? ninf : Dot(qi, k + kv.at(b, j, kh), p.hd) * scale;
          mx = std::max(mx, s[c]);
        }
        if (mx == ninf) continue;  // every key of the tile hidden, none seen before
        const float a = std::exp(m[r] - mx);  // rescale the running sum to the new max
        float* ar = &acc[r * p.hd];
        if (a != 1.f)
          for (int64_t d = 0; d < p.hd; ++d) ar[d] *= a;
        l[r] *= a;
        m[r] = mx;
        for (int64_t c = 0; c < nk; ++c) {
          if (s[c] == ninf) continue;
          const float pr = std::exp(s[c] - mx);
          l[r] += pr;
          Axpy(ar, pr, v + kv.at(b, j0 + c, kh), p.hd);
        }
      }
    }
    for (int64_t r = 0; r < nq; ++r) {
      float* yi = y + qv.at(b, i0 + r, h);
      const float inv = 1.f / l[r];
      for (int64_t d = 0; d < p.hd; ++d) yi[d] = acc[r * p.hd + d] * inv;
      lse[(b * p.H + h) * p.T + i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

struct GradArgs {
  const float *q, *k, *v, *y, *dy, *lse;
  float *dq, *dk, *dv;
};

void BackwardKvHead(const FlashProblem& p, const GradArgs& g, int64_t b, int64_t kh) {
  const View qv{p.T, p.H, p.hd}, kv{p.S, p.KVH, p.hd};
  const int64_t rep = p.H / p.KVH;
  const float scale = 1.f / std::sqrt(static_cast<float>(p.hd));
  for (int64_t j = 0; j < p.S; ++j) {
    std::memset(g.dk + kv.at(b, j, kh), 0, sizeof(float) * p.hd);
    std::memset(g.dv + kv.at(b, j, kh), 0, sizeof(float) * p.hd);
  }
  std::vector<float> dsum(p.T);
  for (int64_t h = kh * rep; h < (kh + 1) * rep; ++h) {
    const float* lse = g.lse + (b * p.H + h) * p.T;
    for (int64_t i = 0; i < p.T; ++i) {
      std::memset(g.dq + qv.at(b, i, h), 0, sizeof(float) * p.hd);
      dsum[i] = Dot(g.dy + qv.at(b, i, h), g.y + qv.at(b, i, h), p.hd);  // D_i = sum_j p_ij dp_ij
    }
    for (int64_t j0 = 0; j0 < p.S; j0 += kK) {  // a key tile stays in cache while every query visits it
      const int64_t nk = std::min(kK, p.S - j0);
      for (int64_t i = p.causal ? j0 : 0; i < p.T; ++i) {
        const float *qi = g.q + qv.at(b, i, h), *doi = g.dy + qv.at(b, i, h);
        float* dqi = g.dq + qv.at(b, i, h);
        const int64_t cend = p.causal ? std::min(nk, i - j0 + 1) : nk;
        for (int64_t c = 0; c < cend; ++c) {
          const int64_t j = j0 + c;
          const float* kj = g.k + kv.at(b, j, kh);
          const float pr = std::exp(Dot(qi, kj, p.hd) * scale - lse[i]);
          const float ds = pr * (Dot(doi, g.v + kv.at(b, j, kh), p.hd) - dsum[i]) * scale;
          Axpy(dqi, ds, kj, p.hd);
          Axpy(g.dk + kv.at(b, j, kh), ds, qi, p.hd);
          Axpy(g.dv + kv.at(b, j, kh), pr, doi, p.hd);
        }
      }
    }
  }
}

class FlashAttentionCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    FlashAttrs a;
    MN_RETURN_IF(ReadFlashAttrs(info, false, &a));
    *out = new FlashAttentionCpu(a);
    return nullptr;
  }
  explicit FlashAttentionCpu(const FlashAttrs& a) : a_(a) {}
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    FlashProblem p;
    std::vector<Tensor> in;
    MN_RETURN_IF(CheckFlash("FlashAttention", a_, ctx, false, &p, &in));
    float *y = nullptr, *lse = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &y));
    MN_RETURN_IF(GetOutput(ctx, 1, {p.B, p.H, p.T}, &lse));
    auto run = [&](size_t t) {
      ForwardHead(p, in[0].f32(), in[1].f32(), in[2].f32(), y, lse, int64_t(t) / p.H, int64_t(t) % p.H);
    };
    return ParallelFor(ctx, p.T > 0 ? size_t(p.B * p.H) : 0, run);
  }

 private:
  FlashAttrs a_;
};

class FlashAttentionGradCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    FlashAttrs a;
    MN_RETURN_IF(ReadFlashAttrs(info, true, &a));
    *out = new FlashAttentionGradCpu(a);
    return nullptr;
  }
  explicit FlashAttentionGradCpu(const FlashAttrs& a) : a_(a) {}
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    FlashProblem p;
    std::vector<Tensor> in;
    MN_RETURN_IF(CheckFlash("FlashAttentionGrad", a_, ctx, true, &p, &in));
    GradArgs g{in[0].f32(), in[1].f32(), in[2].f32(), in[3].f32(), in[4].f32(), in[5].f32(), nullptr, nullptr, nullptr};
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &g.dq));
    MN_RETURN_IF(GetOutput(ctx, 1, in[1].shape, &g.dk));
    MN_RETURN_IF(GetOutput(ctx, 2, in[2].shape, &g.dv));
    auto run = [&](size_t t) { BackwardKvHead(p, g, int64_t(t) / p.KVH, int64_t(t) % p.KVH); };
    return ParallelFor(ctx, size_t(p.B * p.KVH), run);
  }

 private:
  FlashAttrs a_;
};

constexpr ONNXTensorElementDataType F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

}  // namespace

void AddCpuFlashOps(std::vector<OpDef*>* ops) {
  const char* ep = "CPUExecutionProvider";
  ops->push_back(new OpDef("FlashAttention", ep, {F32, F32, F32}, {F32, F32}, {false, false, false}, {false, false, false},
                           FlashAttentionCpu::Create, 0));
  ops->push_back(new OpDef("FlashAttentionGrad", ep, {F32, F32, F32, F32, F32, F32}, {F32, F32, F32},
                           {false, false, false, false, false, false}, {false, false, false, false, false, false},
                           FlashAttentionGradCpu::Create, 0));
}

}  // namespace mn
