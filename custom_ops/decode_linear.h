// RMSNorm fused into the projections of a decode step (meganeura_onnx/ops/decode_linear.py declares them):
//   RMSNormLinear  x [M, K], gamma [K], weights w_0..w_{n-1} (variadic) -> y_i = rmsnorm(x) @ w_i^T
//                  (trans_b = 1: w_i [N_i, K]) or rmsnorm(x) @ w_i (trans_b = 0: w_i [K, N_i]);
//   RMSNormSwiGLU  x, gamma, w_gate, w_up -> silu(rmsnorm(x) @ w_gate^T) * (rmsnorm(x) @ w_up^T).
// rmsnorm(x) = x / sqrt(mean(x^2) + epsilon) * gamma per row, in float32 for every element type;
// products accumulate in float32. Attribute reading, input checks and the op descriptors are shared by
// the CPU kernels (cpu_decode_linear.cc) and the CUDA glue (cuda_decode_linear_ops.cc).
#pragma once

#include <vector>

#include "op_common.h"

namespace mn {

struct NormLinearAttrs {
  float epsilon;
  bool trans_b;
};
// swiglu: reads RMSNormSwiGLU's attributes (else RMSNormLinear's); they are the same two.
OrtStatus* ReadNormLinearAttrs(const OrtKernelInfo* info, bool swiglu, NormLinearAttrs* a);

struct NormLinearProblem {
  ONNXTensorElementDataType type;  // float, float16 or bfloat16: every input and output
  int64_t M, K;
  std::vector<int64_t> N;  // output width per weight
};
// Reads x, gamma and the weights (all inputs after gamma) and checks them; names the op and the values.
OrtStatus* ReadNormLinearInputs(OrtKernelContext* ctx, const char* op, const NormLinearAttrs& a, Tensor* x, Tensor* gamma,
                                std::vector<Tensor>* ws, NormLinearProblem* p);
// RMSNormSwiGLU (swiglu): exactly two weights of one output width.
OrtStatus* CheckSwiGLUWidths(bool swiglu, const std::vector<Tensor>& ws, const NormLinearProblem& p);

// The op descriptors (variadic RMSNormLinear; output shapes inferred from x and the weights).
OpDef* NewRMSNormLinearOpDef(const char* ep, ONNXTensorElementDataType type, KernelFactory factory);
void InferNormLinearShapes(OpDef* op);

void AddCpuDecodeLinearOps(std::vector<OpDef*>* ops);
void AddCudaDecodeLinearOps(std::vector<OpDef*>* ops);

}  // namespace mn
