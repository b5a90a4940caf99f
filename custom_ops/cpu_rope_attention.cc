// com.meganeura RopeCachedAttention on the CPU, and the attribute reading and checks it shares with the
// CUDA glue (rope_attention.h). The CPU kernel runs the unfused kernels' arithmetic in sequence: the
// new key rows rotated straight into the cache (RopeCacheWrite's), the value rows copied (CacheWrite's),
// the query rows rotated into a buffer of the element type (Rope's), then CachedAttention's work.
#include <cmath>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_elements.h"
#include "cpu_math.h"
#include "cpu_parallel.h"
#include "rope_attention.h"

namespace mn {

// The head attributes' and theta's checks of both rope + cache ops. (Their readers below stay apart: the
// schema test finds the attributes a kernel reads by its literal AttrInt(info, "<Op>", ...) calls.)
static OrtStatus* CheckRopeAttnAttrs(const char* op, const RopeAttnAttrs& a) {
  MN_RETURN_IF(CheckAttnAttrs(op, a.heads));
  if (a.heads.head_dim % 2 != 0)
    return MN_INVALID("%s: attribute head_dim must be even and in [2, 1024], got %lld", op, (long long)a.heads.head_dim);
  if (!(a.theta > 0.0f) || !std::isfinite(a.theta))
    return MN_INVALID("%s: attribute theta must be a positive finite number, got %g", op, (double)a.theta);
  return nullptr;
}

OrtStatus* ReadRopeAttnAttrs(const OrtKernelInfo* info, RopeAttnAttrs* a) {
  AttnAttrs& h = a->heads;
  MN_RETURN_IF(AttrInt(info, "RopeCachedAttention", "num_heads", &h.num_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "RopeCachedAttention", "num_kv_heads", &h.num_kv_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "RopeCachedAttention", "head_dim", &h.head_dim, nullptr));
  MN_RETURN_IF(AttrFloat(info, "RopeCachedAttention", "theta", &a->theta, nullptr));
  const int64_t one = 1;
  MN_RETURN_IF(AttrInt(info, "RopeCachedAttention", "check_positions", &h.check_positions, &one));
  return CheckRopeAttnAttrs("RopeCachedAttention", *a);
}

OrtStatus* CheckRopeCachedAttention(const RopeAttnAttrs& a, const Tensor& q, const Tensor& k_new, const Tensor& v_new,
                                    const Tensor& k_cache, const Tensor& v_cache, const Tensor& kv_pos, AttnProblem* p,
                                    bool host_positions) {
  const char* op = "RopeCachedAttention";
  MN_RETURN_IF(CheckCachedAttention(a.heads, q, k_cache, v_cache, kv_pos, p, host_positions, op));
  const size_t rank = q.shape.size();
  MN_RETURN_IF(CheckTensor(op, "k_new", k_new, q.type, rank));
  MN_RETURN_IF(CheckTensor(op, "v_new", v_new, q.type, rank));
  std::vector<int64_t> rows = q.shape;
  rows.back() = p->KVH * p->hd;
  if (k_new.shape != rows || v_new.shape != rows)
    return MN_INVALID("%s: k_new and v_new must both be %s (q %s has the rows, num_kv_heads * head_dim the width), got %s and %s", op,
                      ShapeStr(rows).c_str(), ShapeStr(q.shape).c_str(), ShapeStr(k_new.shape).c_str(), ShapeStr(v_new.shape).c_str());
  return nullptr;
}

OrtStatus* ReadQkvRopeAttrs(const OrtKernelInfo* info, RopeAttnAttrs* a) {
  AttnAttrs& h = a->heads;
  MN_RETURN_IF(AttrInt(info, "QKVRopeCacheWrite", "num_heads", &h.num_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "QKVRopeCacheWrite", "num_kv_heads", &h.num_kv_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "QKVRopeCacheWrite", "head_dim", &h.head_dim, nullptr));
  MN_RETURN_IF(AttrFloat(info, "QKVRopeCacheWrite", "theta", &a->theta, nullptr));
  const int64_t one = 1;
  MN_RETURN_IF(AttrInt(info, "QKVRopeCacheWrite", "check_positions", &h.check_positions, &one));
  return CheckRopeAttnAttrs("QKVRopeCacheWrite", *a);  // bounded: (num_heads + 2 * num_kv_heads) * head_dim cannot overflow
}

OrtStatus* CheckQkvRopeCacheWrite(const RopeAttnAttrs& a, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                                  const Tensor& kv_pos, QkvRopeProblem* p, bool host_positions) {
  const char* op = "QKVRopeCacheWrite";
  const size_t rank = qkv.present && qkv.shape.size() == 3 ? 3 : 2;  // [B, T, width] or [T, width]
  MN_RETURN_IF(CheckFloatTensor(op, "qkv", qkv, rank));
  MN_RETURN_IF(CheckTensor(op, "k_cache", k_cache, qkv.type, rank));
  MN_RETURN_IF(CheckTensor(op, "v_cache", v_cache, qkv.type, rank));
  const size_t r0 = rank - 2;
  p->type = qkv.type;
  p->B = rank == 3 ? qkv.shape[0] : 1;
  p->T = qkv.shape[r0];
  p->H = a.heads.num_heads;
  p->KVH = a.heads.num_kv_heads;
  p->hd = a.heads.head_dim;
  p->max_seq = k_cache.shape[r0];
  const int64_t kvw = p->KVH * p->hd, width = p->H * p->hd + 2 * kvw;
  if (qkv.shape[r0 + 1] != width)
    return MN_INVALID("%s: qkv has shape %s but (num_heads %lld + 2 * num_kv_heads %lld) * head_dim %lld = %lld", op,
                      ShapeStr(qkv.shape).c_str(), (long long)p->H, (long long)p->KVH, (long long)p->hd, (long long)width);
  if (k_cache.shape[r0 + 1] != kvw || (rank == 3 && k_cache.shape[0] != p->B))
    return MN_INVALID("%s: k_cache has shape %s, not [%s max_seq, num_kv_heads %lld * head_dim %lld] for qkv %s", op,
                      ShapeStr(k_cache.shape).c_str(), rank == 3 ? "batch," : "", (long long)p->KVH, (long long)p->hd,
                      ShapeStr(qkv.shape).c_str());
  if (v_cache.shape != k_cache.shape)
    return MN_INVALID("%s: v_cache shape %s differs from k_cache shape %s", op, ShapeStr(v_cache.shape).c_str(),
                      ShapeStr(k_cache.shape).c_str());
  MN_RETURN_IF(CheckPositions(op, "kv_pos", kv_pos, p->B));
  // Never kv_pos + T > max_seq: kv_pos comes from the model and may be near 2^63 (signed overflow).
  if (p->T > p->max_seq)
    return MN_INVALID("%s: qkv has %lld rows, more than the cache length max_seq %lld", op, (long long)p->T, (long long)p->max_seq);
  p->q_shape = qkv.shape;
  p->q_shape.back() = p->H * p->hd;
  p->kv_pos.clear();
  if (!host_positions) return nullptr;
  for (int64_t b = 0; b < p->B; ++b) {
    const int64_t v = IndexAt(kv_pos, b);
    if (v < 0 || v > p->max_seq - p->T)
      return MN_INVALID("%s: kv_pos[%lld] = %lld + T %lld exceeds the cache length max_seq %lld", op, (long long)b, (long long)v,
                        (long long)p->T, (long long)p->max_seq);
    p->kv_pos.push_back(v);
  }
  return nullptr;
}

namespace {

OrtStatus* ReadShapeAttr(OrtShapeInferContext* ctx, const char* name, int64_t* value) {
  const OrtOpAttr* attr = nullptr;
  size_t len = 0;
  OrtStatus* st = g_api->ShapeInferContext_GetAttribute(ctx, name, &attr);
  if (!st) st = g_api->ReadOpAttr(attr, ORT_OP_ATTR_INT, value, sizeof *value, &len);
  return st;  // a missing attribute fails the load with ORT's message
}

// Output 0: qkv's shape with the last dimension num_heads * head_dim; outputs 1 and 2: the caches' shapes.
OrtStatus* ORT_API_CALL InferQkvRopeShapes(const OrtCustomOp*, OrtShapeInferContext* ctx) {
  int64_t heads = 0, hd = 0;
  MN_RETURN_IF(ReadShapeAttr(ctx, "num_heads", &heads));
  MN_RETURN_IF(ReadShapeAttr(ctx, "head_dim", &hd));
  const bool sane = heads > 0 && heads <= kMaxHeads && hd > 0 && hd <= 1024;  // else the kernel's creation refuses them
  if (sane) MN_RETURN_IF(SetShapeLikeInput(ctx, 0, 0, heads * hd, 2, 3));  // other ranks: the kernel reports them
  MN_RETURN_IF(SetShapeLikeInput(ctx, 1, 1, 0, 2, 3));
  return SetShapeLikeInput(ctx, 2, 2, 0, 2, 3);
}

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;

// One row of `width` elements (whole heads of hd) rotated into dst, through float32 for half types.
template <class T>
void Rotate(const T* src, T* dst, int64_t width, int64_t hd, const std::vector<float>& cs, const std::vector<float>& sn, float* buf,
            float* rot) {
  float* y = OutRow(dst, rot);
  RotateHeads(FloatRow(src, width, buf), y, cs.data(), sn.data(), width / hd, hd);
  StoreRow(y, dst, width);
}

template <class T>
OrtStatus* RunRopeCachedAttention(const Pool& ctx, const AttnProblem& p, const float* inv_freq, const T* q, const T* k_new,
                                  const T* v_new, const void* k_cache, const void* v_cache, void* out, T* kc, T* vc) {
  const int64_t kvw = p.KVH * p.hd, qw = p.H * p.hd, cache_bytes = p.B * p.max_seq * kvw * static_cast<int64_t>(sizeof(T));
  if (kc != k_cache) MN_RETURN_IF(CopyCache(ctx, kc, k_cache, cache_bytes));
  if (vc != v_cache) MN_RETURN_IF(CopyCache(ctx, vc, v_cache, cache_bytes));
  const size_t half = static_cast<size_t>(p.hd / 2);
  std::vector<T> q_rot(static_cast<size_t>(p.B * p.T * qw));
  std::vector<float> cs(half), sn(half);
  std::vector<float> buf(std::is_same<T, float>::value ? 0 : qw), rot(buf.size());
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t t = 0; t < p.T; ++t) {  // a decode step: one row per sequence
      const int64_t pos = p.kv_pos[b] + t, row = b * p.T + t, cache_row = b * p.max_seq + pos;
      for (size_t j = 0; j < half; ++j) {  // the same float32 angle as the Rope kernels
        const float ang = static_cast<float>(pos) * inv_freq[j];
        cs[j] = std::cos(ang);
        sn[j] = std::sin(ang);
      }
      Rotate(k_new + row * kvw, kc + cache_row * kvw, kvw, p.hd, cs, sn, buf.data(), rot.data());
      std::memcpy(vc + cache_row * kvw, v_new + row * kvw, sizeof(T) * kvw);
      Rotate(q + row * qw, q_rot.data() + row * qw, qw, p.hd, cs, sn, buf.data(), rot.data());
    }
  return CachedAttentionCpuRun(ctx, p, q_rot.data(), kc, vc, out);
}

class RopeCachedAttentionCpu : public RopeAttnKernel {
 public:
  explicit RopeCachedAttentionCpu(const RopeAttnAttrs& a) : RopeAttnKernel(a) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return CreateAs<RopeCachedAttentionCpu, ReadRopeAttnAttrs>(info, out); }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor in[6];  // q, k_new, v_new, k_cache, v_cache, kv_pos
    for (size_t i = 0; i < 6; ++i) MN_RETURN_IF(GetInput(ctx, i, &in[i]));
    AttnProblem p;
    MN_RETURN_IF(CheckRopeCachedAttention(a_, in[0], in[1], in[2], in[3], in[4], in[5], &p));
    void *out = nullptr, *kc = nullptr, *vc = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &out));
    MN_RETURN_IF(GetOutput(ctx, 1, in[3].shape, &kc));
    MN_RETURN_IF(GetOutput(ctx, 2, in[4].shape, &vc));
    return RopeCachedAttentionCpuRun(ctx, p, inv_freq_.data(), in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, out, kc, vc);
  }
};

