// DecodeLayer's attribute reading, input checks and op descriptor (decode_layer.h), shared by the CPU
// and CUDA kernels.
#include "decode_layer.h"

#include <cmath>

namespace mn {

OrtStatus* ReadDecodeLayerAttrs(const OrtKernelInfo* info, DecodeLayerAttrs* a) {
  AttnAttrs& h = a->heads;
  const int64_t one = 1;
  int64_t trans_b = 1;
  MN_RETURN_IF(AttrInt(info, "DecodeLayer", "num_heads", &h.num_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "DecodeLayer", "num_kv_heads", &h.num_kv_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "DecodeLayer", "head_dim", &h.head_dim, nullptr));
  MN_RETURN_IF(AttrFloat(info, "DecodeLayer", "theta", &a->theta, nullptr));
  MN_RETURN_IF(AttrFloat(info, "DecodeLayer", "epsilon", &a->epsilon, nullptr));
  MN_RETURN_IF(AttrInt(info, "DecodeLayer", "trans_b", &trans_b, &one));
  MN_RETURN_IF(AttrInt(info, "DecodeLayer", "check_positions", &h.check_positions, &one));
  MN_RETURN_IF(CheckAttnAttrs("DecodeLayer", h));
  if (h.head_dim % 2 != 0)
    return MN_INVALID("DecodeLayer: attribute head_dim must be even and in [2, 1024], got %lld", (long long)h.head_dim);
  if (!(a->theta > 0.0f) || !std::isfinite(a->theta))
    return MN_INVALID("DecodeLayer: attribute theta must be a positive finite number, got %g", (double)a->theta);
  if (!(a->epsilon > 0.0f) || !std::isfinite(a->epsilon))
    return MN_INVALID("DecodeLayer: attribute epsilon must be a positive finite number, got %g", (double)a->epsilon);
  if (trans_b != 0 && trans_b != 1) return MN_INVALID("DecodeLayer: attribute trans_b must be 0 or 1, got %lld", (long long)trans_b);
  a->trans_b = trans_b == 1;
  return nullptr;
}

namespace {

constexpr const char* kOp = "DecodeLayer";
const char* const kArgNames[kDlInputs] = {"x", "attn_norm", "w_q", "w_k", "w_v", "w_o", "mlp_norm",
                                          "w_gate", "w_up", "w_down", "k_cache", "v_cache", "kv_pos"};

// Weight `i` of shape [out, in] (trans_b) or [in, out].
OrtStatus* CheckWeight(const Tensor* in, int i, ONNXTensorElementDataType type, bool trans_b, int64_t out, int64_t n_in) {
  const Tensor& w = in[i];
  MN_RETURN_IF(CheckTensor(kOp, kArgNames[i], w, type, 2));
  const std::vector<int64_t> want = trans_b ? std::vector<int64_t>{out, n_in} : std::vector<int64_t>{n_in, out};
  if (w.shape != want)
    return MN_INVALID("%s: weight %s must have shape %s (trans_b=%d), got %s", kOp, kArgNames[i], ShapeStr(want).c_str(), (int)trans_b,
                      ShapeStr(w.shape).c_str());
  return nullptr;
}

OrtStatus* CheckGamma(const Tensor* in, int i, ONNXTensorElementDataType type, int64_t D) {
  MN_RETURN_IF(CheckTensor(kOp, kArgNames[i], in[i], type, 1));
  if (in[i].shape[0] != D)
    return MN_INVALID("%s: %s must have shape [%lld] (x's width), got %s", kOp, kArgNames[i], (long long)D, ShapeStr(in[i].shape).c_str());
  return nullptr;
}

// The rows, the batch and the caches' layout: B sequences of S rows each.
OrtStatus* CheckRowsAndCaches(const Tensor* in, DecodeLayerProblem* p) {
  const Tensor &x = in[kDlX], &kc = in[kDlKCache];
  MN_RETURN_IF(CheckFloatTensor(kOp, "x", x, 2));
  p->type = x.type;
  p->R = x.shape[0];
  p->D = x.shape[1];
  if (p->D == 0) return MN_INVALID("%s: x has shape %s; RMSNorm needs at least one feature", kOp, ShapeStr(x.shape).c_str());
  if (!kc.present || (kc.shape.size() != 2 && kc.shape.size() != 3))
    return MN_INVALID("%s: k_cache must be [max_seq, num_kv_heads * head_dim] or [batch, max_seq, num_kv_heads * head_dim], got %s", kOp,
                      kc.present ? ShapeStr(kc.shape).c_str() : "nothing");
  const size_t rank = kc.shape.size();
  MN_RETURN_IF(CheckTensor(kOp, "k_cache", kc, p->type, rank));
  MN_RETURN_IF(CheckTensor(kOp, "v_cache", in[kDlVCache], p->type, rank));
  p->B = rank == 3 ? kc.shape[0] : 1;
  if (p->B == 0 ? p->R != 0 : p->R % p->B != 0)
    return MN_INVALID("%s: x has %lld rows, not a multiple of the caches' batch %lld (k_cache %s)", kOp, (long long)p->R, (long long)p->B,
                      ShapeStr(kc.shape).c_str());
  p->S = p->B == 0 ? 0 : p->R / p->B;
  p->max_seq = kc.shape[rank - 2];
  return nullptr;
}

}  // namespace

OrtStatus* CheckDecodeLayer(const DecodeLayerAttrs& a, const Tensor* in, DecodeLayerProblem* p, bool host_positions) {
  MN_RETURN_IF(CheckRowsAndCaches(in, p));
  const ONNXTensorElementDataType type = p->type;
  p->H = a.heads.num_heads;
  p->KVH = a.heads.num_kv_heads;
  p->hd = a.heads.head_dim;
  const int64_t q_width = p->H * p->hd, kv_width = p->KVH * p->hd;  // bounded by CheckAttnAttrs: no overflow
  const Tensor& wg = in[kDlWgate];
  MN_RETURN_IF(CheckTensor(kOp, "w_gate", wg, type, 2));
  p->I = a.trans_b ? wg.shape[0] : wg.shape[1];
  MN_RETURN_IF(CheckGamma(in, kDlAttnNorm, type, p->D));
  MN_RETURN_IF(CheckGamma(in, kDlMlpNorm, type, p->D));
  MN_RETURN_IF(CheckWeight(in, kDlWq, type, a.trans_b, q_width, p->D));
  MN_RETURN_IF(CheckWeight(in, kDlWk, type, a.trans_b, kv_width, p->D));
  MN_RETURN_IF(CheckWeight(in, kDlWv, type, a.trans_b, kv_width, p->D));
  MN_RETURN_IF(CheckWeight(in, kDlWo, type, a.trans_b, p->D, q_width));
  MN_RETURN_IF(CheckWeight(in, kDlWgate, type, a.trans_b, p->I, p->D));
  MN_RETURN_IF(CheckWeight(in, kDlWup, type, a.trans_b, p->I, p->D));
  MN_RETURN_IF(CheckWeight(in, kDlWdown, type, a.trans_b, p->D, p->I));
  // The attention part exactly as RopeCachedAttention checks it, on q's [B, S, H*hd] view of the rows.
  Tensor q;
  q.present = true;
  q.type = type;
  q.shape = in[kDlKCache].shape.size() == 3 ? std::vector<int64_t>{p->B, p->S, q_width} : std::vector<int64_t>{p->S, q_width};
  AttnProblem ap;
  MN_RETURN_IF(CheckCachedAttention(a.heads, q, in[kDlKCache], in[kDlVCache], in[kDlKvPos], &ap, host_positions, kOp));
  p->kv_pos = ap.kv_pos;
  return nullptr;
}

OpDef* NewDecodeLayerOpDef(const char* ep, ONNXTensorElementDataType type, KernelFactory factory) {
  const auto T = type;
  std::vector<ONNXTensorElementDataType> in(kDlInputs, T);
  in[kDlKvPos] = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;  // int64, int32 or uint32
  OpDef* def = new OpDef("DecodeLayer", ep, in, {T, T, T}, std::vector<bool>(kDlInputs, false), std::vector<bool>(kDlInputs, false),
                         factory, /*shape_from=*/0);
  def->UseKvCacheOutputs(kDlKCache);  // outputs 1, 2: the caches (inputs 10, 11), written in place
  return def;
}

}  // namespace mn
