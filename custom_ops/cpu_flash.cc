// com.meganeura.FlashAttention / FlashAttentionGrad on the CPU (layout: flash_attention.h), and the
// attribute and shape checks the CUDA kernels share (flash_ops.h).
//
// Forward: one task per (sequence, query head) on ORT's thread pool; a tile of kQ query rows walks the
// keys in tiles of kK rows: scores of the tile, then an online softmax (running max and sum per row)
// rescales the fp32 accumulator, so no S x S matrix is formed. LSE = max + log(sum) per row.
// Backward: one task per (sequence, KV head), which owns its dK/dV rows and the dQ rows of its query
// heads (no two tasks write the same row, no atomics). Per key tile (dK/dV accumulated locally), per
// block of kQ query rows of each query head of the KV head: p = exp(s - LSE), dp = dY . v,
// ds = p (dp - D) with D = dY . Y for the block, then dq += ds k, dk += ds q, dv += p dY as sums over
// the block's keys / rows held in registers (head_dim 16, 32, 64, 128 compiled in), and exp is a
// vectorisable polynomial (cpu_math.h): at short sequences the decomposed graph's MLAS GEMMs beat a
// row-at-a-time version of these loops.
// float16/bfloat16 tensors are converted to float32 copies on entry and the outputs rounded once on
// exit (ORT's CPU EP computes nothing in half; these kernels exist so a half model keeps its types).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu_elements.h"
#include "cpu_math.h"
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
  for (size_t i = 0; i < in->size(); ++i) MN_RETURN_IF(GetInput(ctx, i, &(*in)[i]));
  MN_RETURN_IF(CheckFloatTensor(op, names[0], (*in)[0], 3));
  for (size_t i = 1; i < in->size(); ++i)
    MN_RETURN_IF(CheckTensor(op, names[i], (*in)[i], i == 5 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : (*in)[0].type, 3));
  const Tensor &q = (*in)[0], &k = (*in)[1], &v = (*in)[2];
  const int64_t qw = a.num_heads * a.head_dim, kw = a.num_kv_heads * a.head_dim;
  if (q.shape[2] != qw)
    return MN_INVALID("%s: Q must be [batch, seq, %lld] (num_heads * head_dim), got %s", op, (long long)qw, ShapeStr(q.shape).c_str());
  if (k.shape[0] != q.shape[0] || k.shape[2] != kw || v.shape != k.shape)
    return MN_INVALID("%s: K and V must both be [%lld, kv_seq, %lld] (batch of Q, num_kv_heads * head_dim), got K %s and V %s", op,
                      (long long)q.shape[0], (long long)kw, ShapeStr(k.shape).c_str(), ShapeStr(v.shape).c_str());
  *p = {q.shape[0], q.shape[1], k.shape[1], a.num_heads, a.num_kv_heads, a.head_dim, a.causal != 0, q.type};
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

// The library's baseline is x86-64-v2 (SSE4.2); the two hot loops also get an AVX2 + FMA copy that
// the loader picks on CPUs that have it (GCC function multi-versioning): 2-4x on the dot products.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MN_HOT_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MN_HOT_CLONES
#endif
// Helpers inlined into each clone (so they are compiled for its instruction set too).
#define MN_INLINE __attribute__((always_inline)) inline

constexpr int64_t kQ = 32;  // query rows per tile
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

// xt[d * kK + c] = dimension d of row r0 + c of one head (zeros past nk): a query row's scores with
// the tile's keys are then hd axpys across the keys (vectorised) instead of one reduction per key.
inline void TransposeTile(const float* x, const View& xv, int64_t b, int64_t head, int64_t r0, int64_t nk, float* xt) {
  for (int64_t c = 0; c < kK; ++c) {
    const float* row = c < nk ? x + xv.at(b, r0 + c, head) : nullptr;
    for (int64_t d = 0; d < xv.hd; ++d) xt[d * kK + c] = row ? row[d] : 0.f;
  }
}

// s[c] = a . row c of the transposed tile, for the kK rows.
inline void TileDots(const float* a, const float* xt, int64_t hd, float* s) {
  float acc[kK] = {};
  for (int64_t d = 0; d < hd; ++d) {
    const float ad = a[d];
    const float* row = xt + d * kK;
#pragma omp simd
    for (int64_t c = 0; c < kK; ++c) acc[c] += ad * row[c];
  }
  std::memcpy(s, acc, sizeof acc);
}

