// Standalone check + timing of the CUDA FlashAttention / FlashAttentionGrad launchers, without ORT:
//   make -C custom_ops flash-check && custom_ops/build/flash_check
// Compares Y, LSE, dQ, dK, dV with a double-precision host reference over several shapes (GQA,
// causal and not, every head_dim path, several sequences), replays the backward captured in a CUDA
// graph, then times the SmolLM2-135M training shape with CUDA events.
// MN_FLASH_ROWS / MN_FLASH_THREADS (-D) try the kernels' tuning knobs.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <random>
#include <algorithm>
// The kernels are compiled into this program so that it reaches the kernels in its anonymous namespace.
#include "cuda_flash.cu"

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("CUDA error %s at %d\n", cudaGetErrorString(e_), __LINE__); exit(1);} } while (0)

struct Ref { std::vector<double> y, lse, dq, dk, dv; };

Ref Reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& dy,
              int B, int T, int S, int H, int KVH, int hd, int causal) {
  Ref r; r.y.assign((size_t)B*T*H*hd, 0); r.lse.assign((size_t)B*H*T, 0); r.dq.assign(r.y.size(), 0);
  r.dk.assign((size_t)B*S*KVH*hd, 0); r.dv.assign(r.dk.size(), 0);
  const double sc = 1.0 / std::sqrt((double)hd); const int rep = H / KVH;
  std::vector<double> p(S), dp(S);
  for (int b = 0; b < B; ++b) for (int h = 0; h < H; ++h) { int kh = h / rep;
    for (int i = 0; i < T; ++i) {
      const float* qi = &q[((size_t)(b*T+i)*H+h)*hd]; const float* doi = &dy[((size_t)(b*T+i)*H+h)*hd];
      double m = -INFINITY;
      for (int j = 0; j < S; ++j) { double s = 0; const float* kj = &k[((size_t)(b*S+j)*KVH+kh)*hd];
        for (int d = 0; d < hd; ++d) s += (double)qi[d]*kj[d]; s *= sc; if (causal && j > i) s = -INFINITY; p[j] = s; m = std::max(m, s); }
      double l = 0; for (int j = 0; j < S; ++j) { p[j] = std::exp(p[j]-m); l += p[j]; }
      for (int j = 0; j < S; ++j) p[j] /= l;
      r.lse[((size_t)b*H+h)*T+i] = m + std::log(l);
      double* yi = &r.y[((size_t)(b*T+i)*H+h)*hd];
      for (int j = 0; j < S; ++j) { const float* vj = &v[((size_t)(b*S+j)*KVH+kh)*hd]; for (int d = 0; d < hd; ++d) yi[d] += p[j]*vj[d]; }
      double D = 0;
      for (int j = 0; j < S; ++j) { const float* vj = &v[((size_t)(b*S+j)*KVH+kh)*hd]; double s = 0; for (int d = 0; d < hd; ++d) s += (double)doi[d]*vj[d]; dp[j] = s; D += p[j]*s; }
      double* dqi = &r.dq[((size_t)(b*T+i)*H+h)*hd];
      for (int j = 0; j < S; ++j) { double ds = p[j]*(dp[j]-D);
        const float* kj = &k[((size_t)(b*S+j)*KVH+kh)*hd];
        double* dkj = &r.dk[((size_t)(b*S+j)*KVH+kh)*hd]; double* dvj = &r.dv[((size_t)(b*S+j)*KVH+kh)*hd];
        for (int d = 0; d < hd; ++d) { dqi[d] += ds*kj[d]*sc; dkj[d] += ds*qi[d]*sc; dvj[d] += p[j]*doi[d]; } }
    } }
  return r;
}

double MaxErr(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0, scale = 1e-30; for (size_t i = 0; i < got.size(); ++i) { e = std::max(e, std::fabs(got[i]-want[i])); scale = std::max(scale, std::fabs(want[i])); }
  return e / scale;
}

float* Dev(const std::vector<float>& h) { float* d; CK(cudaMalloc(&d, h.size()*4+16)); CK(cudaMemcpy(d, h.data(), h.size()*4, cudaMemcpyHostToDevice)); return d; }
std::vector<float> Host(const float* d, size_t n) { std::vector<float> h(n); CK(cudaMemcpy(h.data(), d, n*4, cudaMemcpyDeviceToHost)); return h; }

