// com.meganeura.AdamUpdate on CUDA: one elementwise pass per parameter (grid-stride loop). The
// bias-correction scalars are computed by every thread from the device-resident hyper-parameters,
// so the launch needs no host value and replays unchanged inside a captured CUDA graph.
#include "cuda_common.cuh"

namespace {

struct Hyper {
  const float* h[6];  // lr, beta1, beta2, eps, step, weight_decay
};

__global__ void AdamKernel(Hyper hp, const float* __restrict__ p, const float* __restrict__ g, const float* __restrict__ m,
                           const float* __restrict__ v, float* __restrict__ p2, float* __restrict__ m2,
                           float* __restrict__ v2, int64_t n) {
  const float lr = *hp.h[0], b1 = *hp.h[1], b2 = *hp.h[2], eps = *hp.h[3], step = *hp.h[4], wd = *hp.h[5];
  // Same float32 operations, in the same order, as the CPU kernel and the ONNX function body.
  const float bc1 = 1.f - expf(step * logf(b1));
  const float bc2 = 1.f - expf(step * logf(b2));
  const float step_size = lr / bc1, inv_sqrt_bc2 = 1.f / sqrtf(bc2), decay = 1.f - lr * wd;
  const float omb1 = 1.f - b1, omb2 = 1.f - b2;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(gi, omb1));  // no FMA contraction: as on the CPU
    const float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(gi, gi), omb2));
    const float denom = __fadd_rn(__fmul_rn(sqrtf(vi), inv_sqrt_bc2), eps);
    p2[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(__fdiv_rn(mi, denom), step_size));
    m2[i] = mi;
    v2[i] = vi;
  }
}

}  // namespace

extern "C" int mn_cuda_adam_update_f32(const float* const hyper[6], const float* p, const float* g, const float* m,
                                       const float* v, float* p2, float* m2, float* v2, int64_t n, void* stream) {
  if (n <= 0) return 0;
  int e = UseDeviceOf(p);
  if (e) return e;
  Hyper hp;
  for (int i = 0; i < 6; ++i) hp.h[i] = hyper[i];
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
  AdamKernel<<<(unsigned)blocks, threads, 0, S(stream)>>>(hp, p, g, m, v, p2, m2, v2, n);
  return cudaGetLastError();
}