// y[0, hd) += sum_k a[k * a_stride] * (row k of x, rows x_stride apart), for k < n. With HD > 0
// (= hd, known when compiled) the sum stays in registers across the rows: one load of each x row,
// one store of y, instead of a load and store of y per row.
template <int HD>
MN_INLINE void AddRows(float* __restrict__ y, const float* a, int64_t a_stride, const float* x, int64_t x_stride, int64_t n, int64_t hd) {
  if constexpr (HD > 0) {
    float acc[HD];
#pragma omp simd
    for (int d = 0; d < HD; ++d) acc[d] = y[d];
    for (int64_t k = 0; k < n; ++k) {
      const float w = a[k * a_stride];
      const float* xr = x + k * x_stride;
#pragma omp simd
      for (int d = 0; d < HD; ++d) acc[d] += w * xr[d];
    }
#pragma omp simd
    for (int d = 0; d < HD; ++d) y[d] = acc[d];
  } else {
    for (int64_t k = 0; k < n; ++k) Axpy(y, a[k * a_stride], x + k * x_stride, hd);
  }
}

template <int HD>
MN_INLINE void ForwardHeadT(const FlashProblem& p, const float* q, const float* k, const float* v, float* y, float* lse, int64_t b,
                            int64_t h) {
  const int64_t hd = HD > 0 ? HD : p.hd;
  const View qv{p.T, p.H, hd}, kv{p.S, p.KVH, hd};
  const int64_t kh = h / (p.H / p.KVH);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd)), ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> acc(kQ * hd), kt(hd * kK), m(kQ), l(kQ);
  float s[kK];
  for (int64_t i0 = 0; i0 < p.T; i0 += kQ) {
    const int64_t nq = std::min(kQ, p.T - i0), kend = p.causal ? i0 + nq : p.S;
    std::fill(acc.begin(), acc.end(), 0.f);
    std::fill(m.begin(), m.end(), ninf);
    std::fill(l.begin(), l.end(), 0.f);
    for (int64_t j0 = 0; j0 < kend; j0 += kK) {
      const int64_t nk = std::min(kK, kend - j0);
      TransposeTile(k, kv, b, kh, j0, nk, kt.data());
      for (int64_t r = 0; r < nq; ++r) {
        const int64_t i = i0 + r;
        const int64_t cend = p.causal ? std::min(nk, i - j0 + 1) : nk;  // keys past i are hidden
        if (cend <= 0) continue;
        TileDots(q + qv.at(b, i, h), kt.data(), hd, s);
        float mx = m[r];
        for (int64_t c = 0; c < cend; ++c) mx = std::max(mx, s[c] *= scale);
        const float a = std::exp(m[r] - mx);  // rescale the running sum to the new max
        float* ar = &acc[r * hd];
        if (a != 1.f)
          for (int64_t d = 0; d < hd; ++d) ar[d] *= a;
        m[r] = mx;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < cend; ++c) sum += s[c] = ExpNeg(s[c] - mx);
        l[r] = l[r] * a + sum;
        AddRows<HD>(ar, s, 1, v + kv.at(b, j0, kh), p.KVH * hd, cend, hd);
      }
    }
    for (int64_t r = 0; r < nq; ++r) {
      float* yi = y + qv.at(b, i0 + r, h);
      const float inv = 1.f / l[r];
      for (int64_t d = 0; d < hd; ++d) yi[d] = acc[r * hd + d] * inv;
      lse[(b * p.H + h) * p.T + i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

struct GradArgs {
  const float *q, *k, *v, *y, *dy, *lse;
  float *dq, *dk, *dv;
};

// One key tile's work for a block of nq <= kQ query rows of query head h: P and dS of the block
// (zeros where hidden), then dq += dS K, dk_tile += dS^T Q, dv_tile += P^T dY as register-held sums.
template <int HD>
MN_INLINE void BackwardBlock(const FlashProblem& p, const GradArgs& g, int64_t b, int64_t kh, int64_t h, int64_t i0, int64_t nq,
                             int64_t j0, int64_t nk, const float* kt, const float* vt, const float* dsum_h, float* dkt, float* dvt,
                             float* P, float* DS) {
  const int64_t hd = HD > 0 ? HD : p.hd;
  const View qv{p.T, p.H, hd}, kv{p.S, p.KVH, hd};
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const float* lse = g.lse + (b * p.H + h) * p.T;
  float dp[kK];
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t i = i0 + r;
    const int64_t cend = p.causal ? std::max<int64_t>(0, std::min(nk, i - j0 + 1)) : nk;
    float *pr = P + r * kK, *ds = DS + r * kK;
    TileDots(g.q + qv.at(b, i, h), kt, hd, pr);
    TileDots(g.dy + qv.at(b, i, h), vt, hd, dp);
    const float li = lse[i], di = dsum_h[i];
#pragma omp simd
    for (int64_t c = 0; c < kK; ++c) {
      const float e = ExpNeg(std::min(pr[c] * scale - li, 0.f));  // s - lse <= 0 (up to rounding)
      pr[c] = c < cend ? e : 0.f;
      ds[c] = pr[c] * (dp[c] - di) * scale;
    }
  }
  // Causal: only the visible part of the block (row r sees keys c <= i0 + r - j0; key c is seen from
  // row j0 + c - i0 on); the rest is zeros.
  const int64_t qs = p.H * hd, ks = p.KVH * hd;
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t cend = p.causal ? std::min(nk, i0 + r - j0 + 1) : nk;
    AddRows<HD>(g.dq + qv.at(b, i0 + r, h), DS + r * kK, 1, g.k + kv.at(b, j0, kh), ks, cend, hd);
  }
  const int64_t cend = p.causal ? std::min(nk, i0 + nq - j0) : nk;
  for (int64_t c = 0; c < cend; ++c) {
    const int64_t r0 = p.causal ? std::max<int64_t>(0, j0 + c - i0) : 0;
    AddRows<HD>(dkt + c * hd, DS + r0 * kK + c, kK, g.q + qv.at(b, i0 + r0, h), qs, nq - r0, hd);
    AddRows<HD>(dvt + c * hd, P + r0 * kK + c, kK, g.dy + qv.at(b, i0 + r0, h), qs, nq - r0, hd);
  }
}

