// CUDAExecutionProvider registration of com.meganeura.FlashAttention / FlashAttentionGrad (the
// kernels: cuda_flash.cu). Shapes are checked on the host from the tensors' metadata; nothing is
// copied or synchronised, so the launches replay inside a captured CUDA graph.
#include <vector>

#include "cuda_glue.h"
#include "flash_ops.h"

namespace mn {
namespace {

class FlashAttentionCuda : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    FlashAttrs a;
    MN_RETURN_IF(ReadFlashAttrs(info, false, &a));
    *out = new FlashAttentionCuda(a);
    return nullptr;
  }
  explicit FlashAttentionCuda(const FlashAttrs& a) : a_(a) {}
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    FlashProblem p;
    std::vector<Tensor> in;
    MN_RETURN_IF(CheckFlash("FlashAttention", a_, ctx, false, &p, &in));
    void* y = nullptr;
    float* lse = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &y));
    MN_RETURN_IF(GetOutput(ctx, 1, {p.B, p.H, p.T}, &lse));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("FlashAttention", mn_cuda_flash_attention(DType(p.type), in[0].data, in[1].data, in[2].data, y, lse, p.B, p.T, p.S,
                                                          p.H, p.KVH, p.hd, p.causal, stream));
  }

 private:
  FlashAttrs a_;
};

class FlashAttentionGradCuda : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    FlashAttrs a;
    MN_RETURN_IF(ReadFlashAttrs(info, true, &a));
    *out = new FlashAttentionGradCuda(a);
    return nullptr;
  }
  explicit FlashAttentionGradCuda(const FlashAttrs& a) : a_(a) {}
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    FlashProblem p;
    std::vector<Tensor> in;
    MN_RETURN_IF(CheckFlash("FlashAttentionGrad", a_, ctx, true, &p, &in));
    void *dq = nullptr, *dk = nullptr, *dv = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &dq));
    MN_RETURN_IF(GetOutput(ctx, 1, in[1].shape, &dk));
    MN_RETURN_IF(GetOutput(ctx, 2, in[2].shape, &dv));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("FlashAttentionGrad", mn_cuda_flash_attention_grad(DType(p.type), in[0].data, in[1].data, in[2].data, in[3].data,
                                                                   in[4].data, in[5].f32(), dq, dk, dv, p.B, p.T, p.S, p.H, p.KVH,
                                                                   p.hd, p.causal, stream));
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

void AddCudaFlashOps(std::vector<OpDef*>* ops) {
  const char* ep = "CUDAExecutionProvider";
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(new OpDef("FlashAttention", ep, {T, T, T}, {T, FP32}, {false, false, false}, {false, false, false},
                             FlashAttentionCuda::Create, 0));
    ops->push_back(new OpDef("FlashAttentionGrad", ep, {T, T, T, T, T, FP32}, {T, T, T}, {false, false, false, false, false, false},
                             {false, false, false, false, false, false}, FlashAttentionGradCuda::Create, 0));
  }
}

}  // namespace mn
