// CUDA kernels of the fused ops SwiGLU, SwiGLUPacked, SwiGLUGrad, RMSNormGrad, RopeCacheWrite, QKVRopeCacheWrite and AddRMSNorm; called
// through cuda_fused.h.
// Templated over the element type (float, __half, __nv_bfloat16: Elem<T> of cuda_common.cuh), float32 math.
#include "cuda_common.cuh"
#include "cuda_fused.h"

namespace {

template <class T>
__global__ void SwiGLUKernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float g = Elem<T>::ToF(gate[i]);
    out[i] = Elem<T>::FromF(g / (1.0f + expf(-g)) * Elem<T>::ToF(up[i]));
  }
}

// SwiGLUPacked: out[i] for i < rows * f, i = r * f + j, from the row's gate x[r * 2f + j] and up f further. I is the
// index type: 32-bit where rows * 2f fits (the division is cheaper), int64 above (no overflow at any size).
template <class T, class I>
__global__ void SwiGLUPackedKernel(const T* __restrict__ x, T* __restrict__ out, I n, I f) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    const I r = i / f, j = i - r * f;
    const T* row = x + r * 2 * f;
    const float g = Elem<T>::ToF(row[j]);
    out[i] = Elem<T>::FromF(g / (1.0f + expf(-g)) * Elem<T>::ToF(row[f + j]));
  }
}

// SwiGLU's backward: s = sigmoid(g), dgate = dy * up * s * (1 + g * (1 - s)), dup = dy * g * s.
__device__ __forceinline__ void SwiGLUGradValue(float g, float u, float d, float* dg, float* du) {
  const float s = 1.0f / (1.0f + expf(-g));  // expf(+large) = inf gives s = 0, as it should; the kernel is memory-bound
  *dg = d * u * (s * (1.0f + g * (1.0f - s)));
  *du = d * (g * s);
}

// Five streams of n elements: 16-byte loads and stores (EPC elements per thread and step) when every
// pointer is 16-byte aligned, the tail (n % EPC, or everything when not aligned) element by element.
template <class T>
__global__ void SwiGLUGradKernel(const T* __restrict__ gate, const T* __restrict__ up, const T* __restrict__ dy, T* __restrict__ dgate,
                                 T* __restrict__ dup, int64_t n, bool vec) {
  constexpr int V = Elem<T>::EPC;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t chunks = vec ? n / V : 0;
  for (int64_t c = first; c < chunks; c += stride) {
    float g[V], u[V], d[V], dg[V], du[V];
    Elem<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(gate) + c), g);
    Elem<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(up) + c), u);
    Elem<T>::Unpack(__ldg(reinterpret_cast<const uint4*>(dy) + c), d);
#pragma unroll
    for (int k = 0; k < V; ++k) SwiGLUGradValue(g[k], u[k], d[k], &dg[k], &du[k]);
    reinterpret_cast<uint4*>(dgate)[c] = Elem<T>::Pack(dg);
    reinterpret_cast<uint4*>(dup)[c] = Elem<T>::Pack(du);
  }
  for (int64_t i = chunks * V + first; i < n; i += stride) {
    float dg, du;
    SwiGLUGradValue(Elem<T>::ToF(gate[i]), Elem<T>::ToF(up[i]), Elem<T>::ToF(dy[i]), &dg, &du);
    dgate[i] = Elem<T>::FromF(dg);
    dup[i] = Elem<T>::FromF(du);
  }
}

// RMSNorm's backward, blocks of kRmsThreads over `rows_per_block` consecutive rows each: per row, sum(x^2) and
// sum(dy * w * x) in float32 (warp shuffles, then one warp over the warps' sums), then dx = r * dy * w - x * r^3 *
// mean(dy * w * x). With `partial` (dweight wanted), thread t also adds dy * x * r of its columns t, t + kRmsThreads,
// ... into its block's partial row (shared memory when `smem`, else the block's row of `partial` itself; a column
// is only ever touched by one thread, so no synchronisation), written to partial[block] at the end; RMSNormGradColumns
// then sums the blocks' rows in a fixed order. The split depends on the shape only: deterministic, no atomics.
constexpr int kRmsThreads = 256;
constexpr int64_t kRmsMaxBlocks = 512;             // partial rows of dweight (rows_per_block = ceil(rows / 512))
constexpr int64_t kRmsSmemCols = 48 * 1024 / 4;    // widest row whose partial sums fit the default 48 KB of shared memory

