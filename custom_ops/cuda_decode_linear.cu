// CUDA kernels of RMSNormLinear and RMSNormSwiGLU (small-row GEMVs with the RMSNorm as their prologue)
// and LinearResidual (the same GEMV without the norm, the residual added in its epilogue). Called
// through cuda_decode_linear.h (cuda_decode_linear_ops.cc, decode_linear_check.cu).
//
// A decode step multiplies M = 1..16 rows by weights of a few MB: the time is the weight read. Every
// block first normalises (LinearResidual: converts) its tile of x rows into shared memory (float32; x is
// a few KB, so each block recomputing the norm costs less than a second launch), then:
//   trans_b (w [N, K], torch's layout): one warp per output column, its lanes reading the weight row in
//     16-byte chunks (4 floats or 8 halves) and multiplying each chunk with all the tile's rows held in
//     shared memory; a warp reduction per row. Each weight element is read once per launch.
//   [K, N] (w [K, N]): one thread per column of a 32-column tile, the block's 8 warps splitting K, the
//     partial sums reduced through shared memory; reads are coalesced across the 32 columns.
// The columns of all the weights of one call form one index space, so one launch covers q, k and v
// (960 columns of SmolLM2-135M: 120 blocks of 8 warps for 132 SMs).
// Rows beyond 16, or beyond what 48 KB of float32 rows hold, go in several launches (a prefill is
// not routed here: the graph pass fuses only static row counts <= 16).
#include "cuda_common.cuh"
#include "cuda_decode_linear.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxWeights = 8;  // weights per launch (more go in several launches)
constexpr int kTile = 32;       // columns per block of the [K, N] kernel
constexpr int64_t kSmemBytes = 4 * MN_NORM_LINEAR_MAX_K;  // the rows' share of 48 KB (the rest: static)
bool g_decode_linear_pdl = true;  // programmatic dependent launch where the GPU has it (decode_linear_check --no-pdl compares)

struct Projections {
  const void* w[kMaxWeights];
  void* y[kMaxWeights];
  int64_t n[kMaxWeights];    // output width of each weight
  int64_t end[kMaxWeights];  // cumulative work items (columns, or [K, N] tiles) up to and including weight i
  int count;
  const void* residual;  // LinearResidual: [rows, n[0]], added to the product
  int group;             // columns per warp of GroupedKernel (ColumnGroup)
};

// What a launch computes: y_i = xn @ w_i (Linear), silu(xn @ w_0) * (xn @ w_1) (SwiGLU), both after
// the RMSNorm; or y_0 = x @ w_0 + residual (Residual), no norm.
enum Mode { kLinear, kSwiGLU, kResidual };

__device__ __forceinline__ int Which(const Projections& p, int64_t item) {
  int i = 0;
  while (i + 1 < p.count && item >= p.end[i]) ++i;
  return i;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

// xn [rows, K] (shared) = x / sqrt(mean(x^2) + eps) * gamma for the tile's rows (x points at its first row).
template <class T, int MT>
__device__ void NormalizeTile(const T* __restrict__ x, const T* __restrict__ gamma, int64_t K, int rows, float eps, float* xn) {
  __shared__ float partial[kWarps][MT];
  __shared__ float inv_rms[MT];
  const int tid = threadIdx.x + threadIdx.y * blockDim.x;
  float ss[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) ss[m] = 0.0f;
  for (int64_t k = tid; k < K; k += kThreads) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
      if (m < rows) {
        const float v = Elem<T>::ToF(x[m * K + k]);
        ss[m] += v * v;
      }
  }
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    const float s = WarpSum(ss[m]);
    if ((tid & 31) == 0) partial[tid >> 5][m] = s;
  }
  __syncthreads();
  if (tid < rows) {
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += partial[w][tid];
    inv_rms[tid] = rsqrtf(s / static_cast<float>(K) + eps);
  }
  __syncthreads();
  // Row by row: no 64-bit division of the flat index by K, and one reciprocal square root per row
  // instead of an IEEE division per element (the LM head's 1056 blocks each normalise x).
  for (int m = 0; m < rows; ++m)
    for (int64_t k = tid; k < K; k += kThreads) xn[m * K + k] = Elem<T>::ToF(x[m * K + k]) * inv_rms[m] * Elem<T>::ToF(gamma[k]);
  __syncthreads();
}

