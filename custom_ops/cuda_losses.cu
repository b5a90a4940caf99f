// com.meganeura.SparseCrossEntropy / SparseCrossEntropyGrad on CUDA (launchers: cuda_losses.h).
// One block per row. The forward reads the row once: each thread keeps a running max and the sum of
// exp(x - max) over its elements (rescaled when the max grows, once per 16-byte chunk), and the block
// combines the pairs. The backward reads the row once and writes softmax - onehot, scaled, from the
// forward's log-sum-exp. Rows are read and written in 16-byte chunks when their width allows.
#include "cuda_common.cuh"
#include "cuda_losses.h"

namespace {

struct MaxSum {
  float m, s;  // running max and sum of exp(x - m); m = -inf: nothing seen yet
};

__device__ __forceinline__ MaxSum Combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// Adds n values (one chunk) to the running pair: one rescale per chunk, not per value.
__device__ __forceinline__ MaxSum AddChunk(MaxSum acc, const float* f, int n) {
  float cm = f[0];
  for (int k = 1; k < n; ++k) cm = fmaxf(cm, f[k]);
  const float m = fmaxf(acc.m, cm);
  if (m == -INFINITY) return acc;  // every value so far is -inf
  float s = acc.s * expf(acc.m - m);
  for (int k = 0; k < n; ++k) s += expf(f[k] - m);
  return {m, s};
}

__device__ MaxSum BlockReduce(MaxSum v) {
  __shared__ MaxSum warp_results[32];
  for (int off = 16; off > 0; off >>= 1) v = Combine(v, {__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)});
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x >> 5) ? warp_results[lane] : MaxSum{-INFINITY, 0.f};
    for (int off = 16; off > 0; off >>= 1) v = Combine(v, {__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)});
  }
  return v;  // valid in thread 0
}

// The label of row r, or -2 when it is out of range (neither ignore nor in [0, C)).
__device__ __forceinline__ int64_t RowLabel(MnPos labels, int64_t r, int64_t C, int64_t ignore) {
  const int64_t lab = LoadPos(labels, r);
  if (lab == ignore) return -1;
  return lab >= 0 && lab < C ? lab : -2;
}

template <class T, bool kVec>
__global__ void ForwardKernel(const T* __restrict__ x, MnPos labels, int64_t C, int64_t ignore, float* __restrict__ loss,
                              float* __restrict__ lse) {
  using E = Elem<T>;
  const int64_t r = blockIdx.x;
  const T* row = x + r * C;
  MaxSum acc{-INFINITY, 0.f};
  if (kVec) {
    const uint4* chunks = reinterpret_cast<const uint4*>(row);
    for (int64_t i = threadIdx.x; i < C / E::EPC; i += blockDim.x) {
      float f[E::EPC];
      E::Unpack(__ldg(chunks + i), f);
      acc = AddChunk(acc, f, E::EPC);
    }
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float f = E::ToF(row[c]);
      acc = AddChunk(acc, &f, 1);
    }
  }
  acc = BlockReduce(acc);
  if (threadIdx.x != 0) return;
  const int64_t lab = RowLabel(labels, r, C, ignore);
  const float l = acc.m + logf(acc.s);
  if (lab == -2) {
    loss[r] = lse[r] = __int_as_float(0x7fc00000);  // NaN: a label out of range
    return;
  }
  lse[r] = l;
  loss[r] = lab == -1 ? 0.f : l - E::ToF(row[lab]);
}

