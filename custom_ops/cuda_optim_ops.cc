// CUDAExecutionProvider registration of com.meganeura.AdamUpdate (the kernel: cuda_optim.cu).
// Every input stays in device memory (hyper-parameters included): no Memcpy node, no sync. The
// host side per parameter is what ORT requires (its four inputs read, its three outputs allocated);
// the pointers are gathered into one list and the kernel updates all parameters in a few launches.
#include <vector>

#include "cuda_kernels.h"
#include "op_common.h"

namespace mn {
namespace {

constexpr const char* kOp = "AdamUpdate";
constexpr size_t kHyper = kAdamHyper;

class AdamUpdateCuda : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new AdamUpdateCuda();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    size_t n = 0;
    MN_RETURN_IF(AdamUpdateArity(ctx, &n));
    const float* hyper[kHyper];
    for (size_t i = 0; i < kHyper; ++i) {
      Tensor t;
      MN_RETURN_IF(GetInput(ctx, i, &t));
      if (t.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || t.numel() != 1)
        return MN_INVALID("%s: hyper-parameter input %zu must be a [1] float tensor, got shape %s", kOp, i, ShapeStr(t.shape).c_str());
      hyper[i] = t.f32();
    }
    void* stream = nullptr;
    MN_RETURN_IF(g_api->KernelContext_GetGPUComputeStream(ctx, &stream));
    std::vector<MnAdamTensor> tensors(n);
    Tensor t[4];
    for (size_t k = 0; k < n; ++k) {
      for (size_t j = 0; j < 4; ++j) {
        MN_RETURN_IF(GetInput(ctx, kHyper + 4 * k + j, &t[j]));
        if (t[j].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || t[j].shape != t[0].shape)
          return MN_INVALID("%s: p, g, m, v of parameter %zu must be float tensors of one shape, got %s and %s", kOp, k,
                            ShapeStr(t[0].shape).c_str(), ShapeStr(t[j].shape).c_str());
      }
      MnAdamTensor& a = tensors[k];
      a = {t[0].f32(), t[1].f32(), t[2].f32(), t[3].f32(), nullptr, nullptr, nullptr, t[0].numel()};
      MN_RETURN_IF(GetOutput(ctx, 3 * k, t[0].shape, &a.p2));
      MN_RETURN_IF(GetOutput(ctx, 3 * k + 1, t[0].shape, &a.m2));
      MN_RETURN_IF(GetOutput(ctx, 3 * k + 2, t[0].shape, &a.v2));
    }
    const int code = mn_cuda_adam_update_multi_f32(hyper, tensors.data(), tensors.size(), stream);
    if (code) return Error(ORT_EP_FAIL, "%s: CUDA error %d (%s)", kOp, code, mn_cuda_error_string(code));
    return nullptr;
  }
};

}  // namespace

void AddCudaOptimOps(std::vector<OpDef*>* ops) { ops->push_back(NewAdamUpdateOpDef("CUDAExecutionProvider", AdamUpdateCuda::Create)); }

}  // namespace mn