// xn [rows, K] (shared) = x as float32 (LinearResidual's rows: no norm).
template <class T>
__device__ void LoadTile(const T* __restrict__ x, int64_t K, int rows, float* xn) {
  const int tid = threadIdx.x + threadIdx.y * blockDim.x;
  for (int64_t i = tid; i < rows * K; i += kThreads) xn[i] = Elem<T>::ToF(x[i]);
  __syncthreads();
}

template <class T, int MT, int MODE>
__device__ __forceinline__ void PrepareTile(const T* x, const T* gamma, int64_t K, int rows, float eps, float* xn) {
  if (MODE == kResidual)
    LoadTile(x, K, rows, xn);
  else
    NormalizeTile<T, MT>(x, gamma, K, rows, eps, xn);
}

// The output value of row m, column n from its product g (and the up projection u for SwiGLU).
template <class T, int MODE>
__device__ __forceinline__ T Epilogue(const Projections& p, float g, float u, int64_t m, int64_t n, int64_t N) {
  if (MODE == kSwiGLU) return Elem<T>::FromF(Silu(g) * u);
  if (MODE == kResidual) return Elem<T>::FromF(g + Elem<T>::ToF(static_cast<const T*>(p.residual)[m * N + n]));
  return Elem<T>::FromF(g);
}

// A lane's first kPrefetch 16-byte chunks of a weight row (and of the up projection's row), held in
// registers. They are loaded before the normalisation, and under PDL before the previous kernel has
// finished (weights never depend on it), so their DRAM latency overlaps that kernel's tail and the norm.
constexpr int kPrefetch = 8;

template <class T, bool SWIGLU>
struct RowChunks {
  uint4 a[kPrefetch], b[SWIGLU ? kPrefetch : 1];
  __device__ __forceinline__ void Load(const T* __restrict__ w, const T* __restrict__ w2, int64_t chunks, int lane) {
#pragma unroll
    for (int j = 0; j < kPrefetch; ++j) {
      const int64_t c = lane + 32 * j;
      if (c < chunks) {
        a[j] = __ldg(reinterpret_cast<const uint4*>(w) + c);
        if (SWIGLU) b[j] = __ldg(reinterpret_cast<const uint4*>(w2) + c);
      }
    }
  }
};

// Whether a weight row (and the up projection's) can be read in 16-byte chunks.
template <class T, bool SWIGLU>
__device__ __forceinline__ bool Vectorised(const T* w, const T* w2, int64_t K) {
  return K % Elem<T>::EPC == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && (!SWIGLU || reinterpret_cast<uintptr_t>(w2) % 16 == 0);
}

// acc[m] += dot(chunk of w, xn[m] at chunk c) (and acc2 with the up projection's chunk).
template <class T, int MT, bool SWIGLU>
__device__ __forceinline__ void ChunkDots(const uint4& wa, const uint4& wb, const float* xn, int64_t K, int64_t c, int rows, float* acc,
                                          float* acc2) {
  constexpr int EPC = Elem<T>::EPC;
  float a[EPC], b[EPC];
  Elem<T>::Unpack(wa, a);
  if (SWIGLU) Elem<T>::Unpack(wb, b);
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= rows) break;
    const float4* xr = reinterpret_cast<const float4*>(xn + m * K + c * EPC);
    float s = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int q = 0; q < EPC / 4; ++q) {
      const float4 v = xr[q];
      s += a[4 * q] * v.x + a[4 * q + 1] * v.y + a[4 * q + 2] * v.z + a[4 * q + 3] * v.w;
      if (SWIGLU) s2 += b[4 * q] * v.x + b[4 * q + 1] * v.y + b[4 * q + 2] * v.z + b[4 * q + 3] * v.w;
    }
    acc[m] += s;
    if (SWIGLU) acc2[m] += s2;
  }
}