template <class T, bool kVec>
__global__ void BackwardKernel(const T* __restrict__ x, MnPos labels, const float* __restrict__ lse, const float* __restrict__ scale,
                               int64_t C, int64_t ignore, T* __restrict__ dx) {
  using E = Elem<T>;
  const int64_t r = blockIdx.x;
  const int64_t lab = RowLabel(labels, r, C, ignore);
  const T* row = x + r * C;
  T* out = dx + r * C;
  const float l = lse[r], sc = *scale, nan = __int_as_float(0x7fc00000);
  auto grad = [&](float v, int64_t c) {
    if (lab < 0) return lab == -1 ? 0.f : nan;
    return (expf(v - l) - (c == lab ? 1.f : 0.f)) * sc;
  };
  if (kVec) {
    const uint4* in = reinterpret_cast<const uint4*>(row);
    uint4* o = reinterpret_cast<uint4*>(out);
    for (int64_t i = threadIdx.x; i < C / E::EPC; i += blockDim.x) {
      float f[E::EPC];
      E::Unpack(__ldg(in + i), f);
#pragma unroll
      for (int k = 0; k < E::EPC; ++k) f[k] = grad(f[k], i * E::EPC + k);
      o[i] = E::Pack(f);
    }
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[c] = E::FromF(grad(E::ToF(row[c]), c));
  }
}

int Threads(int64_t C) { return C >= 8192 ? 512 : C >= 1024 ? 256 : 128; }

template <class T>
bool Vectorised(const void* a, const void* b, int64_t C) {
  return C % Elem<T>::EPC == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

template <class T>
int Forward(const void* logits, MnPos labels, int64_t R, int64_t C, int64_t ignore, float* loss, float* lse, cudaStream_t s) {
  const T* x = static_cast<const T*>(logits);
  if (Vectorised<T>(x, x, C))
    ForwardKernel<T, true><<<(unsigned)R, Threads(C), 0, s>>>(x, labels, C, ignore, loss, lse);
  else
    ForwardKernel<T, false><<<(unsigned)R, Threads(C), 0, s>>>(x, labels, C, ignore, loss, lse);
  return cudaGetLastError();
}

template <class T>
int Backward(const void* logits, MnPos labels, const float* lse, const float* scale, int64_t R, int64_t C, int64_t ignore, void* dlogits,
             cudaStream_t s) {
  const T* x = static_cast<const T*>(logits);
  T* dx = static_cast<T*>(dlogits);
  if (Vectorised<T>(x, dx, C))
    BackwardKernel<T, true><<<(unsigned)R, Threads(C), 0, s>>>(x, labels, lse, scale, C, ignore, dx);
  else
    BackwardKernel<T, false><<<(unsigned)R, Threads(C), 0, s>>>(x, labels, lse, scale, C, ignore, dx);
  return cudaGetLastError();
}

}  // namespace

extern "C" int mn_cuda_sparse_ce_forward(int dtype, const void* logits, MnPos labels, int64_t R, int64_t C, int64_t ignore, float* loss_rows,
                                         float* lse, void* stream) {
  if (R <= 0) return 0;
  if (R > 0x7fffffff) return cudaErrorInvalidValue;
  int e = UseDeviceOf(lse);
  if (e) return e;
  labels.count = R;
  if (dtype == MN_F16) return Forward<__half>(logits, labels, R, C, ignore, loss_rows, lse, S(stream));
  if (dtype == MN_BF16) return Forward<__nv_bfloat16>(logits, labels, R, C, ignore, loss_rows, lse, S(stream));
  return Forward<float>(logits, labels, R, C, ignore, loss_rows, lse, S(stream));
}

extern "C" int mn_cuda_sparse_ce_backward(int dtype, const void* logits, MnPos labels, const float* lse, const float* scale, int64_t R,
                                          int64_t C, int64_t ignore, void* dlogits, void* stream) {
  if (R <= 0 || C <= 0) return 0;
  if (R > 0x7fffffff) return cudaErrorInvalidValue;
  int e = UseDeviceOf(lse);
  if (e) return e;
  labels.count = R;
  if (dtype == MN_F16) return Backward<__half>(logits, labels, lse, scale, R, C, ignore, dlogits, S(stream));
  if (dtype == MN_BF16) return Backward<__nv_bfloat16>(logits, labels, lse, scale, R, C, ignore, dlogits, S(stream));
  return Backward<float>(logits, labels, lse, scale, R, C, ignore, dlogits, S(stream));
}