__device__ __forceinline__ float2 BlockSum2(float2 v) {
  __shared__ float2 warp_sums[kRmsThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < kRmsThreads / 32 ? warp_sums[lane] : make_float2(0.0f, 0.0f);
  __syncthreads();  // every warp has read warp_sums before the next row's sums overwrite it
  for (int o = 16; o > 0; o >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, o);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, o);
  }
  return v;  // every thread holds the block's sums
}

template <class T>
__global__ void __launch_bounds__(kRmsThreads)
    RMSNormGradKernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy, T* __restrict__ dx,
                      float* __restrict__ partial, int64_t rows, int64_t n, int64_t rows_per_block, float eps, bool smem) {
  extern __shared__ float smem_acc[];
  float* acc = partial == nullptr ? nullptr : smem ? smem_acc : partial + blockIdx.x * n;
  if (acc != nullptr)
    for (int64_t i = threadIdx.x; i < n; i += kRmsThreads) acc[i] = 0.0f;
  const int64_t first = blockIdx.x * rows_per_block, last = min(rows, first + rows_per_block);
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t row = first; row < last; ++row) {
    const T* xr = x + row * n;
    const T* dr = dy + row * n;
    float2 sums = make_float2(0.0f, 0.0f);
    for (int64_t i = threadIdx.x; i < n; i += kRmsThreads) {
      const float xi = Elem<T>::ToF(xr[i]);
      sums.x += xi * xi;
      sums.y += Elem<T>::ToF(dr[i]) * Elem<T>::ToF(w[i]) * xi;
    }
    sums = BlockSum2(sums);
    const float r = rsqrtf(sums.x * inv_n + eps);
    const float c = r * r * r * sums.y * inv_n;
    T* out = dx + row * n;
    for (int64_t i = threadIdx.x; i < n; i += kRmsThreads) {  // the second read of the row hits L1/L2
      const float xi = Elem<T>::ToF(xr[i]), di = Elem<T>::ToF(dr[i]);
      out[i] = Elem<T>::FromF(r * (di * Elem<T>::ToF(w[i])) - xi * c);
      if (acc != nullptr) acc[i] += di * (xi * r);
    }
  }
  if (acc != nullptr && smem)
    for (int64_t i = threadIdx.x; i < n; i += kRmsThreads) partial[blockIdx.x * n + i] = acc[i];
}

// dweight[col] = sum over b < blocks of partial[b][col]: a block per 32 columns, its 8 thread rows each sum
// the partial rows y, y + 8, ... in order, then thread row 0 adds the 8 sums in order (a fixed tree).
__global__ void __launch_bounds__(256) RMSNormGradColumns(const float* __restrict__ partial, float* __restrict__ dw, int64_t blocks,
                                                          int64_t n) {
  __shared__ float sums[8][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (col < n)
    for (int64_t b = threadIdx.y; b < blocks; b += 8) s += partial[b * n + col];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) total += sums[k][threadIdx.x];
    dw[col] = total;
  }
}

// AddRMSNorm, a block of kRmsThreads per row (grid-stride over the rows, so the loop count is the same for
// every thread of a block and BlockSum2's barriers are reached by all): thread t adds the columns t, t +
// kRmsThreads, ... in float32, stores the sum rounded to T and sums the squares of the rounded values; then
// recomputes the same rounded sums (the second read of the row hits L1/L2) for y = s * r * w.
template <class T>
__device__ __forceinline__ float RoundedSum(const T* x, const T* res, int64_t i, T* stored) {
  const T s = Elem<T>::FromF(Elem<T>::ToF(x[i]) + Elem<T>::ToF(res[i]));
  if (stored != nullptr) *stored = s;
  return Elem<T>::ToF(s);
}