template <int HD>
MN_INLINE void BackwardKvHeadT(const FlashProblem& p, const GradArgs& g, int64_t b, int64_t kh) {
  const int64_t hd = HD > 0 ? HD : p.hd;
  const View qv{p.T, p.H, hd}, kv{p.S, p.KVH, hd};
  const int64_t rep = p.H / p.KVH, h0 = kh * rep;
  std::vector<float> dsum(rep * p.T), kt(hd * kK), vt(hd * kK), dkt(kK * hd), dvt(kK * hd), P(kQ * kK), DS(kQ * kK);
  for (int64_t h = h0; h < h0 + rep; ++h)
    for (int64_t i = 0; i < p.T; ++i) {
      std::memset(g.dq + qv.at(b, i, h), 0, sizeof(float) * hd);
      dsum[(h - h0) * p.T + i] = Dot(g.dy + qv.at(b, i, h), g.y + qv.at(b, i, h), hd);  // D_i = sum_j p_ij dp_ij
    }
  for (int64_t j0 = 0; j0 < p.S; j0 += kK) {  // one key tile at a time: its dK/dV rows stay local
    const int64_t nk = std::min(kK, p.S - j0);
    TransposeTile(g.k, kv, b, kh, j0, nk, kt.data());
    TransposeTile(g.v, kv, b, kh, j0, nk, vt.data());
    std::fill(dkt.begin(), dkt.end(), 0.f);
    std::fill(dvt.begin(), dvt.end(), 0.f);
    for (int64_t h = h0; h < h0 + rep; ++h)
      for (int64_t i0 = p.causal ? j0 : 0; i0 < p.T; i0 += kQ)  // causal: queries before j0 see none of these keys
        BackwardBlock<HD>(p, g, b, kh, h, i0, std::min(kQ, p.T - i0), j0, nk, kt.data(), vt.data(), &dsum[(h - h0) * p.T],
                          dkt.data(), dvt.data(), P.data(), DS.data());
    for (int64_t c = 0; c < nk; ++c) {
      std::memcpy(g.dk + kv.at(b, j0 + c, kh), &dkt[c * hd], sizeof(float) * hd);
      std::memcpy(g.dv + kv.at(b, j0 + c, kh), &dvt[c * hd], sizeof(float) * hd);
    }
  }
}

// The head_dims of common models get register-held row sums (HD); others the generic loops. Each
// is compiled into both clones of these entry points (AVX2 + FMA, and the baseline).
MN_HOT_CLONES void ForwardHead(const FlashProblem& p, const float* q, const float* k, const float* v, float* y, float* lse, int64_t b,
                               int64_t h) {
  switch (p.hd) {
    case 16: return ForwardHeadT<16>(p, q, k, v, y, lse, b, h);
    case 32: return ForwardHeadT<32>(p, q, k, v, y, lse, b, h);
    case 64: return ForwardHeadT<64>(p, q, k, v, y, lse, b, h);
    case 128: return ForwardHeadT<128>(p, q, k, v, y, lse, b, h);
    default: return ForwardHeadT<0>(p, q, k, v, y, lse, b, h);
  }
}

