// Plain C interface between the ORT glue (g++, cuda_ops.cc) and the CUDA kernels (nvcc,
// cuda_kernels.cu). Every launcher enqueues work on `stream` (ORT's compute stream) and
// returns 0 or a cudaError_t code (see mn_cuda_error_string). No ORT headers here.
//
// Positions (Rope's offset_dyn, kv_pos) live in DEVICE memory and are read by the kernels, never
// by the host: no device->host copy, no sync, and a captured CUDA graph replays with whatever
// position the buffer holds at replay time. Grid sizes depend on static shapes only (max_seq).
// An invalid position cannot return an ORT status without a sync, so instead: CacheWrite writes
// nothing, CachedAttention and Rope write NaN to their whole output (visible, never silent), and
// nothing is read or written out of bounds.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MN_ROPE_MAX_HALF 512  // head_dim <= 1024
#define MN_ROPE_MAX_OFFSET (((int64_t)1) << 40)

// A [1] or [B] (one per sequence) integer tensor in device memory (or none).
enum { MN_POS_NONE = 0, MN_POS_I64 = 1, MN_POS_I32 = 2, MN_POS_U32 = 3 };
typedef struct {
  const void* ptr;
  int type;       // MN_POS_*
  int64_t count;  // entries: 1 (shared by every sequence) or B
} MnPos;

// Element types of the float tensors (float16/bfloat16 are computed in float32).
enum { MN_F32 = 0, MN_F16 = 1, MN_BF16 = 2 };

// Per-kernel-instance device scratch, one buffer per (stream, device), allocated with cudaMalloc
// the first time a size is needed and kept (no allocation per call, fixed addresses for CUDA graphs).
typedef struct MnScratch MnScratch;
MnScratch* mn_cuda_scratch_new(void);
void mn_cuda_scratch_free(MnScratch* s);
// The scratch's buffer for (current device, stream), at least `bytes` (allocated when a larger size is first
// needed; the old one freed after the stream drained it); *fresh = 1 when it is new or was last used with
// another `layout`: the caller then initialises what it keeps there.
int mn_cuda_scratch_get(MnScratch* s, void* stream, size_t bytes, uint64_t layout, void** out, int* fresh);

const char* mn_cuda_error_string(int code);

// Reads the pos.count positions of `pos` back to the host into values[], unless `stream` is capturing a
// CUDA graph: then *captured = 1 and nothing is read (a captured graph must not sync; the kernels guard
// on the device and the Session validates positions when they are uploaded). Synchronises `stream` when it reads.
int mn_cuda_read_pos(MnPos pos, void* stream, int64_t* values, int* captured);

// Element types (dtype MN_F32, MN_F16, MN_BF16): float16/bfloat16 tensors are read and written as
// such and computed in float32. Batched forms: B sequences side by side, each with its own position
// (pos.count == B) or one shared position (pos.count == 1).

// y[b, s, h*hd + j (+hd/2)] = rotate-half of x[b, s] with position offset + dyn[b] + s; inv_freq (host,
// hd/2 values). dyn[b] < 0 or > MN_ROPE_MAX_OFFSET: sequence b's rows of y = NaN.
int mn_cuda_rope(int dtype, const void* x, void* y, int64_t B, int64_t S, int64_t D, int64_t head_dim, int64_t offset, MnPos dyn,
                 const float* inv_freq, void* stream);

// out = cache [B, max_seq, dim] with rows [kv_pos[b], kv_pos[b] + T) of sequence b = new[b] ([B, T, dim]);
// copies the cache first when out != cache. A sequence with kv_pos[b] < 0 or kv_pos[b] + T > max_seq
// gets no rows written (its cache rows stay untouched). Any element size (a byte copy).
int mn_cuda_cache_write(size_t elem_bytes, const void* new_rows, const void* cache, void* out, int64_t B, int64_t T, int64_t dim,
                        int64_t max_seq, MnPos kv_pos, void* stream);

