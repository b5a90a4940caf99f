// Attribute reading and input checks of the decode ops (Rope, CacheWrite, CachedAttention) and
// ScatterAdd, shared by the CPU and CUDA kernels (declared in op_common.h).
#include "op_common.h"

#include <cmath>

namespace mn {

// ---------------------------------------------------------------- Rope
OrtStatus* ReadRopeAttrs(const OrtKernelInfo* info, RopeAttrs* a) {
  const int64_t zero = 0, one = 1;
  MN_RETURN_IF(AttrFloat(info, "Rope", "theta", &a->theta, nullptr));
  MN_RETURN_IF(AttrInt(info, "Rope", "head_dim", &a->head_dim, nullptr));
  MN_RETURN_IF(AttrInt(info, "Rope", "offset", &a->offset, &zero));
  MN_RETURN_IF(AttrInt(info, "Rope", "check_positions", &a->check_positions, &one));
  MN_RETURN_IF(CheckPositionsFlag("Rope", a->check_positions));
  MN_RETURN_IF(AttrInt(info, "Rope", "inverse", &a->inverse, &zero));
  if (a->inverse != 0 && a->inverse != 1) return MN_INVALID("Rope: attribute inverse must be 0 or 1, got %lld", (long long)a->inverse);
  if (a->head_dim <= 0 || a->head_dim % 2 != 0 || a->head_dim > 1024)
    return MN_INVALID("Rope: attribute head_dim must be even and in [2, 1024], got %lld", (long long)a->head_dim);
  if (!(a->theta > 0.0f) || !std::isfinite(a->theta))
    return MN_INVALID("Rope: attribute theta must be a positive finite number, got %g", (double)a->theta);
  if (a->offset < 0 || a->offset > kMaxPosition)
    return MN_INVALID("Rope: attribute offset must be in [0, 2^40], got %lld", (long long)a->offset);
  return nullptr;
}

OrtStatus* CheckRope(const RopeAttrs& a, const Tensor& x, const Tensor& offset_dyn, RopeProblem* p, bool host_positions) {
  if (!x.present) return MN_INVALID("Rope: input 'X' is missing");
  MN_RETURN_IF(CheckFloatTensor("Rope", "X", x, x.shape.size() == 3 ? 3 : 2));
  const bool batched = x.shape.size() == 3;
  p->type = x.type;
  p->B = batched ? x.shape[0] : 1;
  p->S = x.shape[batched ? 1 : 0];
  p->D = x.shape[batched ? 2 : 1];
  p->head_dim = a.head_dim;
  if (p->D % a.head_dim != 0)
    return MN_INVALID("Rope: X has %lld features, not a multiple of head_dim %lld (shape %s)", (long long)p->D,
                      (long long)a.head_dim, ShapeStr(x.shape).c_str());
  p->pos0.assign(1, a.offset);
  if (!offset_dyn.present) return nullptr;
  // One offset for all rows of a 2-D X; one per sequence (or one shared) for a 3-D X.
  if (batched && offset_dyn.numel() != 1) {
    MN_RETURN_IF(CheckPositions("Rope", "offset_dyn", offset_dyn, p->B));
  } else {
    MN_RETURN_IF(CheckScalarIndex("Rope", "offset_dyn", offset_dyn));
  }
  if (!host_positions) return nullptr;  // + offset_dyn, added (and checked) on the device
  const int64_t n = offset_dyn.numel();
  p->pos0.resize(n);
  for (int64_t b = 0; b < n; ++b) {
    const int64_t dyn = IndexAt(offset_dyn, b);
    if (dyn < 0) return MN_INVALID("Rope: offset_dyn[%lld] must be >= 0, got %lld", (long long)b, (long long)dyn);
    if (dyn > kMaxPosition)
      return MN_INVALID("Rope: offset_dyn[%lld] = %lld is too large (at most 2^40)", (long long)b, (long long)dyn);
    p->pos0[b] = a.offset + dyn;
  }
  return nullptr;
}

void RopeInvFreq(float theta, int64_t head_dim, float* inv_freq) {
  for (int64_t j = 0; j < head_dim / 2; ++j)
    inv_freq[j] = powf(theta, -2.0f * static_cast<float>(j) / static_cast<float>(head_dim));
}

// ---------------------------------------------------------------- CacheWrite
// Reads B positions (host memory) and checks 0 <= kv_pos[b] <= max_seq - T for each; never computes
// kv_pos + T (a position from the model may be near 2^63).
static OrtStatus* ReadCachePositions(const char* op, const Tensor& kv_pos, int64_t B, int64_t T, int64_t max_seq,
                                     std::vector<int64_t>* out) {
  out->resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t v = IndexAt(kv_pos, b);
    if (v < 0 || v > max_seq - T) {
      if (B == 1)
        return MN_INVALID("%s: kv_pos %lld + T %lld exceeds the cache length max_seq %lld", op, (long long)v, (long long)T,
                          (long long)max_seq);
      return MN_INVALID("%s: kv_pos[%lld] = %lld + T %lld exceeds the cache length max_seq %lld", op, (long long)b,
                        (long long)v, (long long)T, (long long)max_seq);
    }
    (*out)[b] = v;
  }
  return nullptr;
}

