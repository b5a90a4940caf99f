// Standalone check + timing of the CUDA FlashAttention / FlashAttentionGrad launchers, without ORT:
//   make -C custom_ops flash-check && custom_ops/build/flash_check
// Compares Y, LSE, dQ, dK, dV with a double-precision host reference over several shapes (GQA,
// causal and not, every head_dim path, several sequences) in float32 (twice: the SIMT kernels, as
// MEGANEURA_FLASH_FP32=simt selects them, and the 3xTF32 tensor-core kernels; their largest errors
// side by side, the tensor-core ones required to stay within 10x the SIMT ones), float16 and bfloat16
// (on tensor cores where head_dim allows, else SIMT), checks that a rerun is bit-identical, replays
// the backward captured in a CUDA graph, then times the SmolLM2-135M training shape (and head_dim
// 128) with CUDA events, the SIMT kernels next to the tensor-core ones. `flash_check check`: no
// timings. MN_FLASH_ROWS / MN_FLASH_THREADS (-D) try the SIMT kernels' tuning knobs.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <random>
#include <algorithm>
#include <string>
#include <type_traits>
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

// Largest absolute error, and relative: that over the largest |reference| (elementwise ratios blow up near zero).
// A NaN difference counts as infinite (std::max(e, NaN) would keep e and pass a kernel that writes NaN).
struct Err { double abs, rel; };
Err MaxErr(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]);
    e = std::isnan(d) ? INFINITY : std::max(e, d);
    scale = std::max(scale, std::fabs(want[i]));
  }
  return {e, e / scale};
}