// acc[m] += this lane's share of dot(xn[m], w) (and acc2 with w2 for SwiGLU's up projection); `held`
// has the row's first chunks when the row is Vectorised.
template <class T, int MT, bool SWIGLU>
__device__ __forceinline__ void LaneDots(const T* __restrict__ w, const T* __restrict__ w2, const RowChunks<T, SWIGLU>& held,
                                         const float* xn, int64_t K, int rows, int lane, float* acc, float* acc2) {
  if (Vectorised<T, SWIGLU>(w, w2, K)) {  // 16-byte loads of the weight row; the rows' chunks as float4 from shared memory
    const int64_t chunks = K / Elem<T>::EPC;
#pragma unroll
    for (int j = 0; j < kPrefetch; ++j)
      if (lane + 32 * j < chunks) ChunkDots<T, MT, SWIGLU>(held.a[j], held.b[SWIGLU ? j : 0], xn, K, lane + 32 * j, rows, acc, acc2);
#pragma unroll 4
    for (int64_t c = lane + 32 * kPrefetch; c < chunks; c += 32) {
      const uint4 wa = __ldg(reinterpret_cast<const uint4*>(w) + c);
      const uint4 wb = SWIGLU ? __ldg(reinterpret_cast<const uint4*>(w2) + c) : wa;
      ChunkDots<T, MT, SWIGLU>(wa, wb, xn, K, c, rows, acc, acc2);
    }
    return;
  }
  for (int64_t k = lane; k < K; k += 32) {  // odd K or unaligned weights: element loads
    const float a = Elem<T>::ToF(w[k]);
    const float b = SWIGLU ? Elem<T>::ToF(w2[k]) : 0.0f;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= rows) break;
      acc[m] += a * xn[m * K + k];
      if (SWIGLU) acc2[m] += b * xn[m * K + k];
    }
  }
}

// Column c's weight row (and the up projection's), its weight index and its column within that weight.
template <class T, bool SWIGLU>
__device__ __forceinline__ void ColumnRows(const Projections& p, int64_t c, int64_t K, const T** w, const T** w2, int* i, int64_t* n) {
  *i = SWIGLU ? 0 : Which(p, c);
  *n = c - (*i > 0 ? p.end[*i - 1] : 0);
  *w = static_cast<const T*>(p.w[*i]) + *n * K;
  *w2 = SWIGLU ? static_cast<const T*>(p.w[1]) + *n * K : nullptr;
}

// One row (M = 1) through one wide weight (the LM head: 49152 columns): a warp takes G = kPrefetch / H
// adjacent columns at once, lane l holding chunk l + 32 * (j % H) of column j / H in its slot j (H slots
// per column: at least a row's chunks per lane). With one column per warp only one row per warp is in
// flight (1152 bytes for a 576-wide fp16 row) at the 3 blocks per SM RowsKernel's registers allow: too
// little to cover DRAM's latency (fp16 LM head at 43% of the H200's bandwidth). Its own kernel, bounded
// to 64 registers (4 blocks per SM), with H a template parameter so the slots' mapping costs no registers.
template <class T, int H>
__global__ void __launch_bounds__(kThreads, 4) GroupedKernel(const T* __restrict__ x, const T* __restrict__ gamma, int64_t K, float eps,
                                                             Projections p) {
  constexpr int EPC = Elem<T>::EPC, G = kPrefetch / H;
  extern __shared__ float4 smem4[];
  float* xn = reinterpret_cast<float*>(smem4);
  const int lane = threadIdx.x & 31;
  const int chunks = static_cast<int>(K / EPC);
  const int64_t N = p.n[0], stride = static_cast<int64_t>(gridDim.x) * kWarps * G;
  const uint4* w = static_cast<const uint4*>(p.w[0]);
  int64_t c = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * G;
  uint4 a[kPrefetch];
  // slot j holds chunk lane + 32 * (j % H) of column c0 + j / H, where that chunk exists
  auto held = [&](int j, int64_t c0) { return c0 + j / H < N && lane + 32 * (j % H) < chunks; };
  auto load = [&](int64_t c0) {
#pragma unroll
    for (int j = 0; j < kPrefetch; ++j)
      if (held(j, c0)) a[j] = __ldg(w + (c0 + j / H) * chunks + lane + 32 * (j % H));
  };
  if (c < N) load(c);
  GridDependencyWait();  // x is the previous kernel's output
  GridDependentsRelease();
  NormalizeTile<T, 1>(x, gamma, K, 1, eps, xn);
  for (bool first = true; c < N; c += stride, first = false) {
    if (!first) load(c);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float sum = 0.0f;
#pragma unroll
      for (int j = g * H; j < (g + 1) * H; ++j)
        if (held(j, c)) ChunkDots<T, 1, false>(a[j], a[j], xn, K, lane + 32 * (j % H), 1, &sum, &sum);
      sum = WarpSum(sum);
      if (lane == 0 && c + g < N) static_cast<T*>(p.y[0])[c + g] = Elem<T>::FromF(sum);
    }
  }
}

