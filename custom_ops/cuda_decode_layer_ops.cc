// CUDAExecutionProvider registration of DecodeLayer (ORT API code only; the kernel is in
// cuda_decode_layer.cu behind cuda_decode_layer.h, the checks shared with the CPU kernel in
// decode_layer.h). kv_pos is device memory: with check_positions = 1, outside CUDA-graph capture, it is
// read back and validated as RopeCachedAttention does (an ORT error naming the value); with
// check_positions = 0 or under capture the kernel guards on the device (an invalid position: that
// sequence's rows of y are NaN and its caches are not written).
#include <vector>

#include "cuda_decode_layer.h"
#include "cuda_decode_linear.h"
#include "cuda_glue.h"
#include "decode_layer.h"

namespace mn {
namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;

// The CUDA kernels' size limits (those of the five fused kernels the op falls back to).
OrtStatus* CheckCudaLimits(const DecodeLayerProblem& p) {
  const int64_t widths[3] = {p.D, p.I, p.H * p.hd};
  const char* names[3] = {"x's width D", "the intermediate size (w_gate's rows)", "num_heads * head_dim"};
  for (int i = 0; i < 3; ++i)
    if (widths[i] > MN_NORM_LINEAR_MAX_K)
      return MN_INVALID("DecodeLayer: %s is %lld; the CUDA kernel takes at most %d", names[i], (long long)widths[i], MN_NORM_LINEAR_MAX_K);
  if (p.R > 65535 || p.R * p.H > (int64_t(1) << 31) - 1)
    return MN_INVALID("DecodeLayer: %lld rows x num_heads %lld is too large for the CUDA kernel", (long long)p.R, (long long)p.H);
  return nullptr;
}

class DecodeLayerCuda : public Kernel {
 public:
  explicit DecodeLayerCuda(const DecodeLayerAttrs& a) : a_(a), inv_freq_(a.heads.head_dim / 2), state_(mn_cuda_decode_layer_new()) {
    RopeInvFreq(a.theta, a.heads.head_dim, inv_freq_.data());
  }
  ~DecodeLayerCuda() override { mn_cuda_decode_layer_free(state_); }
  DecodeLayerCuda(const DecodeLayerCuda&) = delete;
  DecodeLayerCuda& operator=(const DecodeLayerCuda&) = delete;

  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    DecodeLayerAttrs a;
    MN_RETURN_IF(ReadDecodeLayerAttrs(info, &a));
    if (a.heads.head_dim / 2 > MN_ROPE_MAX_HALF)
      return MN_INVALID("DecodeLayer: head_dim %lld exceeds the CUDA kernel's limit %d", (long long)a.heads.head_dim, 2 * MN_ROPE_MAX_HALF);
    *out = new DecodeLayerCuda(a);
    return nullptr;
  }

  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor in[kDlInputs];
    for (size_t i = 0; i < kDlInputs; ++i) MN_RETURN_IF(GetInput(ctx, i, &in[i]));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    HostPos h;
    MN_RETURN_IF(ReadBack("DecodeLayer", "kv_pos", in[kDlKvPos], a_.heads.check_positions != 0, stream, &h));
    Tensor checked[kDlInputs];
    for (size_t i = 0; i < kDlInputs; ++i) checked[i] = in[i];
    if (!h.device_only) checked[kDlKvPos] = h.host;
    DecodeLayerProblem p;
    MN_RETURN_IF(CheckDecodeLayer(a_, checked, &p, /*host_positions=*/!h.device_only));
    MN_RETURN_IF(CheckCudaLimits(p));
    void *y = nullptr, *kc = nullptr, *vc = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[kDlX].shape, &y));
    MN_RETURN_IF(GetOutput(ctx, 1, in[kDlKCache].shape, &kc));
    MN_RETURN_IF(GetOutput(ctx, 2, in[kDlVCache].shape, &vc));
    if (p.B * p.max_seq * p.KVH > 0) {
      if (kc != in[kDlKCache].data) CountCacheCopy();
      if (vc != in[kDlVCache].data) CountCacheCopy();
    }
    MnDecodeLayer a{};
    a.dtype = DType(p.type);
    a.x = in[kDlX].data, a.attn_norm = in[kDlAttnNorm].data, a.w_q = in[kDlWq].data, a.w_k = in[kDlWk].data, a.w_v = in[kDlWv].data;
    a.w_o = in[kDlWo].data, a.mlp_norm = in[kDlMlpNorm].data, a.w_gate = in[kDlWgate].data, a.w_up = in[kDlWup].data;
    a.w_down = in[kDlWdown].data, a.k_cache = in[kDlKCache].data, a.v_cache = in[kDlVCache].data;
    a.k_out = kc, a.v_out = vc, a.y = y;
    a.B = p.B, a.S = p.S, a.D = p.D, a.H = p.H, a.KVH = p.KVH, a.head_dim = p.hd, a.I = p.I, a.max_seq = p.max_seq;
    a.eps = a_.epsilon;
    a.trans_b = a_.trans_b ? 1 : 0;
    a.kv_pos = DevicePos(in[kDlKvPos]);
    a.inv_freq = inv_freq_.data();
    return Cuda("DecodeLayer", mn_cuda_decode_layer(&a, state_, stream));
  }

 private:
  DecodeLayerAttrs a_;
  std::vector<float> inv_freq_;
  MnDecodeLayerState* state_;  // the workspace (barrier, partials, intermediates), allocated once per shape and stream
};

}  // namespace

void AddCudaDecodeLayerOps(std::vector<OpDef*>* ops) {
  for (const auto T : {F32, F16, BF16})  // one registration per element type
    ops->push_back(NewDecodeLayerOpDef("CUDAExecutionProvider", T, DecodeLayerCuda::Create));
}

}  // namespace mn
