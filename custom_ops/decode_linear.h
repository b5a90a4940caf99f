// Small-row GEMVs of a decode step (meganeura_onnx/ops/decode_linear.py declares them):
//   RMSNormLinear   x [M, K], gamma [K], weights w_0..w_{n-1} (variadic) -> y_i = rmsnorm(x) @ w_i^T
//                   (trans_b = 1: w_i [N_i, K]) or rmsnorm(x) @ w_i (trans_b = 0: w_i [K, N_i]);
//   RMSNormSwiGLU   x, gamma, w_gate, w_up -> silu(rmsnorm(x) @ w_gate^T) * (rmsnorm(x) @ w_up^T);
//   LinearResidual  x [M, K], w, residual [M, N] -> residual + x @ w^T (or + x @ w without trans_b).
// rmsnorm(x) = x / sqrt(mean(x^2) + epsilon) * gamma per row, in float32 for every element type;
// products accumulate in float32 and round once to the output type. One helper per op reads its
// attributes and one reads, checks and allocates a call's tensors: the CPU kernels
// (cpu_decode_linear.cc) and the CUDA glue (cuda_decode_linear_ops.cc) both use them.
#pragma once

#include <vector>

#include "cpu_pool.h"
#include "op_common.h"

namespace mn {

struct NormLinearAttrs {
  float epsilon;
  bool trans_b;
};
// swiglu: reads RMSNormSwiGLU's attributes (else RMSNormLinear's); they are the same two.
OrtStatus* ReadNormLinearAttrs(const OrtKernelInfo* info, bool swiglu, NormLinearAttrs* a);

// One RMSNormLinear / RMSNormSwiGLU call: its inputs read and checked, its outputs allocated.
struct NormLinearCall {
  ONNXTensorElementDataType type;  // float, float16 or bfloat16: every input and output
  int64_t M, K;
  Tensor x, gamma;
  std::vector<Tensor> ws;   // the weights (w_gate, w_up for RMSNormSwiGLU)
  std::vector<int64_t> N;   // output width per weight
  std::vector<void*> outs;  // one [M, N_i] per weight (RMSNormSwiGLU: one [M, N])
};
// Errors name the op, the argument and the values (RMSNormSwiGLU: exactly two weights of one width).
OrtStatus* PrepareNormLinear(OrtKernelContext* ctx, const NormLinearAttrs& a, bool swiglu, NormLinearCall* c);

// One LinearResidual call: x [M, K], w ([N, K] with trans_b, else [K, N]) and residual [M, N] of one
// float type; y [M, N] allocated.
struct LinearResidualCall {
  ONNXTensorElementDataType type;
  int64_t M, K, N;
  Tensor x, w, residual;
  void* y;
};
OrtStatus* ReadLinearResidualAttrs(const OrtKernelInfo* info, bool* trans_b);
OrtStatus* PrepareLinearResidual(OrtKernelContext* ctx, bool trans_b, LinearResidualCall* c);

// The CPU kernels' work on a prepared call (host memory; the Tensors' data and shapes as Prepare* leaves
// them, only type/M/K/N, the data pointers and outs/y are read), their loops on `pool`. DecodeLayer's CPU
// kernel fills calls with its inputs and temporaries and runs them in sequence on its team.
OrtStatus* NormLinearCpuRun(const Pool& pool, const NormLinearAttrs& a, bool swiglu, const NormLinearCall& c);
OrtStatus* LinearResidualCpuRun(const Pool& pool, bool trans_b, const LinearResidualCall& c);

// The op descriptors (variadic RMSNormLinear; output shapes inferred from x and the weights).
OpDef* NewRMSNormLinearOpDef(const char* ep, ONNXTensorElementDataType type, KernelFactory factory);
// RMSNormLinear / RMSNormSwiGLU: output i is [M, N_i] from x [M, K] (input 0) and weight i (N_i per
// the trans_b attribute). LinearResidual's output takes the residual's shape (its rows' shape_from 2).
void InferNormLinearShapes(OpDef* op);

void AddCpuDecodeLinearOps(std::vector<OpDef*>* ops);
void AddCudaDecodeLinearOps(std::vector<OpDef*>* ops);

}  // namespace mn