// out[b, t, h*hd:(h+1)*hd] = softmax(q[b,t,h] . K[b, 0..kv_pos[b]+t] / sqrt(hd)) V[b], GQA head h -> h / (H/KVH).
// kv_pos[b] < 0 or kv_pos[b] + T > max_seq: sequence b's output = NaN. scratch: the kernel instance's (required).
int mn_cuda_cached_attention(int dtype, const void* q, const void* k, const void* v, void* out, int64_t B, int64_t T, int64_t H,
                             int64_t KVH, int64_t head_dim, int64_t max_seq, MnPos kv_pos, MnScratch* scratch, void* stream);

// RopeCachedAttention: k_out = k_cache with rows [kv_pos[b], kv_pos[b] + T) of sequence b = k_new[b] rotated
// (rope at those positions), v_out = v_cache with those rows = v_new[b], out = CachedAttention of q rotated
// (row t at kv_pos[b] + t) over k_out / v_out. k_out/v_out may be k_cache/v_cache (in place); otherwise
// the caches are copied first. One kernel for head_dim 64/128 with 16-byte aligned q and caches, else
// two. An invalid kv_pos[b]: nothing written for sequence b, its output NaN. inv_freq: host, hd/2
// values. scratch as mn_cuda_cached_attention's; rope_scratch a second one (the two-kernel path's rotated q).
int mn_cuda_rope_cached_attention(int dtype, const void* q, const void* k_new, const void* v_new, const void* k_cache,
                                  const void* v_cache, void* out, void* k_out, void* v_out, int64_t B, int64_t T, int64_t H, int64_t KVH,
                                  int64_t head_dim, int64_t max_seq, MnPos kv_pos, const float* inv_freq, MnScratch* scratch,
                                  MnScratch* rope_scratch, void* stream);

// out[num_rows, D] = 0; out[idx[i]] += src[i]. idx: N indices in DEVICE memory (MnPos type: int64,
// int32 or uint32; ptr = the first). An index outside [0, num_rows) makes the whole output NaN.
// Stream-ordered only (no sync, no host memory): capturable in a CUDA graph.
int mn_cuda_scatter_add_f32(MnPos idx, const float* src, float* out, int64_t N, int64_t D, int64_t num_rows, void* stream);

// GreedyStep: per row b of logits [B, V] (dtype), token[b] = its argmax (numpy's: the first of equal values, a
// NaN before any number), next_pos[b] = kv_pos[b] + 1 (modulo 2^32), log_out [B, n] = log_in with row b's
// column min(next_pos[b], n - 1) set to token[b]. log_out may be log_in and next_pos kv_pos (in place).
// B <= 65535 rows, V <= 2^32; the caller has checked the shapes (CheckGreedyStep). One launch, a block per
// 4096-element slice of each row; `scratch` keeps each row's running maximum between its blocks.
int mn_cuda_greedy_step(int dtype, const void* logits, int64_t B, int64_t V, const uint32_t* kv_pos, const uint32_t* log_in, int64_t n,
                        uint32_t* token, uint32_t* next_pos, uint32_t* log_out, MnScratch* scratch, void* stream);

// Copies `bytes` of device memory `idx` to `host` and synchronises `stream`, unless `stream` is
// capturing a CUDA graph: then *captured = 1 and nothing is read (validation happens on the device).
int mn_cuda_read_indices(const void* idx, size_t bytes, void* host, void* stream, int* captured);

// AdamUpdate of `count` parameters (multi-tensor: a few launches for all of them; tensors with n == 0
// are skipped). hyper = device pointers to the [1] lr, beta1, beta2, eps, step, weight_decay (read on
// the device: nothing is copied to the host, CUDA-graph capturable); per tensor the device pointers of
// p, g, m, v and of the outputs p', m', v', and its element count. The same float32 operations as the
// CPU kernel (optim_kernels.cc), bit for bit. Hyper-parameters are not validated here (the session
// validates them when they are set).
typedef struct {
  const float *p, *g, *m, *v;
  float *p2, *m2, *v2;
  int64_t n;
} MnAdamTensor;
int mn_cuda_adam_update_multi_f32(const float* const hyper[6], const MnAdamTensor* tensors, size_t count, void* stream);

#ifdef __cplusplus
}
#endif