template <class T>
__global__ void __launch_bounds__(kRmsThreads)
    AddRMSNormKernel(const T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ w, T* __restrict__ y, T* __restrict__ sum,
                     int64_t rows, int64_t n, float eps) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    const T* rr = res + row * n;
    T* sr = sum + row * n;
    float2 ss = make_float2(0.0f, 0.0f);
    for (int64_t i = threadIdx.x; i < n; i += kRmsThreads) {
      const float s = RoundedSum(xr, rr, i, sr + i);
      ss.x += s * s;
    }
    const float r = rsqrtf(BlockSum2(ss).x * inv_n + eps);
    T* yr = y + row * n;
    for (int64_t i = threadIdx.x; i < n; i += kRmsThreads) yr[i] = Elem<T>::FromF(RoundedSum<T>(xr, rr, i, nullptr) * r * Elem<T>::ToF(w[i]));
  }
}

struct FusedInvFreq {
  float v[MN_ROPE_MAX_HALF];
};

// One thread per (row, head, j < hd/2) pair: reads x[j] and x[j + hd/2], writes both rotated values
// straight into the cache row kv_pos + r (the Rope kernel's arithmetic, the CacheWrite kernel's guard).
template <class T>
__global__ void RopeCacheWriteKernel(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t dim, int half,
                                     int64_t max_seq, MnPos pos, FusedInvFreq inv) {
  const int64_t kv = LoadPos(pos);
  if (kv < 0 || kv > max_seq - rows) return;
  const int64_t pairs_per_row = dim / 2, n = rows * pairs_per_row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / pairs_per_row, k = i % pairs_per_row;
    const int64_t h = k / half;
    const int j = static_cast<int>(k % half);
    const int64_t col = h * 2 * half + j;
    const float ang = static_cast<float>(kv + r) * inv.v[j];
    float sn, cs;
    sincosf(ang, &sn, &cs);
    const float a = Elem<T>::ToF(x[r * dim + col]), b = Elem<T>::ToF(x[r * dim + col + half]);
    T* row = out + (kv + r) * dim;
    float ya, yb;
    RotatePair(a, b, cs, sn, &ya, &yb);
    row[col] = Elem<T>::FromF(ya);
    row[col + half] = Elem<T>::FromF(yb);
  }
}

// QKVRopeCacheWrite: one thread per item of a row r (sequence b, token t) of qkv [rows, (H + 2 KVH) hd]: the (H + KVH) * hd/2
// rotate-half pairs of q and k (q's into q_rot row r, k's into the K cache row kv_pos[b] + t; the Rope kernel's
// arithmetic), then the KVH * hd values of v (copied into the V cache row). A sequence whose kv_pos is outside
// [0, max_seq - T] writes no cache row and NaN into its q_rot rows (made visible, never silently wrong).
template <class T>
__global__ void QkvRopeKernel(const T* __restrict__ qkv, T* __restrict__ q_rot, T* __restrict__ kc, T* __restrict__ vc, int64_t rows,
                              int64_t seq_rows, int64_t H, int64_t KVH, int half, int64_t max_seq, MnPos pos, FusedInvFreq inv) {
  const int64_t hd = 2 * static_cast<int64_t>(half), qw = H * hd, kvw = KVH * hd, width = qw + 2 * kvw;
  const int64_t pairs = (H + KVH) * half, per_row = pairs + kvw, n = rows * per_row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / per_row, k = i % per_row, b = r / seq_rows, t = r % seq_rows;
    const int64_t kv = LoadPos(pos, b);
    const bool valid = kv >= 0 && kv <= max_seq - seq_rows;
    const T* src = qkv + r * width;
    const int64_t cache_row = (b * max_seq + (valid ? kv + t : 0)) * kvw;
    if (k >= pairs) {  // a value of v
      if (valid) vc[cache_row + (k - pairs)] = src[qw + kvw + (k - pairs)];
      continue;
    }
    const int64_t h = k / half;  // heads 0..H-1: q, then k
    const int j = static_cast<int>(k % half);
    if (h >= H && !valid) continue;
    const int64_t col = h * hd + j;
    float sn, cs;
    sincosf(static_cast<float>(valid ? kv + t : 0) * inv.v[j], &sn, &cs);  // kv + t may overflow when invalid
    if (!valid) cs = sn = __int_as_float(0x7fc00000);
    const float a = Elem<T>::ToF(src[col]), c = Elem<T>::ToF(src[col + half]);
    float ya, yb;
    RotatePair(a, c, cs, sn, &ya, &yb);
    T* out = h < H ? q_rot + r * qw + col : kc + cache_row + (col - qw);
    out[0] = Elem<T>::FromF(ya);
    out[half] = Elem<T>::FromF(yb);
  }
}

