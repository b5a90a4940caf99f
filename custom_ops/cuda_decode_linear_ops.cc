// CUDAExecutionProvider registrations of RMSNormLinear, RMSNormSwiGLU and LinearResidual (ORT API code
// only; the kernels are in cuda_decode_linear.cu, the checks shared with the CPU kernels in decode_linear.h). Inputs are checked on the host from their shapes (no device read, no
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

// The K bound of the CUDA kernels (x's rows as float32 in shared memory), named in the error.
OrtStatus* CheckCudaK(const char* op, const Tensor& x, int64_t K) {
  if (K <= MN_NORM_LINEAR_MAX_K) return nullptr;
  return MN_INVALID("%s: x has %lld features (shape %s); the CUDA kernel takes at most %d", op, (long long)K, ShapeStr(x.shape).c_str(),
                    MN_NORM_LINEAR_MAX_K);
}

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
    NormLinearCall c;
    MN_RETURN_IF(PrepareNormLinear(ctx, a_, swiglu_, &c));
    MN_RETURN_IF(CheckCudaK(op, c.x, c.K));
    if (c.M == 0) return nullptr;
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    const int dtype = DType(c.type);
    if (swiglu_)
      return Cuda(op, mn_cuda_rms_norm_swiglu(dtype, c.x.data, c.gamma.data, c.M, c.K, a_.epsilon, a_.trans_b, c.ws[0].data,
                                              c.ws[1].data, c.N[0], c.outs[0], stream));
    std::vector<const void*> w;
    for (const Tensor& t : c.ws) w.push_back(t.data);
    return Cuda(op, mn_cuda_rms_norm_linear(dtype, c.x.data, c.gamma.data, c.M, c.K, a_.epsilon, a_.trans_b, static_cast<int>(w.size()),
                                            w.data(), c.N.data(), c.outs.data(), stream));
  }

 private:
  NormLinearAttrs a_;
  bool swiglu_;
};

class LinearResidualCuda : public Kernel {
 public:
  explicit LinearResidualCuda(bool trans_b) : trans_b_(trans_b) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    bool trans_b = false;
    MN_RETURN_IF(ReadLinearResidualAttrs(info, &trans_b));
    *out = new LinearResidualCuda(trans_b);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    LinearResidualCall c;
    MN_RETURN_IF(PrepareLinearResidual(ctx, trans_b_, &c));
    MN_RETURN_IF(CheckCudaK("LinearResidual", c.x, c.K));
    if (c.M == 0 || c.N == 0) return nullptr;
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("LinearResidual", mn_cuda_linear_residual(DType(c.type), c.x.data, c.w.data, c.residual.data, c.M, c.K, c.N, trans_b_,
                                                          c.y, stream));
  }

 private:
  bool trans_b_;
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
    ops->push_back(new OpDef("LinearResidual", ep, {T, T, T}, {T}, {false, false, false}, {false, false, false}, LinearResidualCuda::Create, 2));
  }
}

}  // namespace mn
