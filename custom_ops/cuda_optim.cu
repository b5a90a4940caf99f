// com.meganeura.AdamUpdate on CUDA: every parameter in a few launches (multi-tensor apply, as
// PyTorch's fused optimizers do). The host packs the tensors' pointers and sizes, and a table of
// (tensor, chunk) per block, into the kernel's parameters (passed by value, under 4 KB): no
// host-to-device copy, no sync, so the launches replay unchanged inside a captured CUDA graph. Each
// block updates one chunk of kChunk elements of one tensor, 16 bytes at a time where the tensors
// are aligned. The bias-correction scalars are computed by every thread from the device-resident
// hyper-parameters, with the same float32 operations, in the same order, as the CPU kernel and the
// ONNX function body (no FMA contraction), so the three agree bit for bit.
#include "cuda_common.cuh"

namespace {

constexpr int kMaxTensors = 24;   // tensors per launch
constexpr int kMaxBlocks = 320;   // blocks per launch
constexpr int64_t kChunk = 65536;  // elements per block (a multiple of 4: chunks keep 16-byte alignment)
constexpr int kThreads = 512;

struct AdamArgs {
  const float* hyper[6];  // lr, beta1, beta2, eps, step, weight_decay (device)
  const float* in[kMaxTensors][4];  // p, g, m, v
  float* out[kMaxTensors][3];       // p', m', v'
  int64_t n[kMaxTensors];
  int32_t chunk[kMaxBlocks];
  uint8_t tensor[kMaxBlocks];
};
static_assert(sizeof(AdamArgs) <= 4000, "kernel parameters are limited to 4 KB");

struct Scalars {
  float b1, b2, eps, omb1, omb2, step_size, inv_sqrt_bc2, decay;
};

__device__ __forceinline__ Scalars ReadScalars(const float* const* h) {
  const float lr = *h[0], b1 = *h[1], b2 = *h[2], eps = *h[3], step = *h[4], wd = *h[5];
  const float bc1 = 1.f - expf(step * logf(b1));
  const float bc2 = 1.f - expf(step * logf(b2));
  return {b1, b2, eps, 1.f - b1, 1.f - b2, lr / bc1, 1.f / sqrtf(bc2), __fsub_rn(1.f, __fmul_rn(lr, wd))};  // no FMA: as on the CPU
}

// One element: m' = m*b1 + g*(1-b1); v' = v*b2 + (g*g)*(1-b2); p' = p*decay - (m' / (sqrt(v')*inv_sqrt_bc2 + eps)) * step_size.
__device__ __forceinline__ void Update(const Scalars& s, float p, float g, float m, float v, float& p2, float& m2, float& v2) {
  m2 = __fadd_rn(__fmul_rn(m, s.b1), __fmul_rn(g, s.omb1));  // no FMA contraction: as on the CPU
  v2 = __fadd_rn(__fmul_rn(v, s.b2), __fmul_rn(__fmul_rn(g, g), s.omb2));
  const float denom = __fadd_rn(__fmul_rn(sqrtf(v2), s.inv_sqrt_bc2), s.eps);
  p2 = __fsub_rn(__fmul_rn(p, s.decay), __fmul_rn(__fdiv_rn(m2, denom), s.step_size));
}

__device__ __forceinline__ bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

__global__ void __launch_bounds__(kThreads) AdamMultiKernel(AdamArgs a) {
  const Scalars s = ReadScalars(a.hyper);
  const int t = a.tensor[blockIdx.x];
  const int64_t c0 = static_cast<int64_t>(a.chunk[blockIdx.x]) * kChunk;
  const int64_t n = min(kChunk, a.n[t] - c0);
  const float *p = a.in[t][0] + c0, *g = a.in[t][1] + c0, *m = a.in[t][2] + c0, *v = a.in[t][3] + c0;
  float *p2 = a.out[t][0] + c0, *m2 = a.out[t][1] + c0, *v2 = a.out[t][2] + c0;
  int64_t done = 0;
  if (Aligned16(p) && Aligned16(g) && Aligned16(m) && Aligned16(v) && Aligned16(p2) && Aligned16(m2) && Aligned16(v2)) {
    const int64_t n4 = n / 4;
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
      const float4 pv = __ldg(reinterpret_cast<const float4*>(p) + i), gv = __ldg(reinterpret_cast<const float4*>(g) + i);
      const float4 mv = __ldg(reinterpret_cast<const float4*>(m) + i), vv = __ldg(reinterpret_cast<const float4*>(v) + i);
      float4 po, mo, vo;
      Update(s, pv.x, gv.x, mv.x, vv.x, po.x, mo.x, vo.x);
      Update(s, pv.y, gv.y, mv.y, vv.y, po.y, mo.y, vo.y);
      Update(s, pv.z, gv.z, mv.z, vv.z, po.z, mo.z, vo.z);
      Update(s, pv.w, gv.w, mv.w, vv.w, po.w, mo.w, vo.w);
      reinterpret_cast<float4*>(p2)[i] = po;
      reinterpret_cast<float4*>(m2)[i] = mo;
      reinterpret_cast<float4*>(v2)[i] = vo;
    }
    done = n4 * 4;
  }
  for (int64_t i = done + threadIdx.x; i < n; i += blockDim.x) Update(s, p[i], g[i], m[i], v[i], p2[i], m2[i], v2[i]);
}

}  // namespace

extern "C" int mn_cuda_adam_update_multi_f32(const float* const hyper[6], const MnAdamTensor* tensors, size_t count, void* stream) {
  size_t first = 0;
  while (first < count && tensors[first].n <= 0) ++first;
  if (first == count) return 0;
  int e = UseDeviceOf(tensors[first].p);  // one device for the whole update
  if (e) return e;
  AdamArgs a;
  for (int i = 0; i < 6; ++i) a.hyper[i] = hyper[i];
  int nt = 0, nb = 0;
  auto launch = [&]() {
    AdamMultiKernel<<<nb, kThreads, 0, S(stream)>>>(a);
    nb = 0;
    return cudaGetLastError();
  };
  for (size_t k = first; k < count; ++k) {
    const MnAdamTensor& t = tensors[k];
    if (t.n <= 0) continue;
    a.in[nt][0] = t.p, a.in[nt][1] = t.g, a.in[nt][2] = t.m, a.in[nt][3] = t.v;
    a.out[nt][0] = t.p2, a.out[nt][1] = t.m2, a.out[nt][2] = t.v2;
    a.n[nt] = t.n;
    ++nt;
    const int64_t chunks = (t.n + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      a.tensor[nb] = static_cast<uint8_t>(nt - 1);
      a.chunk[nb] = static_cast<int32_t>(c);
      ++nb;
      const bool last_chunk = c == chunks - 1;
      if (nb == kMaxBlocks || (nt == kMaxTensors && last_chunk)) {
        if ((e = launch())) return e;
        if (last_chunk) {
          nt = 0;
        } else {  // the tensor goes on in the next launch: it becomes slot 0
          for (int j = 0; j < 4; ++j) a.in[0][j] = a.in[nt - 1][j];
          for (int j = 0; j < 3; ++j) a.out[0][j] = a.out[nt - 1][j];
          a.n[0] = a.n[nt - 1];
          nt = 1;
        }
      }
    }
  }
  return nb > 0 ? launch() : 0;
}
