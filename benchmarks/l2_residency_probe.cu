// Could SmolLM2-135M's LM head weight (49152 x 576 fp16, 54 MB) stay in the GPU's L2 from one decode
// step to the next, so that the bandwidth-bound LM head reads (part of) it from L2 instead of DRAM? Between
// two LM heads a step streams ~212 MB of layer weights through L2 (60 MB on an H200). This probe, on one
// GPU (sm_90), without ORT, reads a 212 MB buffer ("layers") and then the 54 MB one ("head"), 40 times
// (the first 5 dropped), and times each read with CUDA events, with the loads hinted:
//   plain: ld.global.nc;  evict_first / evict_last f: ld.global.nc.L2::cache_hint with a
//   createpolicy.fractional.L2::evict_first or ::evict_last policy (fraction f of the lines);
//   persisting window: cudaLimitPersistingL2CacheSize at its maximum and a stream access-policy window
//   over the head (hitRatio = set-aside / window, persisting hits, streaming misses).
// Between the variants the head's lines go back to evict_normal (applypriority) and persisting lines
// are reset. Last, the head alone back to back. Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90 -o l2_residency_probe benchmarks/l2_residency_probe.cu && ./l2_residency_probe
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ uint4 ld_hint(const uint4* p, uint64_t pol) {
  uint4 v;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ uint64_t pol_last(float f) { uint64_t p; asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, %1;" : "=l"(p) : "f"(f)); return p; }
__device__ __forceinline__ uint64_t pol_first() { uint64_t p; asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint64_t pol_normal() { uint64_t p; asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p)); return p; }

// mode 0: plain __ldg, 1: evict_first, 2: evict_last fraction f, 3: evict_normal hint
__global__ void Read(const uint4* __restrict__ p, size_t n, int mode, float f, unsigned* sink) {
  uint64_t pol = mode == 1 ? pol_first() : mode == 2 ? pol_last(f) : pol_normal();
  unsigned acc = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = mode == 0 ? __ldg(p + i + u * stride) : ld_hint(p + i + u * stride, pol);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) { uint4 v = mode == 0 ? __ldg(p + i) : ld_hint(p + i, pol); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (acc == 0x12345678u) *sink = acc;
}
__global__ void Demote(const char* p, size_t n) {  // every 128-byte line of p back to evict_normal
  for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 128; i < n; i += (size_t)gridDim.x * blockDim.x * 128)
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p + i));
}

int main() {
  const size_t layers_b = 212ull << 20, head_b = 56623104ull;  // 49152 x 576 x 2 bytes
  char *layers, *head; unsigned* sink;
  CK(cudaMalloc(&layers, layers_b)); CK(cudaMalloc(&head, head_b)); CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(layers, 1, layers_b)); CK(cudaMemset(head, 2, head_b));
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s L2 %d MB, persisting max %zu MB\n", prop.name, prop.l2CacheSize >> 20, prop.persistingL2CacheMaxSize >> 20);
  cudaEvent_t e0, e1, e2; cudaEventCreate(&e0); cudaEventCreate(&e1); cudaEventCreate(&e2);
  struct M { const char* name; int lmode; int hmode; float f; int window; };
  std::vector<M> modes = {
    {"plain / plain", 0, 0, 0, 0}, {"layers evict_first / head plain", 1, 0, 0, 0},
    {"plain / head evict_last 0.5", 0, 2, .5f, 0}, {"plain / head evict_last 0.7", 0, 2, .7f, 0},
    {"plain / head evict_last 0.85", 0, 2, .85f, 0}, {"plain / head evict_last 1.0", 0, 2, 1.f, 0},
    {"evict_first / head evict_last 0.7", 1, 2, .7f, 0}, {"evict_first / head evict_last 0.85", 1, 2, .85f, 0},
    {"plain / plain, persisting window", 0, 0, 0, 1}, {"plain / plain (after)", 0, 0, 0, 0}};
  const unsigned grid = sms * 8, block = 256;
  for (auto& m : modes) {
    if (m.window) {
      size_t setaside = prop.persistingL2CacheMaxSize;
      CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, setaside));
      cudaStreamAttrValue a = {};
      a.accessPolicyWindow.base_ptr = head;
      a.accessPolicyWindow.num_bytes = std::min<size_t>(head_b, prop.accessPolicyMaxWindowSize);
      a.accessPolicyWindow.hitRatio = std::min(1.f, (float)setaside / (float)a.accessPolicyWindow.num_bytes);
      a.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
      a.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
      CK(cudaStreamSetAttribute(0, cudaStreamAttributeAccessPolicyWindow, &a));
      printf("  window %zu MB hitRatio %.2f setaside %zu MB\n", a.accessPolicyWindow.num_bytes >> 20, a.accessPolicyWindow.hitRatio, setaside >> 20);
    }
    std::vector<float> th, tl;
    for (int it = 0; it < 40; ++it) {
      cudaEventRecord(e0);
      Read<<<grid, block>>>((const uint4*)layers, layers_b / 16, m.lmode, 1.f, sink);
      cudaEventRecord(e1);
      Read<<<grid, block>>>((const uint4*)head, head_b / 16, m.hmode, m.f, sink);
      cudaEventRecord(e2);
      CK(cudaEventSynchronize(e2));
      float a, b; cudaEventElapsedTime(&a, e0, e1); cudaEventElapsedTime(&b, e1, e2);
      if (it >= 5) { tl.push_back(a * 1000); th.push_back(b * 1000); }
    }
    std::sort(th.begin(), th.end()); std::sort(tl.begin(), tl.end());
    printf("%-40s head %7.1f us (p10 %.1f p90 %.1f, %.2f TB/s)  layers %7.1f us (%.2f TB/s)\n", m.name, th[th.size() / 2], th[th.size() / 10],
           th[th.size() * 9 / 10], head_b / (th[th.size() / 2] * 1e6), tl[tl.size() / 2], layers_b / (tl[tl.size() / 2] * 1e6));
    if (m.window) {
      cudaStreamAttrValue a = {};
      a.accessPolicyWindow.num_bytes = 0;
      CK(cudaStreamSetAttribute(0, cudaStreamAttributeAccessPolicyWindow, &a));
      CK(cudaCtxResetPersistingL2Cache());
      CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
    }
    Demote<<<grid, block>>>(head, head_b);
    CK(cudaDeviceSynchronize());
  }
  // head alone, back to back (upper bound: what fits stays)
  std::vector<float> th;
  for (int it = 0; it < 40; ++it) {
    cudaEventRecord(e1); Read<<<grid, block>>>((const uint4*)head, head_b / 16, 0, 0, sink); cudaEventRecord(e2);
    CK(cudaEventSynchronize(e2)); float b; cudaEventElapsedTime(&b, e1, e2); if (it >= 5) th.push_back(b * 1000);
  }
  std::sort(th.begin(), th.end());
  printf("%-40s head %7.1f us\n", "head alone back to back", th[th.size() / 2]);
  return 0;
}
