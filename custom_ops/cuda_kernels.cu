// CUDA kernels of the com.meganeura ops Rope, CacheWrite (float32, float16, bfloat16), ScatterAdd and
// GreedyStep, and the position/index read-back.
// Built by nvcc; called through cuda_kernels.h. CachedAttention lives in cuda_attention.cu.
#include <cstring>

#include "cuda_common.cuh"

namespace {

// ------------------------------------------------------------------ Rope
struct InvFreq {
  float v[MN_ROPE_MAX_HALF];
};

// One row per block iteration (grid-stride over rows). A thread owns V consecutive pair indices j of
// every head it visits; blockDim.x is a multiple of half / V, so a thread keeps the same j for all of
// its heads and computes their cos/sin once per row. V = elements per 16-byte access (1: any alignment).
template <class T, int V>
__global__ void RopeKernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t S, int64_t D, int half,
                           int64_t offset, MnPos dyn_pos, InvFreq inv) {
  using E = Elem<T>;
  const int nj = half / V;  // vector groups per half head
  const int64_t groups = D / 2 / V;  // vector groups per row (all heads)
  const int jv = threadIdx.x % nj;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t dyn = LoadPos(dyn_pos, r / S);
    const bool valid = dyn >= 0 && dyn <= MN_ROPE_MAX_OFFSET;
    const float pos = static_cast<float>(offset + dyn + r % S);
    float cs[V], sn[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      sincosf(pos * inv.v[jv * V + i], &sn[i], &cs[i]);
      if (!valid) cs[i] = sn[i] = __int_as_float(0x7fc00000);  // an invalid position is made visible, never silently wrong
    }
    const T* xr = x + r * D;
    T* yr = y + r * D;
    for (int64_t e = threadIdx.x; e < groups; e += blockDim.x) {
      const int64_t base = (e / nj) * 2 * half + (int64_t)jv * V;  // first element of this thread's j in head e / nj
      float a[V], b[V], ya[V], yb[V];
      if constexpr (V == 1) {
        a[0] = E::ToF(xr[base]);
        b[0] = E::ToF(xr[base + half]);
      } else {
        static_assert(V == E::EPC, "one 16-byte chunk per access");
        E::Unpack(*reinterpret_cast<const uint4*>(xr + base), a);
        E::Unpack(*reinterpret_cast<const uint4*>(xr + base + half), b);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) {
        RotatePair(a[i], b[i], cs[i], sn[i], &ya[i], &yb[i]);
      }
      if constexpr (V == 1) {
        yr[base] = E::FromF(ya[0]);
        yr[base + half] = E::FromF(yb[0]);
      } else {
        *reinterpret_cast<uint4*>(yr + base) = E::Pack(ya);
        *reinterpret_cast<uint4*>(yr + base + half) = E::Pack(yb);
      }
    }
  }
}

template <class T>
int LaunchRope(const T* x, T* y, int64_t B, int64_t Srows, int64_t D, int64_t head_dim, int64_t offset, MnPos dyn,
               const InvFreq& inv, cudaStream_t s) {
  constexpr int V = Elem<T>::EPC;
  const int half = static_cast<int>(head_dim / 2);
  const bool vec = half % V == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  const int nj = vec ? half / V : half;
  const int threads = nj >= 128 ? nj : nj * (128 / nj);  // a multiple of nj (nj <= 512)
  const int64_t rows = B * Srows;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, 65535 * 16));
  if (vec)
    RopeKernel<T, V><<<blocks, threads, 0, s>>>(x, y, rows, Srows, D, half, offset, dyn, inv);
  else
    RopeKernel<T, 1><<<blocks, threads, 0, s>>>(x, y, rows, Srows, D, half, offset, dyn, inv);
  return cudaGetLastError();
}