// trans_b: w [N, K]. One warp per output column (grid-stride over the columns of every weight).
template <class T, int MT, int MODE>
__global__ void __launch_bounds__(kThreads) RowsKernel(const T* __restrict__ x, const T* __restrict__ gamma, int64_t K, int rows,
                                                       float eps, Projections p) {
  constexpr bool SWIGLU = MODE == kSwiGLU;
  extern __shared__ float4 smem4[];
  float* xn = reinterpret_cast<float*>(smem4);
  const int lane = threadIdx.x & 31;
  const int64_t columns = p.end[p.count - 1], stride = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t c = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const T *w = nullptr, *w2 = nullptr;
  int i = 0;
  int64_t n = 0;
  RowChunks<T, SWIGLU> held;
  if (c < columns) {
    ColumnRows<T, SWIGLU>(p, c, K, &w, &w2, &i, &n);
    if (Vectorised<T, SWIGLU>(w, w2, K)) held.Load(w, w2, K / Elem<T>::EPC, lane);
  }
  GridDependencyWait();  // x is the previous kernel's output
  GridDependentsRelease();
  PrepareTile<T, MT, MODE>(x, gamma, K, rows, eps, xn);
  for (bool first = true; c < columns; c += stride, first = false) {
    if (!first) {
      ColumnRows<T, SWIGLU>(p, c, K, &w, &w2, &i, &n);
      if (Vectorised<T, SWIGLU>(w, w2, K)) held.Load(w, w2, K / Elem<T>::EPC, lane);
    }
    float acc[MT], acc2[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = acc2[m] = 0.0f;
    LaneDots<T, MT, SWIGLU>(w, w2, held, xn, K, rows, lane, acc, acc2);
    T* y = static_cast<T*>(p.y[i]);
    const int64_t N = p.n[i];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= rows) break;
      const float g = WarpSum(acc[m]);
      const float u = SWIGLU ? WarpSum(acc2[m]) : 0.0f;
      if (lane == 0) y[m * N + n] = Epilogue<T, MODE>(p, g, u, m, n, N);
    }
  }
}

// w [K, N]. Block (32, 8): one column per threadIdx.x of a 32-column tile, threadIdx.y splits K.
template <class T, int MT, int MODE>
__global__ void __launch_bounds__(kThreads) ColumnsKernel(const T* __restrict__ x, const T* __restrict__ gamma, int64_t K, int rows,
                                                          float eps, Projections p) {
  constexpr bool SWIGLU = MODE == kSwiGLU;
  extern __shared__ float4 smem4[];
  float* xn = reinterpret_cast<float*>(smem4);
  GridDependencyWait();  // (a no-op: this kernel is launched without PDL)
  PrepareTile<T, MT, MODE>(x, gamma, K, rows, eps, xn);
  const int64_t tile = blockIdx.x;
  const int i = SWIGLU ? 0 : Which(p, tile);
  const int64_t N = p.n[i], n = (tile - (i > 0 ? p.end[i - 1] : 0)) * kTile + threadIdx.x;
  const T* w = static_cast<const T*>(p.w[i]);
  const T* w2 = SWIGLU ? static_cast<const T*>(p.w[1]) : nullptr;
  float acc[MT], acc2[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = acc2[m] = 0.0f;
  if (n < N) {
#pragma unroll 4
    for (int64_t k = threadIdx.y; k < K; k += kWarps) {
      const float a = Elem<T>::ToF(w[k * N + n]);
      const float b = SWIGLU ? Elem<T>::ToF(w2[k * N + n]) : 0.0f;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m >= rows) break;
        acc[m] += a * xn[m * K + k];
        if (SWIGLU) acc2[m] += b * xn[m * K + k];
      }
    }
  }
  __syncthreads();  // the rows are read: their shared memory holds the partial sums now
  float* red = xn;  // [kWarps][MT][32], then the up projection's
  float* red2 = xn + kWarps * MT * kTile;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    red[(threadIdx.y * MT + m) * kTile + threadIdx.x] = acc[m];
    if (SWIGLU) red2[(threadIdx.y * MT + m) * kTile + threadIdx.x] = acc2[m];
  }
  __syncthreads();
  if (threadIdx.y != 0 || n >= N) return;
  T* y = static_cast<T*>(p.y[i]);
  for (int m = 0; m < rows; ++m) {
    float g = 0.0f, u = 0.0f;
    for (int s = 0; s < kWarps; ++s) {
      g += red[(s * MT + m) * kTile + threadIdx.x];
      if (SWIGLU) u += red2[(s * MT + m) * kTile + threadIdx.x];
    }
    y[m * N + n] = Epilogue<T, MODE>(p, g, u, m, n, N);
  }
}