// Row t of sequence b: q rotated into q_rot, k rotated into the K cache and v copied into the V cache at row
// kv_pos[b] + t, with Rope's float32 angles (pos * inv_freq[j]) and its rounding of each rotated value.
template <class T>
OrtStatus* RunQkvRope(const Pool& ctx, const QkvRopeProblem& p, const float* inv_freq, const T* qkv, const void* k_cache,
                      const void* v_cache, T* q_rot, T* kc, T* vc) {
  const int64_t kvw = p.KVH * p.hd, qw = p.H * p.hd, width = qw + 2 * kvw, rows = p.B * p.T;
  const int64_t cache_bytes = p.B * p.max_seq * kvw * static_cast<int64_t>(sizeof(T));
  if (kc != k_cache) MN_RETURN_IF(CopyCache(ctx, kc, k_cache, cache_bytes));
  if (vc != v_cache) MN_RETURN_IF(CopyCache(ctx, vc, v_cache, cache_bytes));
  const size_t half = static_cast<size_t>(p.hd / 2);
  Chunks chunks(rows, std::max<int64_t>(1, 16384 / width), 1024);
  return ParallelFor(ctx, static_cast<size_t>(chunks.count), [&](size_t c) {
    std::vector<float> cs(half), sn(half);
    std::vector<float> buf(std::is_same<T, float>::value ? 0 : qw), rot(buf.size());
    for (int64_t row = chunks.begin(c); row < chunks.end(c); ++row) {
      const int64_t b = row / p.T, pos = p.kv_pos[b] + row % p.T, cache_row = b * p.max_seq + pos;
      for (size_t j = 0; j < half; ++j) {  // the same float32 angle as the Rope kernels
        const float ang = static_cast<float>(pos) * inv_freq[j];
        cs[j] = std::cos(ang);
        sn[j] = std::sin(ang);
      }
      const T* src = qkv + row * width;
      Rotate(src, q_rot + row * qw, qw, p.hd, cs, sn, buf.data(), rot.data());
      Rotate(src + qw, kc + cache_row * kvw, kvw, p.hd, cs, sn, buf.data(), rot.data());
      std::memcpy(vc + cache_row * kvw, src + qw + kvw, sizeof(T) * kvw);
    }
  });
}

