// com.meganeura.FlashAttention / FlashAttentionGrad: attributes and shape checks shared by the CPU
// kernels (cpu_flash.cc) and the CUDA glue (cuda_flash_ops.cc).
#pragma once

#include <vector>

#include "flash_attention.h"
#include "op_common.h"

namespace mn {

struct FlashAttrs {
  int64_t num_heads, num_kv_heads, head_dim, causal;
};
// grad: FlashAttentionGrad's attributes (the same four), else FlashAttention's; checked as the op table does.
OrtStatus* ReadFlashAttrs(const OrtKernelInfo* info, bool grad, FlashAttrs* a);

struct FlashProblem {
  int64_t B, T, S, H, KVH, hd;
  bool causal;
  ONNXTensorElementDataType type;  // of Q, K, V, Y, dY and the outputs but LSE (float32 always)
};
// Reads and checks the inputs: Q, K, V (and for the gradient Y, dY, LSE) as flash_attention.h lays them out;
// Q's element type (float32, float16 or bfloat16) is that of the other inputs but LSE, which is float32.
OrtStatus* CheckFlash(const char* op, const FlashAttrs& a, OrtKernelContext* ctx, bool grad, FlashProblem* p,
                      std::vector<Tensor>* in);

void AddCpuFlashOps(std::vector<OpDef*>* ops);
void AddCudaFlashOps(std::vector<OpDef*>* ops);

}  // namespace mn