// Rows per launch: up to 16, as many as fit in shared memory as float32 (K <= MN_NORM_LINEAR_MAX_K: one
// at least; K = 0, a LinearResidual of empty rows, holds no row in shared memory).
int64_t RowTile(int64_t M, int64_t K) { return std::min<int64_t>(std::min<int64_t>(M, 16), K == 0 ? 16 : kSmemBytes / (4 * K)); }

// Columns per warp (GroupedKernel when > 1; else RowsKernel) for one row through one weight whose columns
// take more than two passes of the grid and whose rows fill at most half of a lane's kPrefetch slots.
template <class T, int MODE>
int ColumnGroup(const Projections& p, int64_t K, int rows, int64_t warps) {
  constexpr int EPC = Elem<T>::EPC;
  if (MODE != kLinear || rows != 1 || p.count != 1 || K % EPC || reinterpret_cast<uintptr_t>(p.w[0]) % 16) return 1;
  const int64_t H = (K / EPC + 31) / 32;  // a row's chunks per lane: 1 -> 8 columns, 2 -> 4, 3 or 4 -> 2
  return p.n[0] > 2 * warps && 2 * H <= kPrefetch ? static_cast<int>(kPrefetch / (H == 3 ? 4 : H)) : 1;
}

template <class T, int MT, int MODE>
int LaunchTile(const T* x, const T* gamma, int64_t K, int rows, float eps, bool trans_b, Projections p, cudaStream_t s) {
  if (trans_b) {
    p.group = ColumnGroup<T, MODE>(p, K, rows, static_cast<int64_t>(NumSMs()) * 8 * kWarps);
    const int64_t columns = (p.end[p.count - 1] + p.group - 1) / p.group;
    const int64_t blocks = std::min<int64_t>((columns + kWarps - 1) / kWarps, static_cast<int64_t>(NumSMs()) * 8);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = sizeof(float) * rows * K;
    cfg.stream = s;
    cudaLaunchAttribute pdl;  // the weight prefetch overlaps the previous kernel's last blocks
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &pdl;
    cfg.numAttrs = g_decode_linear_pdl && HasPdl() ? 1 : 0;
    // GroupedKernel's slots per column: kPrefetch / group (8, 4 or 2 columns: 1, 2 or 4 slots)
    cudaError_t e = MT != 1 || MODE != kLinear || p.group == 1 ? cudaLaunchKernelEx(&cfg, RowsKernel<T, MT, MODE>, x, gamma, K, rows, eps, p)
                    : p.group == 8                           ? cudaLaunchKernelEx(&cfg, GroupedKernel<T, 1>, x, gamma, K, eps, p)
                    : p.group == 4                           ? cudaLaunchKernelEx(&cfg, GroupedKernel<T, 2>, x, gamma, K, eps, p)
                                                             : cudaLaunchKernelEx(&cfg, GroupedKernel<T, 4>, x, gamma, K, eps, p);
    if (e != cudaSuccess) return e;
  } else {
    const size_t smem = sizeof(float) * std::max<int64_t>(rows * K, int64_t(2) * kWarps * MT * kTile);
    ColumnsKernel<T, MT, MODE><<<static_cast<unsigned>(p.end[p.count - 1]), dim3(kTile, kWarps), smem, s>>>(x, gamma, K, rows, eps, p);
  }
  return cudaGetLastError();
}