// ------------------------------------------------------------------ CacheWrite
// out[b, kv_pos[b] + r] = new[b, r] for r < T; nothing for a sequence whose kv_pos is outside
// [0, max_seq - T]. V: the unit copied (16, 4 or 2 bytes); row = units per cache row.
template <typename V>
__global__ void CacheWriteKernel(const V* __restrict__ nw, V* __restrict__ out, int64_t n, int64_t row, int64_t T,
                                 int64_t max_seq, MnPos pos) {
  const int64_t per_seq = T * row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = i / per_seq;
    const int64_t kv = LoadPos(pos, b);
    if (kv < 0 || kv > max_seq - T) continue;
    out[(b * max_seq + kv) * row + i % per_seq] = nw[i];
  }
}

InvFreq MakeInvFreq(const float* inv_freq, int64_t head_dim) {
  InvFreq inv;
  for (int64_t j = 0; j < head_dim / 2; ++j) inv.v[j] = inv_freq[j];
  return inv;
}

// ------------------------------------------------------------------ ScatterAdd
// Indices in device memory (any of the MN_POS_* integer types). An index outside [0, rows) adds
// nothing and sets *bad; PoisonIfBad then fills the whole output with NaN (visible, never silent).
__global__ void ScatterAddKernel(MnPos idx, const float* __restrict__ src, float* __restrict__ out, int64_t N, int64_t D,
                                 int64_t rows, int* __restrict__ bad) {
  const int64_t n = N * D;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / D, d = e % D;
    const int64_t r = LoadPos(MnPos{static_cast<const char*>(idx.ptr) + i * (idx.type == MN_POS_I64 ? 8 : 4), idx.type});
    if (r < 0 || r >= rows) {
      *bad = 1;
      continue;
    }
    atomicAdd(out + r * D + d, src[e]);
  }
}

__global__ void PoisonIfBad(const int* __restrict__ bad, float* __restrict__ out, int64_t n) {
  if (!*bad) return;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = __int_as_float(0x7fc00000);
}

// ------------------------------------------------------------------ GreedyStep
// numpy.argmax's order as one unsigned 64-bit key per element, compared with max (no branches): the high
// word orders the values (the float's bits made monotonic, -0 as +0 so equal values tie, every NaN above
// +inf), the low word is 2^32 - 1 - index so that of equal values the first wins. Every element's key is
// above 0 (the start value); V <= 2^32 keeps the index in the low word.
__device__ __forceinline__ unsigned long long ArgKey(float x, int64_t i) {
  const uint32_t bits = __float_as_uint(x), u = bits == 0x80000000u ? 0u : bits;  // -0 as +0
  const uint32_t order = x != x ? 0xffffffffu : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(order) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}

__device__ __forceinline__ unsigned long long WarpMax(unsigned long long k) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) k = max(k, __shfl_xor_sync(0xffffffffu, k, o));
  return k;
}

constexpr int kGreedyThreads = 256, kGreedySlice = 4096;  // a block per slice of a row: 16 elements per thread
constexpr uint64_t kGreedyLayout = 0x4772656564ull;          // what GreedyStep keeps in its scratch (GreedyRow per row)

__device__ __forceinline__ unsigned long long BlockMax(unsigned long long key, unsigned long long* shared) {
  key = WarpMax(key);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) shared[warp] = key;
  __syncthreads();
  return WarpMax(lane < kGreedyThreads / 32 ? shared[lane] : 0ull);
}

// Row b's state between two of its slices' blocks: the largest key so far and how many slices are done;
// both 0 between launches (the row's last block resets them).
struct GreedyRow {
  unsigned long long key;
  unsigned done;
};

