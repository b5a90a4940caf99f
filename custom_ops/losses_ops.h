// com.meganeura.SparseCrossEntropy / SparseCrossEntropyGrad (meganeura_onnx/ops/losses.py declares
// them): the kernel, its attribute and input checks and the registration, shared by the CPU kernels
// (cpu_losses.cc, which defines the shared parts) and the CUDA glue (cuda_losses_ops.cc).
//
//   SparseCrossEntropy(logits [R, C] T, labels [R] int) -> loss_rows [R] f32, lse [R] f32
//     lse[r] = log(sum_c exp(logits[r, c])); loss_rows[r] = lse[r] - logits[r, labels[r]], or 0 when
//     labels[r] == ignore_index.
//   SparseCrossEntropyGrad(logits [R, C] T, labels [R] int, lse [R] f32, scale [1] f32) -> dlogits [R, C] T
//     dlogits[r, c] = (exp(logits[r, c] - lse[r]) - (c == labels[r])) * scale, or 0 when ignored.
// T is float32, float16 or bfloat16 (computed in float32). ignore_index -1: no label is ignored.
#pragma once

#include <vector>

#include "op_common.h"

namespace mn {

struct CrossEntropyProblem {
  int64_t R, C, ignore;
  ONNXTensorElementDataType type;
};
// One run of SparseCrossEntropy (grad = false) or SparseCrossEntropyGrad (grad = true), its inputs'
// types and shapes checked and its outputs allocated: what a backend's computation receives.
struct CrossEntropyRun {
  const char* op;
  CrossEntropyProblem p;
  std::vector<Tensor> in;   // logits, labels; lse and scale too for the gradient
  float* loss = nullptr;    // forward: loss_rows [R]
  float* lse = nullptr;     // forward: lse [R]
  void* dlogits = nullptr;  // gradient: [R, C] of the logits' type
};
// A backend's computation of one op (its own checks first: host labels on the CPU, row count on CUDA).
using CrossEntropyCompute = OrtStatus* (*)(OrtKernelContext* ctx, const CrossEntropyRun& run);

// grad: SparseCrossEntropyGrad's attribute, else SparseCrossEntropy's; ignore_index in [-1, 2^32 - 1].
OrtStatus* ReadIgnoreIndex(const OrtKernelInfo* info, bool grad, int64_t* ignore);
// Host labels: every label that is not ignore_index must lie in [0, C).
OrtStatus* CheckLabels(const char* op, const Tensor& labels, const CrossEntropyProblem& p);

// The kernel of either op on any backend: ignore_index read once; per run the inputs checked (types
// and shapes only, never the labels' values: they may be in device memory), the outputs allocated,
// then `compute`.
class CrossEntropyKernel : public Kernel {
 public:
  CrossEntropyKernel(bool grad, int64_t ignore, CrossEntropyCompute compute) : grad_(grad), ignore_(ignore), compute_(compute) {}
  OrtStatus* Compute(OrtKernelContext* ctx) override;

 private:
  bool grad_;
  int64_t ignore_;
  CrossEntropyCompute compute_;
};
template <bool kGrad, CrossEntropyCompute kCompute>
OrtStatus* CreateCrossEntropyKernel(const OrtKernelInfo* info, Kernel** out) {
  int64_t ignore = -1;
  MN_RETURN_IF(ReadIgnoreIndex(info, kGrad, &ignore));
  *out = new CrossEntropyKernel(kGrad, ignore, kCompute);
  return nullptr;
}

// Registers both ops on `ep`, one pair per element type of the logits (the table's half_types);
// labels, lse and scale stay in the provider's memory (on CUDA: no Memcpy node, graph-capturable).
void AddCrossEntropyOps(std::vector<OpDef*>* ops, const char* ep, KernelFactory forward, KernelFactory grad);

void AddCpuLossOps(std::vector<OpDef*>* ops);
void AddCudaLossOps(std::vector<OpDef*>* ops);

}  // namespace mn