int Blocks(int64_t n, int threads) { return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65536)); }

template <class T>
int SwiGLU(const void* gate, const void* up, void* out, int64_t n, cudaStream_t s) {
  SwiGLUKernel<T><<<Blocks(n, 256), 256, 0, s>>>(static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), n);
  return cudaGetLastError();
}

template <class T>
int SwiGLUPacked(const void* x, void* out, int64_t rows, int64_t f, cudaStream_t s) {
  const int64_t n = rows * f;
  const T* in = static_cast<const T*>(x);
  T* o = static_cast<T*>(out);
  if (2 * n <= static_cast<int64_t>(UINT32_MAX))
    SwiGLUPackedKernel<T, uint32_t><<<Blocks(n, 256), 256, 0, s>>>(in, o, static_cast<uint32_t>(n), static_cast<uint32_t>(f));
  else
    SwiGLUPackedKernel<T, int64_t><<<Blocks(n, 256), 256, 0, s>>>(in, o, n, f);
  return cudaGetLastError();
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <class T>
int SwiGLUGrad(const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n, cudaStream_t s) {
  const bool vec = Aligned16(gate) && Aligned16(up) && Aligned16(dy) && Aligned16(dgate) && Aligned16(dup);
  const int64_t work = vec ? n / Elem<T>::EPC + n % Elem<T>::EPC : n;
  SwiGLUGradKernel<T><<<Blocks(work, 256), 256, 0, s>>>(static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(dy),
                                                        static_cast<T*>(dgate), static_cast<T*>(dup), n, vec);
  return cudaGetLastError();
}

template <class T>
int RMSNormGrad(const void* x, const void* w, const void* dy, void* dx, float* dw, int64_t rows, int64_t n, float eps, cudaStream_t s) {
  const T *xs = static_cast<const T*>(x), *ws = static_cast<const T*>(w), *ds = static_cast<const T*>(dy);
  if (dw == nullptr) {  // dx only: one block per row
    RMSNormGradKernel<T><<<static_cast<unsigned>(rows), kRmsThreads, 0, s>>>(xs, ws, ds, static_cast<T*>(dx), nullptr, rows, n, 1, eps,
                                                                             false);
    return cudaGetLastError();
  }
  const int64_t per_block = (rows + kRmsMaxBlocks - 1) / kRmsMaxBlocks, blocks = (rows + per_block - 1) / per_block;
  float* partial = nullptr;
  if (int e = ScratchAlloc(reinterpret_cast<void**>(&partial), sizeof(float) * blocks * n, s)) return e;
  const bool smem = n <= kRmsSmemCols;
  RMSNormGradKernel<T><<<static_cast<unsigned>(blocks), kRmsThreads, smem ? sizeof(float) * n : 0, s>>>(
      xs, ws, ds, static_cast<T*>(dx), partial, rows, n, per_block, eps, smem);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) {
    RMSNormGradColumns<<<static_cast<unsigned>((n + 31) / 32), dim3(32, 8), 0, s>>>(partial, dw, blocks, n);
    e = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(partial, s);
  return e ? e : freed;
}

template <class T>
int AddRMSNorm(const void* x, const void* res, const void* w, void* y, void* sum, int64_t rows, int64_t n, float eps, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 1 << 20));
  AddRMSNormKernel<T><<<blocks, kRmsThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(res), static_cast<const T*>(w),
                                                     static_cast<T*>(y), static_cast<T*>(sum), rows, n, eps);
  return cudaGetLastError();
}

