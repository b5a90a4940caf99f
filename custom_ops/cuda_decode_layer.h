// Plain C launcher of DecodeLayer (cuda_decode_layer.cu): a LLaMA decoder layer's decode step, called
// by cuda_decode_layer_ops.cc and the timing harness decode_layer_check.cu. Same conventions as
// cuda_kernels.h: work on `stream`, return 0 or a cudaError_t code, element type `dtype` (MN_F32,
// MN_F16, MN_BF16) for every float tensor, float32 math, positions in device memory.
#pragma once
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// Rows the one-launch kernel takes (R = B * S); more rows take the five-kernel path.
#define MN_DECODE_LAYER_MAX_ROWS 16

// One call: x [R, D] (R = B * S rows, S per sequence), weights as decode_layer.h lists them (trans_b:
// [out, in]; else [in, out]), caches [B, max_seq, KVH * hd] (k_out / v_out may be k_cache / v_cache:
// written in place; else the caches are copied first), kv_pos [1] or [B] (device), y [R, D].
typedef struct {
  int dtype;
  const void *x, *attn_norm, *w_q, *w_k, *w_v, *w_o, *mlp_norm, *w_gate, *w_up, *w_down;
  const void *k_cache, *v_cache;
  void *k_out, *v_out, *y;
  int64_t B, S, D, H, KVH, head_dim, I, max_seq;
  float eps;
  int trans_b;
  MnPos kv_pos;
  const float* inv_freq;  // host, head_dim / 2 rope frequencies (RopeInvFreq)
} MnDecodeLayer;

// Per-kernel-instance state: the workspace (one buffer per stream and device, allocated the first
// time a shape needs it, then reused at fixed addresses: CUDA-graph capturable) and the five-kernel
// path's split-K scratch.
typedef struct MnDecodeLayerState MnDecodeLayerState;
MnDecodeLayerState* mn_cuda_decode_layer_new(void);
void mn_cuda_decode_layer_free(MnDecodeLayerState* st);

// The path a call takes. AUTO: the one-launch kernel (a persistent cooperative launch whose phases wait
// for each other through grid barriers or, phase 5, by polling phase 4's tagged output) where it applies
// (trans_b = 1, head_dim 64 or 128, R <= 16, 16-byte aligned tensors with widths of whole 16-byte
// chunks, the device takes cooperative launches), else the five fused kernels in sequence
// (RMSNormLinear, RopeCachedAttention, LinearResidual, RMSNormSwiGLU, LinearResidual). FUSED fails
// (cudaErrorNotSupported) where the one-launch kernel does not apply.
enum { MN_DECODE_LAYER_AUTO = 0, MN_DECODE_LAYER_FUSED = 1, MN_DECODE_LAYER_FIVE_KERNELS = 2 };
void mn_cuda_decode_layer_set_path(MnDecodeLayerState* st, int path);
// The path the last call took (MN_DECODE_LAYER_FUSED or MN_DECODE_LAYER_FIVE_KERNELS; 0 before any).
int mn_cuda_decode_layer_last_path(const MnDecodeLayerState* st);

int mn_cuda_decode_layer(const MnDecodeLayer* a, MnDecodeLayerState* st, void* stream);

#ifdef __cplusplus
}
#endif
