// CUDAExecutionProvider registrations of RMSNormLinear and RMSNormSwiGLU (ORT API code only; the kernels
// are in cuda_decode_linear.cu). Inputs are checked on the host from their shapes (no device read, no
// sync: CUDA-graph capturable); the launch covers every weight of the node.
#include <vector>

#include "cuda_decode_linear.h"
#include "cuda_glue.h"
#include "decode_linear.h"

namespace mn {
namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;

class NormLinearCuda : public Kernel {
 public:
  NormLinearCuda(const NormLinearAttrs& a, bool swiglu) : a_(a), swiglu_(swiglu) {}
  static OrtStatus* Create(const OrtKernelInfo* info, bool swiglu, Kernel** out) {
    NormLinearAttrs a;
    MN_RETURN_IF(ReadNormLinearAttrs(info, swiglu, &a));
    *out = new NormLinearCuda(a, swiglu);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    const char* op = swiglu_ ? "RMSNormSwiGLU" : "RMSNormLinear";
    Tensor x, gamma;
    std::vector<Tensor> ws;
    NormLinearProblem p;
    MN_RETURN_IF(ReadNormLinearInputs(ctx, op, a_, &x, &gamma, &ws, &p));
    MN_RETURN_IF(CheckSwiGLUWidths(swiglu_, ws, p));
    if (p.K > MN_NORM_LINEAR_MAX_K)
      return MN_INVALID("%s: x has %lld features (shape %s); the CUDA kernel takes at most %d", op, (long long)p.K,
                        ShapeStr(x.shape).c_str(), MN_NORM_LINEAR_MAX_K);
    std::vector<void*> outs(swiglu_ ? 1 : ws.size());
    for (size_t i = 0; i < outs.size(); ++i) MN_RETURN_IF(GetOutput(ctx, i, {p.M, p.N[i]}, &outs[i]));
    if (p.M == 0) return nullptr;
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    if (swiglu_)
      return Cuda(op, mn_cuda_rms_norm_swiglu(DType(p.type), x.data, gamma.data, p.M, p.K, a_.epsilon, a_.trans_b, ws[0].data,
                                              ws[1].data, p.N[0], outs[0], stream));
    std::vector<const void*> w;
    for (const Tensor& t : ws) w.push_back(t.data);
    return Cuda(op, mn_cuda_rms_norm_linear(DType(p.type), x.data, gamma.data, p.M, p.K, a_.epsilon, a_.trans_b,
                                            static_cast<int>(w.size()), w.data(), p.N.data(), outs.data(), stream));
  }

 private:
  NormLinearAttrs a_;
  bool swiglu_;
};

// The factories under the names the registration rows use (tests/test_custom_op_schema.py parses them).
struct RMSNormLinearCuda {
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return NormLinearCuda::Create(info, false, out); }
};
struct RMSNormSwiGLUCuda {
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return NormLinearCuda::Create(info, true, out); }
};

}  // namespace

void AddCudaDecodeLinearOps(std::vector<OpDef*>* ops) {
  const char* ep = "CUDAExecutionProvider";
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(NewRMSNormLinearOpDef(ep, T, RMSNormLinearCuda::Create));
    OpDef* swiglu = new OpDef("RMSNormSwiGLU", ep, {T, T, T, T}, {T}, {false, false, false, false}, {false, false, false, false},
                              RMSNormSwiGLUCuda::Create, 0);
    InferNormLinearShapes(swiglu);
    ops->push_back(swiglu);
  }
}

}  // namespace mn
