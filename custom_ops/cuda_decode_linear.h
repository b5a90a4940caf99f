// Plain C launchers of the small-row GEMV kernels (RMSNorm + projections, product + residual) (cuda_decode_linear.cu), called by
// cuda_decode_linear_ops.cc and the timing harness decode_linear_check.cu. Same conventions as
// cuda_kernels.h: work on `stream`, return 0 or a cudaError_t code, element type `dtype` (MN_F32,
// MN_F16, MN_BF16) for every tensor, float32 math.
#pragma once
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// Largest K the kernels take: one block keeps a tile of normalised x rows (float32) in the 46 KB of
// shared memory a block gets without opting in (48 KB, less its static reduction buffers).
#define MN_NORM_LINEAR_MAX_K 11776

// x [M, K], gamma [K]; for each i < count: y[i] [M, N[i]] = rmsnorm(x) @ w[i]^T (trans_b: w[i] [N[i], K])
// or rmsnorm(x) @ w[i] (w[i] [K, N[i]]), rmsnorm(x) = x / sqrt(mean(x^2) + eps) * gamma per row.
int mn_cuda_rms_norm_linear(int dtype, const void* x, const void* gamma, int64_t M, int64_t K, float eps, int trans_b, int count,
                            const void* const* w, const int64_t* N, void* const* y, void* stream);

// out [M, N] = silu(rmsnorm(x) @ w_gate^T) * (rmsnorm(x) @ w_up^T) (or @ w without trans_b).
int mn_cuda_rms_norm_swiglu(int dtype, const void* x, const void* gamma, int64_t M, int64_t K, float eps, int trans_b,
                            const void* w_gate, const void* w_up, int64_t N, void* out, void* stream);

// y [M, N] = residual [M, N] + x [M, K] @ w^T (trans_b: w [N, K]) or + x @ w (w [K, N]), float32
// accumulation, the residual added before the one rounding; K <= MN_NORM_LINEAR_MAX_K (0 allowed).
int mn_cuda_linear_residual(int dtype, const void* x, const void* w, const void* residual, int64_t M, int64_t K, int64_t N, int trans_b,
                            void* y, void* stream);

#ifdef __cplusplus
}
#endif