// The largest key of this block's slice (kGreedySlice elements) of `row`, in every thread. Spread over a
// block per slice because the keys are instruction-bound: one block of 1024 threads per row took ~8 us for
// SmolLM2's 49152 logits on an H200, whatever their type, alignment or batch. A 16-byte aligned row is read
// in 16-byte loads (all of a thread's in flight together), else an element at a time.
template <class T>
__device__ unsigned long long SliceMax(const T* __restrict__ row, int64_t V, unsigned long long* shared) {
  constexpr int EPC = Elem<T>::EPC, PER = kGreedySlice / kGreedyThreads / EPC;  // 16-byte chunks per thread
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kGreedySlice;
  const int64_t end = begin + kGreedySlice < V ? begin + kGreedySlice : V;
  unsigned long long key = 0;
  if ((reinterpret_cast<uintptr_t>(row) & 15) == 0 && end - begin == kGreedySlice) {
    const uint4* r4 = reinterpret_cast<const uint4*>(row + begin);
    uint4 u[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) u[k] = r4[threadIdx.x + k * kGreedyThreads];
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      float f[EPC];
      Elem<T>::Unpack(u[k], f);
      const int64_t i0 = begin + (threadIdx.x + k * kGreedyThreads) * int64_t(EPC);
#pragma unroll
      for (int e = 0; e < EPC; ++e) key = max(key, ArgKey(f[e], i0 + e));
    }
  } else {
#pragma unroll 4
    for (int64_t i = begin + threadIdx.x; i < end; i += kGreedyThreads) key = max(key, ArgKey(Elem<T>::ToF(row[i]), i));
  }
  return BlockMax(key, shared);
}

// Block (s, b): slice s of row b's largest key, merged into rows[b] with an atomic max; the row's last
// block to finish (a ticket after a fence, as in the split attention's merge) takes the row's argmax and
// resets rows[b], then writes kv_pos[b] + 1, the log's row (copied unless updated in place) and the token
// at column min(kv_pos[b] + 1, n - 1). One launch: a second launch for the per-row part cost ~2.8 us of an
// H200 decode step for ~0.1 us of work. Launched as a programmatic dependent of the LM head.
template <class T>
__global__ void __launch_bounds__(kGreedyThreads) GreedyKernel(const T* __restrict__ logits, int64_t V, GreedyRow* rows,
                                                               const uint32_t* kv_pos, const uint32_t* log_in, int64_t n,
                                                               uint32_t* token, uint32_t* next_pos, uint32_t* log_out) {
  __shared__ unsigned long long shared[kGreedyThreads / 32];
  __shared__ bool last;
  const int64_t b = blockIdx.y;
  GridDependencyWait();  // the logits are the previous kernel's output
  const unsigned long long key = SliceMax(logits + b * V, V, shared);
  if (threadIdx.x == 0) {
    atomicMax(&rows[b].key, key);
    __threadfence();
    last = atomicAdd(&rows[b].done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  if (log_out != log_in)
    for (int64_t j = threadIdx.x; j < n; j += kGreedyThreads) log_out[b * n + j] = log_in[b * n + j];
  __syncthreads();  // the copy before the token's write
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long best = atomicExch(&rows[b].key, 0ull);
    rows[b].done = 0;
    const uint32_t chosen = 0xffffffffu - static_cast<uint32_t>(best);
    const uint32_t p1 = kv_pos[b] + 1u;  // modulo 2^32; read before next_pos (kv_pos's buffer in place) is written
    token[b] = chosen;
    next_pos[b] = p1;
    log_out[b * n + (static_cast<int64_t>(p1) < n ? static_cast<int64_t>(p1) : n - 1)] = chosen;
  }
}

template <class T>
int LaunchGreedyStep(const T* logits, int64_t B, int64_t V, const uint32_t* kv_pos, const uint32_t* log_in, int64_t n, uint32_t* token,
                     uint32_t* next_pos, uint32_t* log_out, MnScratch* scratch, cudaStream_t s) {
  const int64_t slices = (V + kGreedySlice - 1) / kGreedySlice;  // V <= 2^32: <= 2^20 slices
  void* rows = nullptr;
  int fresh = 0;
  if (int e = mn_cuda_scratch_get(scratch, s, sizeof(GreedyRow) * B, kGreedyLayout, &rows, &fresh)) return e;
  if (fresh)
    if (cudaError_t e = cudaMemsetAsync(rows, 0, sizeof(GreedyRow) * B, s)) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(slices), static_cast<unsigned>(B));
  cfg.blockDim = dim3(kGreedyThreads);
  cfg.stream = s;
  cudaLaunchAttribute pdl;  // its blocks start as the LM head's end
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &pdl;
  cfg.numAttrs = HasPdl() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, GreedyKernel<T>, logits, V, static_cast<GreedyRow*>(rows), kv_pos, log_in, n, token, next_pos, log_out);
}

}  // namespace