// Element types on the host: float, __half, __nv_bfloat16 (round to nearest even both ways).
template <typename T> T FromHost(float x) { return static_cast<T>(x); }
template <> __half FromHost<__half>(float x) { return __float2half_rn(x); }
template <> __nv_bfloat16 FromHost<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
float ToHost(float x) { return x; }
float ToHost(__half x) { return __half2float(x); }
float ToHost(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> int DTypeOf();
template <> int DTypeOf<float>() { return MN_F32; }
template <> int DTypeOf<__half>() { return MN_F16; }
template <> int DTypeOf<__nv_bfloat16>() { return MN_BF16; }
template <typename T> const char* NameOf();
template <> const char* NameOf<float>() { return "fp32"; }
template <> const char* NameOf<__half>() { return "fp16"; }
template <> const char* NameOf<__nv_bfloat16>() { return "bf16"; }
// Largest relative error (max |err| / max |want|) accepted: float32 kernels against float64; the half
// types are checked against float64 on the same rounded inputs, their outputs (and the P, dS operands
// of the tensor-core GEMMs) rounded to the type: a few units of the type's epsilon.
template <typename T> double Tolerance() { return std::is_same<T, float>::value ? 2e-5 : std::is_same<T, __half>::value ? 4e-3 : 3e-2; }

template <typename T> T* Dev(const std::vector<float>& h) {
  std::vector<T> t(h.size()); for (size_t i = 0; i < h.size(); ++i) t[i] = FromHost<T>(h[i]);
  T* d; CK(cudaMalloc(&d, t.size()*sizeof(T)+16)); CK(cudaMemcpy(d, t.data(), t.size()*sizeof(T), cudaMemcpyHostToDevice)); return d; }
template <typename T> std::vector<float> Host(const T* d, size_t n) {
  std::vector<T> t(n); CK(cudaMemcpy(t.data(), d, n*sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> h(n); for (size_t i = 0; i < n; ++i) h[i] = ToHost(t[i]); return h; }
template <typename T> std::vector<float> Rounded(std::vector<float> x) { for (auto& e : x) e = ToHost(FromHost<T>(e)); return x; }

// The SIMT kernels (what ran before the tensor-core paths), for timing.
template <typename T> int SimtGrad(const T* q, const T* k, const T* v, const T* y, const T* dy, const float* lse, T* dq, T* dk, T* dv,
                                   int B, int Tn, int S, int H, int KVH, int hd, int causal) {
  const Dims p = MakeDims(B, Tn, S, H, KVH, hd, causal);
  switch (SlicesFor(hd)) {
    case 2: return LaunchGrad<T, 2>(q, k, v, y, dy, lse, dq, dk, dv, p, nullptr);
    case 4: return LaunchGrad<T, 4>(q, k, v, y, dy, lse, dq, dk, dv, p, nullptr);
    case 8: return LaunchGrad<T, 8>(q, k, v, y, dy, lse, dq, dk, dv, p, nullptr);
    default: return -1;
  }
}

template <typename T> int SimtForward(const T* q, const T* k, const T* v, T* y, float* lse, int B, int Tn, int S, int H, int KVH, int hd,
                                      int causal) {
  const Dims p = MakeDims(B, Tn, S, H, KVH, hd, causal);
  switch (SlicesFor(hd)) {
    case 2: return LaunchForward<T, 2>(q, k, v, y, lse, p, nullptr);
    case 4: return LaunchForward<T, 4>(q, k, v, y, lse, p, nullptr);
    case 8: return LaunchForward<T, 8>(q, k, v, y, lse, p, nullptr);
    default: return -1;
  }
}

// The float32 path the public launchers take: MEGANEURA_FLASH_FP32=simt (read at each launch) or tensor cores.
void SelectFp32(bool simt) {
  if (simt) setenv("MEGANEURA_FLASH_FP32", "simt", 1);
  else unsetenv("MEGANEURA_FLASH_FP32");
}

// Largest errors of the float32 checks per path (0 SIMT, 1 3xTF32) and output (y, lse, dq, dk, dv).
Err g_fp32_worst[2][5] = {};

template <typename T>
int Case(int B, int Tn, int S, int H, int KVH, int hd, int causal, bool check, int iters) {
  std::mt19937 g(B*7+Tn*3+hd); std::normal_distribution<float> n(0, 1);
  auto rnd = [&](size_t c){ std::vector<float> x(c); for (auto& e: x) e = n(g); return Rounded<T>(x); };
  size_t nq = (size_t)B*Tn*H*hd, nk = (size_t)B*S*KVH*hd;
  auto q = rnd(nq), k = rnd(nk), v = rnd(nk), dy = rnd(nq);
  T *dq_ = Dev<T>(q), *dk_ = Dev<T>(k), *dv_ = Dev<T>(v), *ddy = Dev<T>(dy), *y, *gq, *gk, *gv; float* lse;
  CK(cudaMalloc(&y, nq*sizeof(T))); CK(cudaMalloc(&lse, (size_t)B*H*Tn*4+16)); CK(cudaMalloc(&gq, nq*sizeof(T))); CK(cudaMalloc(&gk, nk*sizeof(T))); CK(cudaMalloc(&gv, nk*sizeof(T)));
  const int dt = DTypeOf<T>();
  auto fwd = [&]() { return mn_cuda_flash_attention(dt, dq_, dk_, dv_, y, lse, B, Tn, S, H, KVH, hd, causal, nullptr); };
  auto bwd = [&](cudaStream_t st) { return mn_cuda_flash_attention_grad(dt, dq_, dk_, dv_, y, ddy, lse, gq, gk, gv, B, Tn, S, H, KVH, hd, causal, st); };
  int rc = fwd(); if (rc) { printf("fwd rc %d\n", rc); return 1; }
  rc = bwd(nullptr); if (rc) { printf("bwd rc %d\n", rc); return 1; }
  CK(cudaDeviceSynchronize());
  int bad = 0;
  const bool tensor = mma::MmaApplies<T>(MakeDims(B, Tn, S, H, KVH, hd, causal), {}) && (!std::is_same<T, float>::value || !Fp32OnSimt());
  const char* path = !tensor ? "SIMT" : std::is_same<T, float>::value ? "3xTF32" : "MMA";
  if (check) {
    Ref r = Reference(q, k, v, dy, B, Tn, S, H, KVH, hd, causal);
    const Err e[5] = {MaxErr(Host(y, nq), r.y), MaxErr(Host(lse, (size_t)B*H*Tn), r.lse), MaxErr(Host(gq, nq), r.dq), MaxErr(Host(gk, nk), r.dk), MaxErr(Host(gv, nk), r.dv)};
    for (const Err& x : e) bad |= x.rel > Tolerance<T>();
    if (std::is_same<T, float>::value)
      for (int i = 0; i < 5; ++i) {
        Err& w = g_fp32_worst[tensor ? 1 : 0][i];
        w = {std::max(w.abs, e[i].abs), std::max(w.rel, e[i].rel)};
      }
    auto dk1 = Host(gk, nk), dq1 = Host(gq, nq);  // deterministic: a second run is bit-identical
    CK(cudaMemset(gk, 0, nk*sizeof(T))); CK(cudaMemset(gq, 0, nq*sizeof(T)));
    rc = bwd(nullptr); CK(cudaDeviceSynchronize());
    const bool same = rc == 0 && dk1 == Host(gk, nk) && dq1 == Host(gq, nq);
    if (!same) bad = 1;
    printf("check %s %s B=%d T=%d S=%d H=%d KVH=%d hd=%d causal=%d: max abs / rel err y %.2e / %.2e lse %.2e / %.2e dq %.2e / %.2e "
           "dk %.2e / %.2e dv %.2e / %.2e, rerun identical %s %s\n", NameOf<T>(), path, B, Tn, S, H, KVH, hd, causal, e[0].abs, e[0].rel,
           e[1].abs, e[1].rel, e[2].abs, e[2].rel, e[3].abs, e[3].rel, e[4].abs, e[4].rel, same ? "yes" : "NO", bad ? "FAIL" : "ok");
  }
  if (iters) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    std::vector<float> tf, tb, ts, tsf, tsplit, tnosplit;
    for (int rep = 0; rep < 5; ++rep) {
      float ms;
      cudaEventRecord(a); for (int it = 0; it < iters; ++it) fwd();
      cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b); tf.push_back(1000*ms/iters);
      cudaEventRecord(a); for (int it = 0; it < iters; ++it) bwd(nullptr);
      cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b); tb.push_back(1000*ms/iters);
      {
        cudaEventRecord(a); for (int it = 0; it < iters; ++it) SimtGrad<T>(dq_, dk_, dv_, y, ddy, lse, gq, gk, gv, B, Tn, S, H, KVH, hd, causal);
        cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b); ts.push_back(1000*ms/iters);
        for (int split : {0, 1}) {
          mma::g_flash_split_heads = split;
          cudaEventRecord(a); for (int it = 0; it < iters; ++it) bwd(nullptr);
          cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b); (split ? tsplit : tnosplit).push_back(1000*ms/iters);
        }
        mma::g_flash_split_heads = -1;
        cudaEventRecord(a); for (int it = 0; it < iters; ++it) SimtForward<T>(dq_, dk_, dv_, y, lse, B, Tn, S, H, KVH, hd, causal);
        cudaEventRecord(b); cudaEventSynchronize(b); cudaEventElapsedTime(&ms, a, b); tsf.push_back(1000*ms/iters);
      }
    }
    {  // the backward captured in a CUDA graph (stream-ordered scratch inside) replays to the eager numbers
      CK(cudaDeviceSynchronize());
      bwd(nullptr);
      CK(cudaDeviceSynchronize());
      auto eager = Host(gk, nk);
      CK(cudaMemset(gk, 0, nk * sizeof(T)));
      cudaStream_t st;
      CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
      int rc2 = bwd(st);
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
    std::sort(tf.begin(), tf.end()); std::sort(tb.begin(), tb.end()); std::sort(ts.begin(), ts.end()); std::sort(tsf.begin(), tsf.end()); std::sort(tsplit.begin(), tsplit.end()); std::sort(tnosplit.begin(), tnosplit.end());
    printf("time %s %s B=%d T=%d H=%d KVH=%d hd=%d causal=%d: forward median %.1f us (min %.1f max %.1f), backward median %.1f us "
           "(min %.1f max %.1f)", NameOf<T>(), path, B, Tn, H, KVH, hd, causal, tf[2], tf[0], tf[4], tb[2], tb[0], tb[4]);
    if (tensor) printf(", backward with the dK/dV head split off %.1f us / on %.1f us", tnosplit[2], tsplit[2]);
    printf("; SIMT forward median %.1f us, SIMT backward median %.1f us\n", tsf[2], ts[2]);
  }
  CK(cudaGetLastError());
  for (void* d : {(void*)dq_, (void*)dk_, (void*)dv_, (void*)ddy, (void*)y, (void*)lse, (void*)gq, (void*)gk, (void*)gv}) CK(cudaFree(d));
  return bad;
}

