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

OrtStatus* CheckRows(const char* op, const CrossEntropyProblem& p) {
  if (p.R > 0x7fffffff) return MN_INVALID("%s: %lld rows is too many for the CUDA kernel (at most 2^31 - 1)", op, (long long)p.R);
  return nullptr;
}

OrtStatus* ForwardCuda(OrtKernelContext* ctx, const CrossEntropyRun& run) {
  const CrossEntropyProblem& p = run.p;
  MN_RETURN_IF(CheckRows(run.op, p));
  void* stream = nullptr;
  MN_RETURN_IF(Stream(ctx, &stream));
  return Cuda(run.op, mn_cuda_sparse_ce_forward(DType(p.type), run.in[0].data, DevicePos(run.in[1]), p.R, p.C, p.ignore, run.loss,
                                                run.lse, stream));
}

OrtStatus* GradCuda(OrtKernelContext* ctx, const CrossEntropyRun& run) {
  const CrossEntropyProblem& p = run.p;
  MN_RETURN_IF(CheckRows(run.op, p));
  void* stream = nullptr;
  MN_RETURN_IF(Stream(ctx, &stream));
  return Cuda(run.op, mn_cuda_sparse_ce_backward(DType(p.type), run.in[0].data, DevicePos(run.in[1]), run.in[2].f32(),
                                                 run.in[3].f32(), p.R, p.C, p.ignore, run.dlogits, stream));
}

}  // namespace

void AddCudaLossOps(std::vector<OpDef*>* ops) {
  AddCrossEntropyOps(ops, "CUDAExecutionProvider", CreateCrossEntropyKernel<false, ForwardCuda>,
                     CreateCrossEntropyKernel<true, GradCuda>);
}

}  // namespace mn