template <class T>
int RopeCacheWrite(const void* new_rows, const void* cache, void* out, int64_t rows, int64_t dim, int64_t max_seq, int64_t head_dim,
                   const float* inv_freq, MnPos kv_pos, cudaStream_t s) {
  cudaError_t e = cudaSuccess;
  if (out != cache) e = cudaMemcpyAsync(out, cache, sizeof(T) * max_seq * dim, cudaMemcpyDeviceToDevice, s);
  if (e != cudaSuccess || rows * dim == 0 || rows > max_seq) return e;  // rows > max_seq: no position is valid
  FusedInvFreq inv;
  for (int64_t j = 0; j < head_dim / 2; ++j) inv.v[j] = inv_freq[j];
  RopeCacheWriteKernel<T><<<Blocks(rows * (dim / 2), 256), 256, 0, s>>>(static_cast<const T*>(new_rows), static_cast<T*>(out), rows, dim,
                                                                         static_cast<int>(head_dim / 2), max_seq, kv_pos, inv);
  return cudaGetLastError();
}

template <class T>
int QkvRope(const void* qkv, const void* k_cache, const void* v_cache, void* q_rot, void* kc, void* vc, int64_t B, int64_t seq_rows,
            int64_t H, int64_t KVH, int64_t head_dim, int64_t max_seq, const float* inv_freq, MnPos kv_pos, cudaStream_t s) {
  const size_t cache_bytes = sizeof(T) * static_cast<size_t>(B * max_seq * KVH * head_dim);
  cudaError_t e = cudaSuccess;
  if (kc != k_cache) e = cudaMemcpyAsync(kc, k_cache, cache_bytes, cudaMemcpyDeviceToDevice, s);
  if (e == cudaSuccess && vc != v_cache) e = cudaMemcpyAsync(vc, v_cache, cache_bytes, cudaMemcpyDeviceToDevice, s);
  if (e != cudaSuccess || B * seq_rows == 0 || seq_rows > max_seq) return e;  // seq_rows > max_seq: no position is valid
  FusedInvFreq inv;
  for (int64_t j = 0; j < head_dim / 2; ++j) inv.v[j] = inv_freq[j];
  const int64_t n = B * seq_rows * ((H + KVH) * (head_dim / 2) + KVH * head_dim);
  QkvRopeKernel<T><<<Blocks(n, 256), 256, 0, s>>>(static_cast<const T*>(qkv), static_cast<T*>(q_rot), static_cast<T*>(kc),
                                                  static_cast<T*>(vc), B * seq_rows, seq_rows, H, KVH, static_cast<int>(head_dim / 2),
                                                  max_seq, kv_pos, inv);
  return cudaGetLastError();
}

}  // namespace

