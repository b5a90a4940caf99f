// com.meganeura RopeCachedAttention on the CPU, and the attribute reading and checks it shares with the
// CUDA glue (rope_attention.h). The CPU kernel runs the unfused kernels' arithmetic in sequence: the
// new key rows rotated straight into the cache (RopeCacheWrite's), the value rows copied (CacheWrite's),
// the query rows rotated into a buffer of the element type (Rope's), then CachedAttention's work.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_elements.h"
#include "cpu_math.h"
#include "cpu_parallel.h"
#include "rope_attention.h"

namespace mn {

OrtStatus* ReadRopeAttnAttrs(const OrtKernelInfo* info, RopeAttnAttrs* a) {
  AttnAttrs& h = a->heads;
  MN_RETURN_IF(AttrInt(info, "RopeCachedAttention", "num_heads", &h.num_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "RopeCachedAttention", "num_kv_heads", &h.num_kv_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "RopeCachedAttention", "head_dim", &h.head_dim, nullptr));
  MN_RETURN_IF(AttrFloat(info, "RopeCachedAttention", "theta", &a->theta, nullptr));
  const int64_t one = 1;
  MN_RETURN_IF(AttrInt(info, "RopeCachedAttention", "check_positions", &h.check_positions, &one));
  MN_RETURN_IF(CheckAttnAttrs("RopeCachedAttention", h));
  if (h.head_dim % 2 != 0)
    return MN_INVALID("RopeCachedAttention: attribute head_dim must be even and in [2, 1024], got %lld", (long long)h.head_dim);
  if (!(a->theta > 0.0f) || !std::isfinite(a->theta))
    return MN_INVALID("RopeCachedAttention: attribute theta must be a positive finite number, got %g", (double)a->theta);
  return nullptr;
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

namespace {

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

class RopeCachedAttentionCpu : public Kernel {
 public:
  explicit RopeCachedAttentionCpu(const RopeAttnAttrs& a) : a_(a), inv_freq_(a.heads.head_dim / 2) {
    RopeInvFreq(a.theta, a.heads.head_dim, inv_freq_.data());
  }
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    RopeAttnAttrs a;
    MN_RETURN_IF(ReadRopeAttnAttrs(info, &a));
    *out = new RopeCachedAttentionCpu(a);
    return nullptr;
  }
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

 private:
  RopeAttnAttrs a_;
  std::vector<float> inv_freq_;
};

}  // namespace

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
  }
}

}  // namespace mn
