// CUDAExecutionProvider registration of com.meganeura.FlashAttention / FlashAttentionGrad (the
// kernels: cuda_flash.cu). Shapes are checked on the host from the tensors' metadata; nothing is
// copied or synchronised, so the launches replay inside a captured CUDA graph.
#include <vector>

#include "cuda_kernels.h"
#include "flash_ops.h"

namespace mn {
namespace {

OrtStatus* CudaStatus(const char* op, int code) {
  return code ? Error(ORT_EP_FAIL, "%s: CUDA error %d (%s)", op, code, mn_cuda_error_string(code)) : nullptr;
}

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
    float *y = nullptr, *lse = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &y));
    MN_RETURN_IF(GetOutput(ctx, 1, {p.B, p.H, p.T}, &lse));
    void* stream = nullptr;
    MN_RETURN_IF(g_api->KernelContext_GetGPUComputeStream(ctx, &stream));
    return CudaStatus("FlashAttention", mn_cuda_flash_attention_f32(in[0].f32(), in[1].f32(), in[2].f32(), y, lse, p.B, p.T, p.S,
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
    float *dq = nullptr, *dk = nullptr, *dv = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &dq));
    MN_RETURN_IF(GetOutput(ctx, 1, in[1].shape, &dk));
    MN_RETURN_IF(GetOutput(ctx, 2, in[2].shape, &dv));
    void* stream = nullptr;
    MN_RETURN_IF(g_api->KernelContext_GetGPUComputeStream(ctx, &stream));
    return CudaStatus("FlashAttentionGrad",
                      mn_cuda_flash_attention_grad_f32(in[0].f32(), in[1].f32(), in[2].f32(), in[3].f32(), in[4].f32(), in[5].f32(),
                                                       dq, dk, dv, p.B, p.T, p.S, p.H, p.KVH, p.hd, p.causal, stream));
  }

 private:
  FlashAttrs a_;
};

constexpr ONNXTensorElementDataType F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

}  // namespace

void AddCudaFlashOps(std::vector<OpDef*>* ops) {
  const char* ep = "CUDAExecutionProvider";
  ops->push_back(new OpDef("FlashAttention", ep, {F32, F32, F32}, {F32, F32}, {false, false, false}, {false, false, false},
                           FlashAttentionCuda::Create, 0));
  ops->push_back(new OpDef("FlashAttentionGrad", ep, {F32, F32, F32, F32, F32, F32}, {F32, F32, F32},
                           {false, false, false, false, false, false}, {false, false, false, false, false, false},
                           FlashAttentionGradCuda::Create, 0));
}

}  // namespace mn