template <typename T>
int Checks() {
  int bad = 0;
  bad += Case<T>(2, 37, 37, 4, 2, 8, 1, true, 0);
  bad += Case<T>(1, 5, 9, 2, 1, 4, 0, true, 0);
  bad += Case<T>(3, 70, 70, 6, 3, 64, 1, true, 0);
  bad += Case<T>(2, 33, 50, 4, 4, 64, 0, true, 0);
  bad += Case<T>(1, 40, 40, 2, 1, 100, 1, true, 0);
  bad += Case<T>(1, 20, 20, 4, 2, 128, 1, true, 0);
  bad += Case<T>(1, 130, 130, 2, 1, 128, 0, true, 0);
  bad += Case<T>(1, 17, 17, 2, 2, 256, 1, true, 0);
  bad += Case<T>(1, 45, 45, 3, 1, 24, 1, true, 0);
  bad += Case<T>(2, 256, 256, 9, 3, 64, 1, true, 0);
  return bad;
}

template <typename T>
int Timings() {
  int bad = 0;
  bad += Case<T>(8, 256, 256, 9, 3, 64, 1, false, 50);
  bad += Case<T>(8, 256, 256, 9, 3, 64, 0, false, 50);
  bad += Case<T>(8, 256, 256, 9, 3, 128, 1, false, 50);
  bad += Case<T>(8, 1024, 1024, 9, 3, 64, 1, false, 10);
  return bad;
}