class QKVRopeCacheWriteCpu : public RopeAttnKernel {
 public:
  explicit QKVRopeCacheWriteCpu(const RopeAttnAttrs& a) : RopeAttnKernel(a) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return CreateAs<QKVRopeCacheWriteCpu, ReadQkvRopeAttrs>(info, out); }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor in[4];  // qkv, k_cache, v_cache, kv_pos
    for (size_t i = 0; i < 4; ++i) MN_RETURN_IF(GetInput(ctx, i, &in[i]));
    QkvRopeProblem p;
    MN_RETURN_IF(CheckQkvRopeCacheWrite(a_, in[0], in[1], in[2], in[3], &p));
    void *q_rot = nullptr, *kc = nullptr, *vc = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, p.q_shape, &q_rot));
    MN_RETURN_IF(GetOutput(ctx, 1, in[1].shape, &kc));
    MN_RETURN_IF(GetOutput(ctx, 2, in[2].shape, &vc));
    return DispatchFloat(p.type, [&](auto tag) {
      using T = decltype(tag);
      return RunQkvRope<T>(ctx, p, inv_freq_.data(), static_cast<const T*>(in[0].data), in[1].data, in[2].data, static_cast<T*>(q_rot),
                           static_cast<T*>(kc), static_cast<T*>(vc));
    });
  }
};

}  // namespace