int Case(int B, int T, int S, int H, int KVH, int hd, int causal, bool check, int iters) {
  std::mt19937 g(B*7+T*3+hd); std::normal_distribution<float> n(0, 1);
  auto rnd = [&](size_t c){ std::vector<float> x(c); for (auto& e: x) e = n(g); return x; };
  size_t nq = (size_t)B*T*H*hd, nk = (size_t)B*S*KVH*hd;
  auto q = rnd(nq), k = rnd(nk), v = rnd(nk), dy = rnd(nq);
  float *dq_ = Dev(q), *dk_ = Dev(k), *dv_ = Dev(v), *ddy = Dev(dy), *y, *lse, *gq, *gk, *gv;
  CK(cudaMalloc(&y, nq*4)); CK(cudaMalloc(&lse, (size_t)B*H*T*4+16)); CK(cudaMalloc(&gq, nq*4)); CK(cudaMalloc(&gk, nk*4)); CK(cudaMalloc(&gv, nk*4));
  int rc = mn_cuda_flash_attention_f32(dq_, dk_, dv_, y, lse, B, T, S, H, KVH, hd, causal, nullptr); if (rc) { printf("fwd rc %d\n", rc); return 1; }
  rc = mn_cuda_flash_attention_grad_f32(dq_, dk_, dv_, y, ddy, lse, gq, gk, gv, B, T, S, H, KVH, hd, causal, nullptr); if (rc) { printf("bwd rc %d\n", rc); return 1; }
  CK(cudaDeviceSynchronize());
  int bad = 0;
  if (check) {
    Ref r = Reference(q, k, v, dy, B, T, S, H, KVH, hd, causal);
    double e[5] = {MaxErr(Host(y, nq), r.y), MaxErr(Host(lse, (size_t)B*H*T), r.lse), MaxErr(Host(gq, nq), r.dq), MaxErr(Host(gk, nk), r.dk), MaxErr(Host(gv, nk), r.dv)};
    bad = *std::max_element(e, e+5) > 2e-5;
    printf("check B=%d T=%d S=%d H=%d KVH=%d hd=%d causal=%d: rel err y %.2e lse %.2e dq %.2e dk %.2e dv %.2e %s\n", B, T, S, H, KVH, hd, causal, e[0], e[1], e[2], e[3], e[4], bad ? "FAIL" : "ok");
  }
  if (iters) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    std::vector<float> tf, tb;
    for (int rep = 0; rep < 5; ++rep) {
      cudaEventRecord(a); for (int it = 0; it < iters; ++it) mn_cuda_flash_attention_f32(dq_, dk_, dv_, y, lse, B, T, S, H, KVH, hd, causal, nullptr);
      cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); tf.push_back(1000*ms/iters);
      cudaEventRecord(a); for (int it = 0; it < iters; ++it) mn_cuda_flash_attention_grad_f32(dq_, dk_, dv_, y, ddy, lse, gq, gk, gv, B, T, S, H, KVH, hd, causal, nullptr);
      cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b); tb.push_back(1000*ms/iters);
    }
    {  // the backward captured in a CUDA graph (stream-ordered scratch inside) replays to the eager numbers
      CK(cudaDeviceSynchronize());
      mn_cuda_flash_attention_grad_f32(dq_, dk_, dv_, y, ddy, lse, gq, gk, gv, B, T, S, H, KVH, hd, causal, nullptr);
      CK(cudaDeviceSynchronize());
      auto eager = Host(gk, nk);
      CK(cudaMemset(gk, 0, nk * 4));
      cudaStream_t st;
      CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
      int rc2 = mn_cuda_flash_attention_grad_f32(dq_, dk_, dv_, y, ddy, lse, gq, gk, gv, B, T, S, H, KVH, hd, causal, st);
      CK(cudaStreamEndCapture(st, &graph));
      CK(cudaGraphInstantiate(&exec, graph, 0));
      CK(cudaGraphLaunch(exec, st));
      CK(cudaGraphLaunch(exec, st));
      CK(cudaStreamSynchronize(st));
      const bool same = eager == Host(gk, nk);
      printf("  backward replayed as a CUDA graph: rc %d, dK bit-identical to the eager run: %s\n", rc2, same ? "yes" : "NO");
      if (!same || rc2) bad = 1;
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(st);
    }
    if (hd <= 64) {  // the dK/dV kernel alone (the rest of the backward is the dQ kernel); dsum from a real dQ run
      using Sh = Shape<4, kRows>;
      float* dsum;
      CK(cudaMalloc(&dsum, (size_t)B * H * T * 4));
      Dims p = MakeDims(B, T, S, H, KVH, hd, causal);
      FlashGradQ<float, 4, kRows><<<dim3(B * H, (T + Sh::R - 1) / Sh::R), kThreads>>>(dq_, dk_, dv_, y, ddy, lse, gq, dsum, p);
      cudaEventRecord(a);
      for (int it = 0; it < iters; ++it)
        FlashGradKV<float, 4, kRows><<<dim3(B * KVH, (S + Sh::R - 1) / Sh::R), kThreads>>>(dq_, dk_, dv_, ddy, lse, dsum, gk, gv, p);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      printf("  dK/dV kernel alone: %.1f us\n", 1000 * ms / iters);
      CK(cudaFree(dsum));
    }
    std::sort(tf.begin(), tf.end()); std::sort(tb.begin(), tb.end());
    printf("time B=%d T=%d H=%d KVH=%d hd=%d causal=%d: forward median %.1f us (min %.1f max %.1f), backward median %.1f us (min %.1f max %.1f)\n",
           B, T, H, KVH, hd, causal, tf[2], tf[0], tf[4], tb[2], tb[0], tb[4]);
  }
  CK(cudaGetLastError());
  for (float* d : {dq_, dk_, dv_, ddy, y, lse, gq, gk, gv}) CK(cudaFree(d));
  return bad;
}

int main() {
  int bad = 0;
  bad += Case(2, 37, 37, 4, 2, 8, 1, true, 0);
  bad += Case(1, 5, 9, 2, 1, 4, 0, true, 0);
  bad += Case(3, 70, 70, 6, 3, 64, 1, true, 0);
  bad += Case(2, 33, 50, 4, 4, 64, 0, true, 0);
  bad += Case(1, 40, 40, 2, 1, 100, 1, true, 0);
  bad += Case(1, 20, 20, 4, 2, 128, 1, true, 0);
  bad += Case(1, 17, 17, 2, 2, 256, 1, true, 0);
  bad += Case(2, 256, 256, 9, 3, 64, 1, true, 0);
  bad += Case(8, 256, 256, 9, 3, 64, 1, false, 50);
  bad += Case(8, 256, 256, 9, 3, 64, 0, false, 50);
  bad += Case(8, 1024, 1024, 9, 3, 64, 1, false, 10);
  printf(bad ? "FAILED %d (rows per thread %d)\n" : "ALL OK (rows per thread %d)\n", bad, kRows);
  return bad != 0;
}