// float32 on both paths against float64: the 3xTF32 tensor-core kernels must stay at float32's order
// of error, within 10x the SIMT kernels' largest (or 2e-6 of the largest |reference|; plain TF32
// would be ~1e-3).
int Fp32Checks() {
  int bad = 0;
  for (bool simt : {true, false}) {
    SelectFp32(simt);
    printf("float32 on %s (MEGANEURA_FLASH_FP32=%s)\n", simt ? "the SIMT kernels" : "tensor cores (3xTF32) where they apply",
           simt ? "simt" : "unset");
    bad += Checks<float>();
  }
  SelectFp32(false);
  const char* names[5] = {"y", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; ++i) {
    const Err s = g_fp32_worst[0][i], t = g_fp32_worst[1][i];
    const bool ok = t.rel <= std::max(10 * s.rel, 2e-6);
    bad += !ok;
    printf("float32 %-3s largest error over the checks: SIMT abs %.2e rel %.2e, 3xTF32 abs %.2e rel %.2e (%.1fx) %s\n", names[i], s.abs,
           s.rel, t.abs, t.rel, s.rel > 0 ? t.rel / s.rel : 0.0, ok ? "ok" : "FAIL");
  }
  return bad;
}

int main(int argc, char** argv) {
  const bool time = argc < 2 || std::string(argv[1]) != "check";
  int bad = Fp32Checks();
  for (int split : {0, 1}) {  // the tensor-core dK/dV kernel with and without its query-head split
    mma::g_flash_split_heads = split;
    printf("dK/dV query-head split %s\n", split ? "on" : "off");
    bad += Checks<__half>() + Checks<__nv_bfloat16>();
  }
  mma::g_flash_split_heads = -1;
  if (time) bad += Timings<float>() + Timings<__half>() + Timings<__nv_bfloat16>();
  if (bad)
    printf("FAILED %d (rows per thread %d)\n", bad, kRows);
  else
    printf("ALL OK (rows per thread %d)\n", kRows);
  return bad != 0;
}