extern "C" {

int mn_cuda_qkv_rope_cache_write(int dtype, const void* qkv, const void* k_cache, const void* v_cache, void* q_rot, void* kc, void* vc,
                                 int64_t B, int64_t T, int64_t H, int64_t KVH, int64_t head_dim, int64_t max_seq, const float* inv_freq,
                                 MnPos kv_pos, void* stream) {
  if (B * max_seq * KVH == 0) return 0;
  if (head_dim / 2 > MN_ROPE_MAX_HALF || head_dim < 2 || head_dim % 2 != 0) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(k_cache)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return QkvRope<__half>(qkv, k_cache, v_cache, q_rot, kc, vc, B, T, H, KVH, head_dim, max_seq, inv_freq, kv_pos, s);
  if (dtype == MN_BF16)
    return QkvRope<__nv_bfloat16>(qkv, k_cache, v_cache, q_rot, kc, vc, B, T, H, KVH, head_dim, max_seq, inv_freq, kv_pos, s);
  return QkvRope<float>(qkv, k_cache, v_cache, q_rot, kc, vc, B, T, H, KVH, head_dim, max_seq, inv_freq, kv_pos, s);
}

int mn_cuda_swiglu(int dtype, const void* gate, const void* up, void* out, int64_t n, void* stream) {
  if (n == 0) return 0;
  if (int e = UseDeviceOf(gate)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return SwiGLU<__half>(gate, up, out, n, s);
  if (dtype == MN_BF16) return SwiGLU<__nv_bfloat16>(gate, up, out, n, s);
  return SwiGLU<float>(gate, up, out, n, s);
}

int mn_cuda_swiglu_packed(int dtype, const void* x, void* out, int64_t rows, int64_t f, void* stream) {
  if (rows <= 0 || f <= 0) return 0;  // empty output
  if (int e = UseDeviceOf(x)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return SwiGLUPacked<__half>(x, out, rows, f, s);
  if (dtype == MN_BF16) return SwiGLUPacked<__nv_bfloat16>(x, out, rows, f, s);
  return SwiGLUPacked<float>(x, out, rows, f, s);
}

int mn_cuda_swiglu_grad(int dtype, const void* gate, const void* up, const void* dy, void* dgate, void* dup, int64_t n, void* stream) {
  if (n == 0) return 0;
  if (int e = UseDeviceOf(gate)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return SwiGLUGrad<__half>(gate, up, dy, dgate, dup, n, s);
  if (dtype == MN_BF16) return SwiGLUGrad<__nv_bfloat16>(gate, up, dy, dgate, dup, n, s);
  return SwiGLUGrad<float>(gate, up, dy, dgate, dup, n, s);
}

int mn_cuda_rms_norm_grad(int dtype, const void* x, const void* w, const void* dy, void* dx, float* dw, int64_t rows, int64_t n,
                          float eps, void* stream) {
  if (n == 0) return 0;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // at most one block per row
  if (int e = UseDeviceOf(dx != nullptr && rows > 0 ? dx : dw)) return e;
  cudaStream_t s = S(stream);
  if (rows == 0) return dw != nullptr ? cudaMemsetAsync(dw, 0, sizeof(float) * n, s) : 0;  // an empty sum
  if (dtype == MN_F16) return RMSNormGrad<__half>(x, w, dy, dx, dw, rows, n, eps, s);
  if (dtype == MN_BF16) return RMSNormGrad<__nv_bfloat16>(x, w, dy, dx, dw, rows, n, eps, s);
  return RMSNormGrad<float>(x, w, dy, dx, dw, rows, n, eps, s);
}

int mn_cuda_add_rms_norm(int dtype, const void* x, const void* residual, const void* w, void* y, void* sum, int64_t rows, int64_t n,
                         float eps, void* stream) {
  if (rows <= 0 || n <= 0) return 0;  // empty outputs
  if (int e = UseDeviceOf(y)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return AddRMSNorm<__half>(x, residual, w, y, sum, rows, n, eps, s);
  if (dtype == MN_BF16) return AddRMSNorm<__nv_bfloat16>(x, residual, w, y, sum, rows, n, eps, s);
  return AddRMSNorm<float>(x, residual, w, y, sum, rows, n, eps, s);
}

int mn_cuda_rope_cache_write(int dtype, const void* new_rows, const void* cache, void* out, int64_t T, int64_t dim, int64_t max_seq,
                             int64_t head_dim, const float* inv_freq, MnPos kv_pos, void* stream) {
  if (max_seq * dim == 0) return 0;
  if (head_dim / 2 > MN_ROPE_MAX_HALF || head_dim < 2) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(cache)) return e;
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return RopeCacheWrite<__half>(new_rows, cache, out, T, dim, max_seq, head_dim, inv_freq, kv_pos, s);
  if (dtype == MN_BF16) return RopeCacheWrite<__nv_bfloat16>(new_rows, cache, out, T, dim, max_seq, head_dim, inv_freq, kv_pos, s);
  return RopeCacheWrite<float>(new_rows, cache, out, T, dim, max_seq, head_dim, inv_freq, kv_pos, s);
}

}  // extern "C"
