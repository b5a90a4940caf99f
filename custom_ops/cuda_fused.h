// Plain C launchers of the fused decode-layer kernels (cuda_fused.cu), called by cuda_fused_ops.cc.
// Same conventions as cuda_kernels.h: work on `stream`, 0 or a cudaError_t code, element type `dtype`
// (MN_F32, MN_F16, MN_BF16; half types computed in float32), positions in device memory read by the
// kernels (CUDA-graph capturable).
#pragma once
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// out[i] = gate[i] * sigmoid(gate[i]) * up[i], i < n.
int mn_cuda_swiglu(int dtype, const void* gate, const void* up, void* out, int64_t n, void* stream);

// out[r, j] = g * sigmoid(g) * x[r, f + j] with g = x[r, j], for x [rows, 2f] (a merged gate|up product) and out
// [rows, f], j < f: the halves read in place, no Split. Any size (int64 offsets past 2^32 elements).
int mn_cuda_swiglu_packed(int dtype, const void* x, void* out, int64_t rows, int64_t f, void* stream);

// SwiGLU's backward, i < n: with s = sigmoid(gate[i]), dgate[i] = dy[i] * up[i] * s * (1 + gate[i] * (1 - s)) and
// dup[i] = dy[i] * gate[i] * s (16-byte loads where all five pointers are 16-byte aligned).
int mn_cuda_swiglu_grad(int dtype, const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n, void* stream);

// RMSNorm's dx per row of x [rows, n] (w [n], dy [rows, n]): with r = 1 / sqrt(mean(x^2) + eps) and gx = dy * w,
// dx = r * gx - x * r^3 * mean(gx * x); float32 math. dw (float32 [n], or nullptr for dx alone): the weight's
// gradient, sum over rows of dy * x * r, reduced in two fixed-order stages (deterministic, no atomics; a
// stream-ordered float32 scratch of at most 512 x n).
int mn_cuda_rms_norm_grad(int dtype, const void* x, const void* w, const void* dy, void* dx, float* dw, int64_t rows, int64_t n,
                          float eps, void* stream);

// Per row of x [rows, n] (residual [rows, n], w [n]): sum = x + residual added in float32 and rounded to the element
// type, y = s * r * w with s that rounded sum widened to float32 and r = 1 / sqrt(mean(s^2) + eps) (float32 math),
// rounded once. A block per row (grid-stride over rows: any row count); no allocation, no host sync.
int mn_cuda_add_rms_norm(int dtype, const void* x, const void* residual, const void* w, void* y, void* sum, int64_t rows, int64_t n,
                         float eps, void* stream);

// out = cache [max_seq, dim] with rows [kv_pos, kv_pos + T) = rotate-half RoPE of new_rows [T, dim] (row r
// at position kv_pos + r, head_dim wide heads, inv_freq: hd/2 host values); copies the cache first when
// out != cache. kv_pos < 0 or kv_pos + T > max_seq: nothing is written (out == cache, untouched), as CacheWrite.
int mn_cuda_rope_cache_write(int dtype, const void* new_rows, const void* cache, void* out, int64_t T, int64_t dim, int64_t max_seq,
                             int64_t head_dim, const float* inv_freq, MnPos kv_pos, void* stream);

// A prefill's merged q/k/v product placed: qkv [B*T, (H + 2*KVH)*hd] holds q | k | v per row (sequence b's
// rows b*T .. b*T + T - 1); q_rot [B*T, H*hd] = rotate-half RoPE of q at positions kv_pos[b] + t, the K cache
// [B, max_seq, KVH*hd] rows kv_pos[b] + t = RoPE of k there, the V cache rows = v (caches copied into kc/vc
// first when they are other buffers). A sequence whose kv_pos is outside [0, max_seq - T] writes no cache row
// and NaN into its q_rot rows. One launch, no allocation, no host sync (kv_pos read on the device).
int mn_cuda_qkv_rope_cache_write(int dtype, const void* qkv, const void* k_cache, const void* v_cache, void* q_rot, void* kc, void* vc,
                                 int64_t B, int64_t T, int64_t H, int64_t KVH, int64_t head_dim, int64_t max_seq, const float* inv_freq,
                                 MnPos kv_pos, void* stream);

#ifdef __cplusplus
}
#endif
