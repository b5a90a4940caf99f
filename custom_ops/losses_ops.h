// com.meganeura.SparseCrossEntropy / SparseCrossEntropyGrad (meganeura_onnx/ops/losses.py declares
// them): attributes and input checks shared by the CPU kernels (cpu_losses.cc) and the CUDA glue
// (cuda_losses_ops.cc).
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
// grad: SparseCrossEntropyGrad's attribute, else SparseCrossEntropy's; ignore_index in [-1, 2^32 - 1].
OrtStatus* ReadIgnoreIndex(const OrtKernelInfo* info, bool grad, int64_t* ignore);
// Reads and checks the inputs (2 for the forward, 4 for the gradient): types and shapes only, never
// the labels' values (they may be in device memory).
OrtStatus* CheckCrossEntropy(OrtKernelContext* ctx, bool grad, int64_t ignore, CrossEntropyProblem* p, std::vector<Tensor>* in);
// Host labels: every label that is not ignore_index must lie in [0, C).
OrtStatus* CheckLabels(const char* op, const Tensor& labels, const CrossEntropyProblem& p);

// SparseCrossEntropy's output shapes: float32 [R], R the rows of the logits (its OpDef's InferOutputShapeFn).
OrtStatus* ORT_API_CALL InferRowShapes(const OrtCustomOp* op, OrtShapeInferContext* ctx);

void AddCpuLossOps(std::vector<OpDef*>* ops);
void AddCudaLossOps(std::vector<OpDef*>* ops);

}  // namespace mn
