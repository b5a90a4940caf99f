// DecodeLayer: a LLaMA decoder layer's decode step in one op. Attribute reading, input checks and the op
// descriptor shared by the CPU kernel (cpu_decode_layer.cc) and the CUDA glue (cuda_decode_layer_ops.cc).
//
// Inputs: 0 x [R, D], 1 attn_norm [D], 2 w_q, 3 w_k, 4 w_v, 5 w_o, 6 mlp_norm [D], 7 w_gate, 8 w_up,
// 9 w_down (trans_b = 1: [out, in], torch's layout; trans_b = 0: [in, out]), 10 k_cache, 11 v_cache
// ([max_seq, KVH*hd] for one sequence, [B, max_seq, KVH*hd] for B sequences of S = R / B rows each),
// 12 kv_pos (integer, [1] or [B], device memory on CUDA). Outputs: 0 y [R, D], 1 k_cache', 2 v_cache'
// (may reuse inputs 10 and 11: written in place). Every float tensor has one type T (float32,
// float16, bfloat16). Semantics: the composition of the fused ops, rounding to T where they do:
//   q, k, v   = RMSNormLinear(x, attn_norm, w_q, w_k, w_v)
//   a, kc, vc = RopeCachedAttention(q, k, v, k_cache, v_cache, kv_pos)   (row t of sequence b at kv_pos[b] + t)
//   x1        = LinearResidual(a, w_o, x)
//   h         = RMSNormSwiGLU(x1, mlp_norm, w_gate, w_up)
//   y         = LinearResidual(h, w_down, x1)
// ONNX attributes: num_heads, num_kv_heads, head_dim, theta (float), epsilon (float, both norms),
// trans_b (0 or 1, default 1), check_positions (0 or 1, default 1; as RopeCachedAttention's).
#pragma once

#include <vector>

#include "op_common.h"

namespace mn {

struct DecodeLayerAttrs {
  AttnAttrs heads;  // num_heads, num_kv_heads, head_dim, check_positions
  float theta;
  float epsilon;
  bool trans_b;
};
OrtStatus* ReadDecodeLayerAttrs(const OrtKernelInfo* info, DecodeLayerAttrs* a);

// Input indices (ONNX order).
enum DecodeLayerInput {
  kDlX = 0, kDlAttnNorm, kDlWq, kDlWk, kDlWv, kDlWo, kDlMlpNorm, kDlWgate, kDlWup, kDlWdown, kDlKCache, kDlVCache, kDlKvPos,
  kDlInputs
};

// One call's sizes: R = B * S rows of width D, H / KVH heads of hd, I intermediate features.
struct DecodeLayerProblem {
  ONNXTensorElementDataType type;
  int64_t B, S, R, D, H, KVH, hd, I, max_seq;
  std::vector<int64_t> kv_pos;  // B entries when read (host_positions), else empty
};
// Checks the kDlInputs inputs `in` (types, ranks, shapes against the attributes and each other; with
// host_positions, 0 <= kv_pos[b] <= max_seq - S as RopeCachedAttention checks them). Errors name
// DecodeLayer, the argument, the expected and the given value.
OrtStatus* CheckDecodeLayer(const DecodeLayerAttrs& a, const Tensor* in, DecodeLayerProblem* p, bool host_positions = true);

// The op descriptor: 13 inputs (kv_pos any integer type), 3 outputs; y takes x's shape, outputs 1/2 the
// caches' (and may reuse their buffers).
OpDef* NewDecodeLayerOpDef(const char* ep, ONNXTensorElementDataType type, KernelFactory factory);

void AddCpuDecodeLayerOps(std::vector<OpDef*>* ops);   // cpu_decode_layer.cc
void AddCudaDecodeLayerOps(std::vector<OpDef*>* ops);  // cuda_decode_layer_ops.cc

}  // namespace mn