OrtStatus* CheckCacheWrite(const Tensor& nw, const Tensor& cache, const Tensor& kv_pos, CacheWriteProblem* p,
                           bool host_positions) {
  const char* op = "CacheWrite";
  const size_t rank = nw.present && nw.shape.size() == 3 ? 3 : 2;  // [B, T, dim] or [T, dim]
  MN_RETURN_IF(CheckFloatTensor(op, "new", nw, rank));
  MN_RETURN_IF(CheckTensor(op, "cache", cache, nw.type, rank));
  const size_t r0 = rank - 2;
  p->type = nw.type;
  p->B = rank == 3 ? nw.shape[0] : 1;
  p->T = nw.shape[r0];
  p->dim = nw.shape[r0 + 1];
  p->max_seq = cache.shape[r0];
  if (cache.shape[r0 + 1] != p->dim || (rank == 3 && cache.shape[0] != p->B))
    return MN_INVALID("%s: new has shape %s but cache has shape %s (batch sizes or row widths differ)", op,
                      ShapeStr(nw.shape).c_str(), ShapeStr(cache.shape).c_str());
  MN_RETURN_IF(CheckPositions(op, "kv_pos", kv_pos, p->B));
  p->kv_pos.clear();
  // Never kv_pos + T > max_seq: kv_pos comes from the model and may be near 2^63 (signed overflow).
  if (p->T > p->max_seq)
    return MN_INVALID("%s: new has %lld rows, more than the cache length max_seq %lld", op, (long long)p->T,
                      (long long)p->max_seq);
  if (host_positions) MN_RETURN_IF(ReadCachePositions(op, kv_pos, p->B, p->T, p->max_seq, &p->kv_pos));
  return nullptr;
}

// ---------------------------------------------------------------- CachedAttention
OrtStatus* ReadAttnAttrs(const OrtKernelInfo* info, AttnAttrs* a) {
  MN_RETURN_IF(AttrInt(info, "CachedAttention", "num_heads", &a->num_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "CachedAttention", "num_kv_heads", &a->num_kv_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "CachedAttention", "head_dim", &a->head_dim, nullptr));
  const int64_t one = 1;
  MN_RETURN_IF(AttrInt(info, "CachedAttention", "check_positions", &a->check_positions, &one));
  return CheckAttnAttrs("CachedAttention", *a);
}