MN_HOT_CLONES void BackwardKvHead(const FlashProblem& p, const GradArgs& g, int64_t b, int64_t kh) {
  switch (p.hd) {
    case 16: return BackwardKvHeadT<16>(p, g, b, kh);
    case 32: return BackwardKvHeadT<32>(p, g, b, kh);
    case 64: return BackwardKvHeadT<64>(p, g, b, kh);
    case 128: return BackwardKvHeadT<128>(p, g, b, kh);
    default: return BackwardKvHeadT<0>(p, g, b, kh);
  }
}

// The float32 values of a float tensor: its data, or (half types) a converted copy held in `buf`.
const float* FloatData(const Tensor& t, std::vector<float>* buf) {
  if (t.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return t.f32();
  buf->resize(static_cast<size_t>(t.numel()));
  DispatchFloat(t.type, [&](auto tag) -> OrtStatus* {
    ToFloatRow(static_cast<const decltype(tag)*>(t.data), buf->data(), t.numel());
    return nullptr;
  });
  return buf->data();
}

// An output of element type `type`: the kernels write float32 into f32 (the output itself, or
// scratch for the half types that Finish rounds into the output).
struct FloatOut {
  explicit FloatOut(ONNXTensorElementDataType t) : type(t) {}
  ONNXTensorElementDataType type;
  void* data = nullptr;
  std::vector<float> buf;
  float* f32 = nullptr;
  OrtStatus* Get(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape) {
    MN_RETURN_IF(GetOutput(ctx, index, shape, &data));
    if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
      f32 = static_cast<float*>(data);
    } else {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      buf.resize(static_cast<size_t>(n));
      f32 = buf.data();
    }
    return nullptr;
  }
  OrtStatus* Finish() {
    if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return nullptr;
    return DispatchFloat(type, [&](auto tag) -> OrtStatus* {
      FromFloatRow(buf.data(), static_cast<decltype(tag)*>(data), static_cast<int64_t>(buf.size()));
      return nullptr;
    });
  }
};

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
    std::vector<float> bq, bk, bv;
    const float *q = FloatData(in[0], &bq), *k = FloatData(in[1], &bk), *v = FloatData(in[2], &bv);
    FloatOut y{p.type};
    float* lse = nullptr;
    MN_RETURN_IF(y.Get(ctx, 0, in[0].shape));
    MN_RETURN_IF(GetOutput(ctx, 1, {p.B, p.H, p.T}, &lse));
    auto run = [&](size_t t) { ForwardHead(p, q, k, v, y.f32, lse, int64_t(t) / p.H, int64_t(t) % p.H); };
    MN_RETURN_IF(ParallelFor(ctx, p.T > 0 ? size_t(p.B * p.H) : 0, run));
    return y.Finish();
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
    std::vector<float> buf[5];
    GradArgs g{FloatData(in[0], &buf[0]), FloatData(in[1], &buf[1]), FloatData(in[2], &buf[2]), FloatData(in[3], &buf[3]),
               FloatData(in[4], &buf[4]), in[5].f32(), nullptr, nullptr, nullptr};
    FloatOut dq{p.type}, dk{p.type}, dv{p.type};
    MN_RETURN_IF(dq.Get(ctx, 0, in[0].shape));
    MN_RETURN_IF(dk.Get(ctx, 1, in[1].shape));
    MN_RETURN_IF(dv.Get(ctx, 2, in[2].shape));
    g.dq = dq.f32, g.dk = dk.f32, g.dv = dv.f32;
    auto run = [&](size_t t) { BackwardKvHead(p, g, int64_t(t) / p.KVH, int64_t(t) % p.KVH); };
    MN_RETURN_IF(ParallelFor(ctx, size_t(p.B * p.KVH), run));
    MN_RETURN_IF(dq.Finish());
    MN_RETURN_IF(dk.Finish());
    return dv.Finish();
  }

 private:
  FlashAttrs a_;
};

constexpr ONNXTensorElementDataType F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr ONNXTensorElementDataType F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr ONNXTensorElementDataType BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
// The log-sum-exp is float32 whatever T is (FP32: not one of the loop's types).
constexpr ONNXTensorElementDataType FP32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

}  // namespace

void AddCpuFlashOps(std::vector<OpDef*>* ops) {
  const char* ep = "CPUExecutionProvider";
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(new OpDef("FlashAttention", ep, {T, T, T}, {T, FP32}, {false, false, false}, {false, false, false},
                             FlashAttentionCpu::Create, 0));
    ops->push_back(new OpDef("FlashAttentionGrad", ep, {T, T, T, T, T, FP32}, {T, T, T}, {false, false, false, false, false, false},
                             {false, false, false, false, false, false}, FlashAttentionGradCpu::Create, 0));
  }
}

}  // namespace mn
