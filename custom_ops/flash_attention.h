// com.meganeura.FlashAttention / FlashAttentionGrad: the C interface between the ORT glue (g++) and
// the CUDA kernels (nvcc, cuda_flash.cu). No ORT headers here.
//
// Layout (row-major): Q, Y, dY, dQ [B, T, H*hd]; K, V, dK, dV [B, S, KVH*hd]; LSE [B, H, T] (the
// natural log-sum-exp of each query row's scaled scores q.k / sqrt(hd)). Query head h reads KV head
// h / (H / KVH). causal: key s is hidden from query t where s > t (needs S == T).
// Element type `dtype` (MN_F32, MN_F16, MN_BF16 of cuda_kernels.h) of Q, K, V, Y, dY, dQ, dK, dV;
// LSE is float32 in every case, and the arithmetic is float32 (half inputs feed tensor-core MMAs
// with float32 accumulation).
#pragma once
#include <stdint.h>

#include "cuda_kernels.h"  // MnPos

#ifdef __cplusplus
extern "C" {
#endif

#define MN_FLASH_MAX_HEAD_DIM 256

// Y and LSE. Returns 0 or a cudaError_t code.
int mn_cuda_flash_attention(int dtype, const void* q, const void* k, const void* v, void* y, float* lse, int64_t B, int64_t T,
                            int64_t S, int64_t H, int64_t KVH, int64_t head_dim, int causal, void* stream);

// CachedAttention's chunks (those FlashForChunk in cuda_attention.cu picks) on the forward's tensor-core
// kernel: Q, Y [B, T, H*hd], K, V the caches [B, max_seq, KVH*hd]; query row t of sequence b attends to
// the cache rows [0, kv_pos[b] + t]; an invalid position (outside [0, max_seq - T]) gives that sequence
// NaN rows. key_splits: the keys of each block of 64 query rows split over that many blocks, merged by
// a second kernel (> 0: at most that many, one per 4 key tiles of the cache; <= 0: enough for two waves
// of resident blocks; the splits' partials go to `scratch`). Returns -1 where those kernels do not apply (the caller then
// runs its own), else 0 or a cudaError_t code. Launches on the current device: the caller makes q's
// device current first.
int mn_cuda_flash_cached_attention(int dtype, const void* q, const void* k, const void* v, void* y, int64_t B, int64_t T,
                                   int64_t H, int64_t KVH, int64_t head_dim, int64_t max_seq, MnPos kv_pos, int key_splits,
                                   MnScratch* scratch, void* stream);

// dQ, dK, dV from Q, K, V, Y, dY and the forward's LSE (the probabilities are recomputed, tile by tile).
int mn_cuda_flash_attention_grad(int dtype, const void* q, const void* k, const void* v, const void* y, const void* dy,
                                 const float* lse, void* dq, void* dk, void* dv, int64_t B, int64_t T, int64_t S, int64_t H,
                                 int64_t KVH, int64_t head_dim, int causal, void* stream);

#ifdef __cplusplus
}
#endif