extern "C" {

const char* mn_cuda_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int mn_cuda_read_pos(MnPos pos, void* stream, int64_t* values, int* captured) {
  *captured = 0;
  if (pos.type == MN_POS_NONE || pos.count <= 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaError_t e = cudaStreamIsCapturing(s, &status)) return e;
  if (status != cudaStreamCaptureStatusNone) {
    *captured = 1;
    return 0;
  }
  const size_t width = pos.type == MN_POS_I64 ? sizeof(int64_t) : sizeof(int32_t);
  std::vector<unsigned char> raw(width * static_cast<size_t>(pos.count));
  if (cudaError_t e = cudaMemcpyAsync(raw.data(), pos.ptr, raw.size(), cudaMemcpyDeviceToHost, s)) return e;
  if (cudaError_t e = cudaStreamSynchronize(s)) return e;
  for (int64_t i = 0; i < pos.count; ++i) {
    const unsigned char* p = raw.data() + width * i;
    if (pos.type == MN_POS_I64) {
      int64_t v;
      memcpy(&v, p, sizeof v);
      values[i] = v;
    } else if (pos.type == MN_POS_I32) {
      int32_t v;
      memcpy(&v, p, sizeof v);
      values[i] = v;
    } else {
      uint32_t v;
      memcpy(&v, p, sizeof v);
      values[i] = v;
    }
  }
  return 0;
}

int mn_cuda_rope(int dtype, const void* x, void* y, int64_t B, int64_t Srows, int64_t D, int64_t head_dim, int64_t offset,
                 MnPos dyn, const float* inv_freq, void* stream) {
  if (B * Srows * (D / 2) == 0) return 0;
  if (head_dim / 2 > MN_ROPE_MAX_HALF || head_dim < 2 || D % head_dim != 0) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(x)) return e;
  const InvFreq inv = MakeInvFreq(inv_freq, head_dim);
  switch (dtype) {
    case MN_F16:
      return LaunchRope(static_cast<const __half*>(x), static_cast<__half*>(y), B, Srows, D, head_dim, offset, dyn, inv, S(stream));
    case MN_BF16:
      return LaunchRope(static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), B, Srows, D, head_dim, offset, dyn,
                        inv, S(stream));
    default:
      return LaunchRope(static_cast<const float*>(x), static_cast<float*>(y), B, Srows, D, head_dim, offset, dyn, inv, S(stream));
  }
}