void UseQkvRopeShapes(OpDef* def) { def->InferOutputShapeFn = InferQkvRopeShapes; }

OrtStatus* RopeCachedAttentionCpuRun(const Pool& ctx, const AttnProblem& p, const float* inv_freq, const void* q,
                                     const void* k_new, const void* v_new, const void* k_cache, const void* v_cache, void* out,
                                     void* kc, void* vc) {
  return DispatchFloat(p.type, [&](auto tag) {
    using T = decltype(tag);
    return RunRopeCachedAttention<T>(ctx, p, inv_freq, static_cast<const T*>(q), static_cast<const T*>(k_new),
                                     static_cast<const T*>(v_new), k_cache, v_cache, out, static_cast<T*>(kc), static_cast<T*>(vc));
  });
}

void AddCpuRopeAttentionOps(std::vector<OpDef*>* ops) {
  const char* ep = "CPUExecutionProvider";
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(new OpDef("RopeCachedAttention", ep, {T, T, T, T, T, ANY}, {T, T, T}, {false, false, false, false, false, false},
                             {false, false, false, false, false, false}, RopeCachedAttentionCpu::Create, 0));
    ops->back()->UseKvCacheOutputs();  // outputs 1, 2: the caches (inputs 3, 4), written in place
    ops->push_back(new OpDef("QKVRopeCacheWrite", ep, {T, T, T, ANY}, {T, T, T}, {false, false, false, false},
                             {false, false, false, false}, QKVRopeCacheWriteCpu::Create, 0));
    ops->back()->UseKvCacheOutputs(/*k_cache_input=*/1);  // outputs 1, 2: the caches (inputs 1, 2), written in place
    UseQkvRopeShapes(ops->back());                        // output 0: [.., T, num_heads * head_dim]
  }
}

}  // namespace mn
