// Plain C launchers of the sparse cross-entropy kernels (cuda_losses.cu), called by cuda_losses_ops.cc.
// Same conventions as cuda_kernels.h: work on `stream`, 0 or a cudaError_t code, logits of element type
// `dtype` (MN_F32, MN_F16, MN_BF16; computed in float32), labels in device memory read by the kernels
// (no host copy, no sync: CUDA-graph capturable).
//
// A label that is neither ignore_index nor in [0, C) cannot become an ORT status without a sync, so
// the kernels guard on the device: that row's loss term and log-sum-exp are NaN (so is the loss), its
// gradient row is NaN, and nothing outside the logits is read.
#pragma once
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// lse[r] = log(sum_c exp(logits[r, c])); loss_rows[r] = lse[r] - logits[r, labels[r]] (0 when
// labels[r] == ignore; ignore = -1: none). labels: R integers (MnPos type, count R). R < 2^31.
int mn_cuda_sparse_ce_forward(int dtype, const void* logits, MnPos labels, int64_t R, int64_t C, int64_t ignore, float* loss_rows,
                              float* lse, void* stream);

// dlogits[r, c] = (exp(logits[r, c] - lse[r]) - (c == labels[r])) * scale[0], 0 for an ignored row;
// scale: a device float (dloss / count). R < 2^31.
int mn_cuda_sparse_ce_backward(int dtype, const void* logits, MnPos labels, const float* lse, const float* scale, int64_t R, int64_t C,
                               int64_t ignore, void* dlogits, void* stream);

#ifdef __cplusplus
}
#endif