OrtStatus* CheckAttnAttrs(const char* op, const AttnAttrs& a) {
  MN_RETURN_IF(CheckPositionsFlag(op, a.check_positions));
  // Bounded so that num_heads * head_dim cannot overflow.
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads > kMaxHeads || a.num_kv_heads > kMaxHeads || a.head_dim <= 0 ||
      a.head_dim > 1024)
    return MN_INVALID("%s: num_heads %lld, num_kv_heads %lld must be in [1, 2^20] and head_dim %lld in [1, 1024]", op,
                      (long long)a.num_heads, (long long)a.num_kv_heads, (long long)a.head_dim);
  if (a.num_heads % a.num_kv_heads != 0)
    return MN_INVALID("%s: num_heads %lld is not a multiple of num_kv_heads %lld", op, (long long)a.num_heads,
                      (long long)a.num_kv_heads);
  return nullptr;
}

OrtStatus* CheckCachedAttention(const AttnAttrs& a, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& kv_pos, AttnProblem* p, bool host_positions, const char* op) {
  const size_t rank = q.present && q.shape.size() == 3 ? 3 : 2;  // [B, T, H*hd] or [T, H*hd]
  MN_RETURN_IF(CheckFloatTensor(op, "Q", q, rank));
  MN_RETURN_IF(CheckTensor(op, "K_cache", k, q.type, rank));
  MN_RETURN_IF(CheckTensor(op, "V_cache", v, q.type, rank));
  const size_t r0 = rank - 2;
  p->type = q.type;
  p->B = rank == 3 ? q.shape[0] : 1;
  p->T = q.shape[r0];
  p->H = a.num_heads;
  p->KVH = a.num_kv_heads;
  p->hd = a.head_dim;
  p->max_seq = k.shape[r0];
  if (q.shape[r0 + 1] != a.num_heads * a.head_dim)
    return MN_INVALID("%s: Q has shape %s but num_heads %lld * head_dim %lld = %lld", op, ShapeStr(q.shape).c_str(),
                      (long long)a.num_heads, (long long)a.head_dim, (long long)(a.num_heads * a.head_dim));
  if (k.shape[r0 + 1] != a.num_kv_heads * a.head_dim)
    return MN_INVALID("%s: K_cache has shape %s but num_kv_heads %lld * head_dim %lld = %lld", op,
                      ShapeStr(k.shape).c_str(), (long long)a.num_kv_heads, (long long)a.head_dim,
                      (long long)(a.num_kv_heads * a.head_dim));
  if (rank == 3 && k.shape[0] != p->B)
    return MN_INVALID("%s: Q has shape %s but K_cache has shape %s (batch sizes differ)", op, ShapeStr(q.shape).c_str(),
                      ShapeStr(k.shape).c_str());
  if (v.shape != k.shape)
    return MN_INVALID("%s: V_cache shape %s differs from K_cache shape %s", op, ShapeStr(v.shape).c_str(),
                      ShapeStr(k.shape).c_str());
  MN_RETURN_IF(CheckPositions(op, "kv_pos", kv_pos, p->B));
  p->kv_pos.clear();
  if (p->T > p->max_seq)
    return MN_INVALID("%s: Q has %lld rows, more than the cache length max_seq %lld", op, (long long)p->T,
                      (long long)p->max_seq);
  if (host_positions) MN_RETURN_IF(ReadCachePositions(op, kv_pos, p->B, p->T, p->max_seq, &p->kv_pos));
  return nullptr;
}

