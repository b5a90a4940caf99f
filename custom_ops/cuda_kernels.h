// Plain C interface between the ORT glue (g++, cuda_ops.cc) and the CUDA kernels (nvcc,
// cuda_kernels.cu). Every launcher enqueues work on `stream` (ORT's compute stream) and
// returns 0 or a cudaError_t code (see mn_cuda_error_string). No ORT headers here.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MN_ROPE_MAX_HALF 512  // head_dim <= 1024

const char* mn_cuda_error_string(int code);

// y[r, h*hd + j (+hd/2)] = rotate-half of x with position pos0 + r; inv_freq (host, hd/2 values).
int mn_cuda_rope_f32(const float* x, float* y, int64_t S, int64_t D, int64_t head_dim, int64_t pos0,
                     const float* inv_freq, void* stream);

// out = cache with rows [kv_pos, kv_pos + T) = new; copies the cache first when out != cache.
int mn_cuda_cache_write_f32(const float* new_rows, const float* cache, float* out, int64_t T, int64_t dim,
                            int64_t max_seq, int64_t kv_pos, void* stream);

// out[t, h*hd:(h+1)*hd] = softmax(q_t,h . K[0..kv_pos+t] / sqrt(hd)) V, GQA head h -> h / (H/KVH).
int mn_cuda_cached_attention_f32(const float* q, const float* k, const float* v, float* out, int64_t T, int64_t H,
                                 int64_t KVH, int64_t head_dim, int64_t kv_pos, void* stream);

// out[num_rows, D] = 0; out[idx[i]] += src[i]. idx_host: validated host indices (copied to the device here).
int mn_cuda_scatter_add_f32(const int64_t* idx_host, const float* src, float* out, int64_t N, int64_t D,
                            int64_t num_rows, void* stream);

#ifdef __cplusplus
}
#endif