// One launch per row tile and group of <= kMaxWeights weights; the template picks the register tile.
template <class T, int MODE>
int Run(const void* xv, const void* gv, int64_t M, int64_t K, float eps, bool trans_b, int count, const void* const* w,
        const int64_t* N, void* const* y, const void* residual, cudaStream_t s) {
  constexpr bool SWIGLU = MODE == kSwiGLU;
  const T* x = static_cast<const T*>(xv);
  const T* gamma = static_cast<const T*>(gv);
  const int64_t tile = RowTile(M, K);
  if (tile < 1) return cudaErrorInvalidValue;
  const int per_launch = SWIGLU ? 1 : kMaxWeights;  // SwiGLU: w[0] (gate) and w[1] (up) make one output
  for (int first = 0; first < (SWIGLU ? 1 : count); first += per_launch) {
    Projections p{};
    p.count = SWIGLU ? 1 : std::min(per_launch, count - first);
    int64_t items = 0;
    for (int j = 0; j < p.count; ++j) {
      p.w[j] = w[first + j];
      p.y[j] = y[first + j];
      p.n[j] = N[first + j];
      items += trans_b ? N[first + j] : (N[first + j] + kTile - 1) / kTile;
      p.end[j] = items;
    }
    if (SWIGLU) p.w[1] = w[1];
    if (items == 0) continue;
    for (int64_t r0 = 0; r0 < M; r0 += tile) {
      const int rows = static_cast<int>(std::min(tile, M - r0));
      Projections q = p;
      for (int j = 0; j < q.count; ++j) q.y[j] = static_cast<T*>(p.y[j]) + r0 * p.n[j];
      if (MODE == kResidual) q.residual = static_cast<const T*>(residual) + r0 * p.n[0];
      const T* xr = x + r0 * K;
      int e = rows == 1   ? LaunchTile<T, 1, MODE>(xr, gamma, K, rows, eps, trans_b, q, s)
              : rows <= 4 ? LaunchTile<T, 4, MODE>(xr, gamma, K, rows, eps, trans_b, q, s)
                          : LaunchTile<T, 16, MODE>(xr, gamma, K, rows, eps, trans_b, q, s);
      if (e != cudaSuccess) return e;
    }
  }
  return cudaSuccess;
}

template <int MODE>
int Dispatch(int dtype, const void* x, const void* gamma, int64_t M, int64_t K, float eps, int trans_b, int count, const void* const* w,
             const int64_t* N, void* const* y, const void* residual, void* stream) {
  if (M == 0 || count == 0) return 0;
  // The norm needs a feature; a product over K = 0 is the residual alone.
  if (K < (MODE == kResidual ? 0 : 1) || K > MN_NORM_LINEAR_MAX_K) return cudaErrorInvalidValue;
  if (int e = UseDeviceOf(MODE == kResidual ? residual : x)) return e;  // x of K = 0 holds no memory
  cudaStream_t s = S(stream);
  if (dtype == MN_F16) return Run<__half, MODE>(x, gamma, M, K, eps, trans_b != 0, count, w, N, y, residual, s);
  if (dtype == MN_BF16) return Run<__nv_bfloat16, MODE>(x, gamma, M, K, eps, trans_b != 0, count, w, N, y, residual, s);
  return Run<float, MODE>(x, gamma, M, K, eps, trans_b != 0, count, w, N, y, residual, s);
}

}  // namespace

extern "C" {

int mn_cuda_rms_norm_linear(int dtype, const void* x, const void* gamma, int64_t M, int64_t K, float eps, int trans_b, int count,
                            const void* const* w, const int64_t* N, void* const* y, void* stream) {
  return Dispatch<kLinear>(dtype, x, gamma, M, K, eps, trans_b, count, w, N, y, nullptr, stream);
}

int mn_cuda_rms_norm_swiglu(int dtype, const void* x, const void* gamma, int64_t M, int64_t K, float eps, int trans_b,
                            const void* w_gate, const void* w_up, int64_t N, void* out, void* stream) {
  const void* w[2] = {w_gate, w_up};
  const int64_t n[2] = {N, N};
  void* y[2] = {out, out};
  return Dispatch<kSwiGLU>(dtype, x, gamma, M, K, eps, trans_b, 2, w, n, y, nullptr, stream);
}

int mn_cuda_linear_residual(int dtype, const void* x, const void* w, const void* residual, int64_t M, int64_t K, int64_t N, int trans_b,
                            void* y, void* stream) {
  return Dispatch<kResidual>(dtype, x, nullptr, M, K, 0.0f, trans_b, 1, &w, &N, &y, residual, stream);
}

}  // extern "C"