// ---------------------------------------------------------------- ScatterAdd
OrtStatus* CheckScatterAdd(int64_t num_rows, const Tensor& idx, const Tensor& src, ScatterAddProblem* p, bool host_indices) {
  const char* op = "ScatterAdd";
  if (!idx.present) return MN_INVALID("%s: input 'indices' is missing", op);
  MN_RETURN_IF(CheckIndexType(op, "indices", idx));
  if (idx.shape.size() != 1)
    return MN_INVALID("%s: indices must have rank 1, got shape %s", op, ShapeStr(idx.shape).c_str());
  MN_RETURN_IF(CheckTensor(op, "src", src, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, 2));
  p->N = idx.shape[0];
  p->D = src.shape[1];
  p->num_rows = num_rows;
  int64_t out_numel = 0;
  if (__builtin_mul_overflow(num_rows, p->D, &out_numel) || out_numel > (int64_t(1) << 40))
    return MN_INVALID("%s: output [num_rows %lld, %lld] is too large", op, (long long)num_rows, (long long)p->D);
  if (src.shape[0] != p->N)
    return MN_INVALID("%s: indices has %lld entries but src has shape %s", op, (long long)p->N,
                      ShapeStr(src.shape).c_str());
  for (int64_t i = 0; host_indices && i < p->N; ++i) {
    int64_t r = IndexAt(idx, i);
    if (r < 0 || r >= num_rows)
      return MN_INVALID("%s: indices[%lld] = %lld is out of range [0, %lld)", op, (long long)i, (long long)r,
                        (long long)num_rows);
  }
  return nullptr;
}

OrtStatus* CheckGreedyStep(const Tensor& logits, const Tensor& kv_pos, const Tensor& token_log, GreedyStepProblem* p) {
  const char* op = "GreedyStep";
  MN_RETURN_IF(CheckFloatTensor(op, "logits", logits, 2));
  MN_RETURN_IF(CheckTensor(op, "kv_pos", kv_pos, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, 1));
  MN_RETURN_IF(CheckTensor(op, "token_log", token_log, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, 2));
  p->B = logits.shape[0];
  p->V = logits.shape[1];
  p->n = token_log.shape[1];
  // The chosen index is a uint32 token id; a row's elements are counted in int64 (no overflow below 2^62).
  if (p->B > 65535)  // the CUDA kernel's grid has a row per y index
    return MN_INVALID("%s: logits must have at most 65535 rows, got shape %s", op, ShapeStr(logits.shape).c_str());
  if (p->V < 1 || p->V > (int64_t(1) << 32))
    return MN_INVALID("%s: logits must be [B, V] with 1 <= V <= 2^32, got shape %s", op, ShapeStr(logits.shape).c_str());
  if (kv_pos.shape[0] != p->B)
    return MN_INVALID("%s: kv_pos must be [%lld] (one per row of logits %s), got shape %s", op, (long long)p->B,
                      ShapeStr(logits.shape).c_str(), ShapeStr(kv_pos.shape).c_str());
  if (token_log.shape[0] != p->B || p->n < 1)
    return MN_INVALID("%s: token_log must be [%lld, n] with n >= 1, got shape %s", op, (long long)p->B, ShapeStr(token_log.shape).c_str());
  int64_t cells = 0;
  if (__builtin_mul_overflow(p->B, p->V, &cells) || __builtin_mul_overflow(p->B, p->n, &cells))
    return MN_INVALID("%s: logits %s and token_log %s are too large", op, ShapeStr(logits.shape).c_str(), ShapeStr(token_log.shape).c_str());
  return nullptr;
}

OrtStatus* PrepareGreedyStep(OrtKernelContext* ctx, GreedyStepCall* c) {
  MN_RETURN_IF(GetInput(ctx, 0, &c->logits));
  MN_RETURN_IF(GetInput(ctx, 1, &c->kv_pos));
  MN_RETURN_IF(GetInput(ctx, 2, &c->token_log));
  MN_RETURN_IF(CheckGreedyStep(c->logits, c->kv_pos, c->token_log, &c->p));
  void *token = nullptr, *next_pos = nullptr, *next_log = nullptr;
  MN_RETURN_IF(GetOutput(ctx, 0, {c->p.B}, &token));
  MN_RETURN_IF(GetOutput(ctx, 1, {c->p.B}, &next_pos));
  MN_RETURN_IF(GetOutput(ctx, 2, {c->p.B, c->p.n}, &next_log));
  c->token = static_cast<uint32_t*>(token);
  c->next_pos = static_cast<uint32_t*>(next_pos);
  c->next_log = static_cast<uint32_t*>(next_log);
  return nullptr;
}

}  // namespace mn