int mn_cuda_cache_write(size_t elem_bytes, const void* new_rows, const void* cache, void* out, int64_t B, int64_t T, int64_t dim,
                        int64_t max_seq, MnPos kv_pos, void* stream) {
  if (B * max_seq * dim == 0) return 0;
  if (int e = UseDeviceOf(cache)) return e;
  cudaStream_t s = S(stream);
  cudaError_t e = cudaSuccess;
  if (out != cache) e = cudaMemcpyAsync(out, cache, elem_bytes * B * max_seq * dim, cudaMemcpyDeviceToDevice, s);
  if (e != cudaSuccess || T * dim == 0 || T > max_seq) return e;  // T > max_seq: no position is valid
  const int64_t row_bytes = static_cast<int64_t>(elem_bytes) * dim;
  const bool vec = row_bytes % 16 == 0 && ((reinterpret_cast<uintptr_t>(new_rows) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  const int64_t unit = vec ? 16 : static_cast<int64_t>(elem_bytes);
  const int64_t row = row_bytes / unit, n = B * T * row;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  if (unit == 16)
    CacheWriteKernel<uint4><<<blocks, threads, 0, s>>>(static_cast<const uint4*>(new_rows), static_cast<uint4*>(out), n, row, T,
                                                       max_seq, kv_pos);
  else if (unit == 4)
    CacheWriteKernel<uint32_t><<<blocks, threads, 0, s>>>(static_cast<const uint32_t*>(new_rows), static_cast<uint32_t*>(out), n,
                                                          row, T, max_seq, kv_pos);
  else
    CacheWriteKernel<uint16_t><<<blocks, threads, 0, s>>>(static_cast<const uint16_t*>(new_rows), static_cast<uint16_t*>(out), n,
                                                          row, T, max_seq, kv_pos);
  return cudaGetLastError();
}

int mn_cuda_read_indices(const void* idx, size_t bytes, void* host, void* stream, int* captured) {
  *captured = 0;
  if (bytes == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaError_t e = cudaStreamIsCapturing(s, &status)) return e;
  if (status != cudaStreamCaptureStatusNone) {
    *captured = 1;
    return 0;
  }
  if (cudaError_t e = cudaMemcpyAsync(host, idx, bytes, cudaMemcpyDeviceToHost, s)) return e;
  return cudaStreamSynchronize(s);
}

int mn_cuda_scatter_add_f32(MnPos idx, const float* src, float* out, int64_t N, int64_t D, int64_t num_rows, void* stream) {
  if (num_rows * D == 0) return 0;
  if (int e = UseDeviceOf(out)) return e;
  cudaStream_t s = S(stream);
  cudaError_t e = cudaMemsetAsync(out, 0, sizeof(float) * num_rows * D, s);
  if (e != cudaSuccess || N * D == 0) return e;
  int* bad = nullptr;  // stream-ordered: a graph allocation node under capture, freed in the same graph
  if (int r = ScratchAlloc(reinterpret_cast<void**>(&bad), sizeof(int), s)) return r;
  e = cudaMemsetAsync(bad, 0, sizeof(int), s);
  if (e == cudaSuccess) {
    const int64_t n = N * D;
    const int blocks = static_cast<int>(n / 256 + 1 < 65536 * 16 ? n / 256 + 1 : 65536 * 16);
    ScatterAddKernel<<<blocks, 256, 0, s>>>(idx, src, out, N, D, num_rows, bad);
    const int64_t m = num_rows * D;
    PoisonIfBad<<<static_cast<int>(std::min<int64_t>((m + 255) / 256, 4096)), 256, 0, s>>>(bad, out, m);
    e = cudaGetLastError();
  }
  cudaFreeAsync(bad, s);
  return e;
}

int mn_cuda_greedy_step(int dtype, const void* logits, int64_t B, int64_t V, const uint32_t* kv_pos, const uint32_t* log_in, int64_t n,
                        uint32_t* token, uint32_t* next_pos, uint32_t* log_out, MnScratch* scratch, void* stream) {
  if (B == 0) return 0;
  if (B > 65535) return cudaErrorInvalidValue;  // the grid's y: the caller's checks keep B far below (CheckGreedyStep)
  if (int e = UseDeviceOf(token)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16)
    return LaunchGreedyStep(static_cast<const __half*>(logits), B, V, kv_pos, log_in, n, token, next_pos, log_out, scratch, s);
  if (dtype == MN_BF16)
    return LaunchGreedyStep(static_cast<const __nv_bfloat16*>(logits), B, V, kv_pos, log_in, n, token, next_pos, log_out, scratch, s);
  return LaunchGreedyStep(static_cast<const float*>(logits), B, V, kv_pos, log_in, n, token, next_pos, log_out, scratch, s);
}

}  // extern "C"
