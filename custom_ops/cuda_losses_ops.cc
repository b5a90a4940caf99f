// CUDAExecutionProvider registration of com.meganeura.SparseCrossEntropy / SparseCrossEntropyGrad
// (the kernels: cuda_losses.cu). Types and shapes are checked on the host from the tensors' metadata;
// the labels, log-sum-exp and scale stay in device memory and are read by the kernels only: nothing
// is copied or synchronised, so the launches replay inside a captured CUDA graph. A label out of
// range is therefore not an ORT error here: the kernels write NaN for that row (cuda_losses.h).
#include <vector>

#include "cuda_glue.h"
#include "cuda_losses.h"
#include "losses_ops.h"

namespace mn {
namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
// Loss terms, log-sum-exp and scale are float32 whatever T is (FP32: not one of the loop's types).
constexpr auto FP32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

OrtStatus* CheckRows(const char* op, const CrossEntropyProblem& p) {
  if (p.R > 0x7fffffff) return MN_INVALID("%s: %lld rows is too many for the CUDA kernel (at most 2^31 - 1)", op, (long long)p.R);
  return nullptr;
}

class SparseCrossEntropyCuda : public Kernel {
 public:
  explicit SparseCrossEntropyCuda(int64_t ignore) : ignore_(ignore) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    int64_t ignore = -1;
    MN_RETURN_IF(ReadIgnoreIndex(info, false, &ignore));
    *out = new SparseCrossEntropyCuda(ignore);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    CrossEntropyProblem p;
    std::vector<Tensor> in;
    MN_RETURN_IF(CheckCrossEntropy(ctx, false, ignore_, &p, &in));
    MN_RETURN_IF(CheckRows("SparseCrossEntropy", p));
    float *loss = nullptr, *lse = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, {p.R}, &loss));
    MN_RETURN_IF(GetOutput(ctx, 1, {p.R}, &lse));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("SparseCrossEntropy",
                mn_cuda_sparse_ce_forward(DType(p.type), in[0].data, DevicePos(in[1]), p.R, p.C, p.ignore, loss, lse, stream));
  }

 private:
  int64_t ignore_;
};

class SparseCrossEntropyGradCuda : public Kernel {
 public:
  explicit SparseCrossEntropyGradCuda(int64_t ignore) : ignore_(ignore) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    int64_t ignore = -1;
    MN_RETURN_IF(ReadIgnoreIndex(info, true, &ignore));
    *out = new SparseCrossEntropyGradCuda(ignore);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    CrossEntropyProblem p;
    std::vector<Tensor> in;
    MN_RETURN_IF(CheckCrossEntropy(ctx, true, ignore_, &p, &in));
    MN_RETURN_IF(CheckRows("SparseCrossEntropyGrad", p));
    void* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &out));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("SparseCrossEntropyGrad", mn_cuda_sparse_ce_backward(DType(p.type), in[0].data, DevicePos(in[1]), in[2].f32(), in[3].f32(),
                                                                     p.R, p.C, p.ignore, out, stream));
  }

 private:
  int64_t ignore_;
};

}  // namespace

void AddCudaLossOps(std::vector<OpDef*>* ops) {
  const char* ep = "CUDAExecutionProvider";
  // in_cpu: labels, lse and scale are device memory (no Memcpy node: CUDA-graph capturable).
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type of the logits (the table's half_types)
    ops->push_back(new OpDef("SparseCrossEntropy", ep, {T, ANY}, {FP32, FP32}, {false, false}, {false, false},
                             SparseCrossEntropyCuda::Create, 0));
    ops->back()->InferOutputShapeFn = InferRowShapes;  // float32 [R] outputs, not the logits' shape
    ops->push_back(new OpDef("SparseCrossEntropyGrad", ep, {T, ANY, FP32, FP32}, {T}, {false, false, false, false},
                             {false, false, false, false}, SparseCrossEntropyGradCuda::Create, 0));
  }
}

}  // namespace mn
