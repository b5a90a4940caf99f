// Standalone check + timing of the RMSNormLinear / RMSNormSwiGLU GEMV launchers, without ORT:
//   make -C custom_ops decode-linear-check && custom_ops/build/decode_linear_check [--iters N] [--peak-gbs G] [--json FILE]
// Checks every element type (float32, float16, bfloat16) against a double-precision host reference of
// the same (rounded) inputs, for SmolLM2-135M's decode shapes at M = 1, 8 and 16 rows and both weight
// layouts. Then times each launch with CUDA events over N launches captured in a CUDA graph (GPU time
// only) and reports the weight bytes read per second and its fraction of --peak-gbs (default: the
// device's nominal bandwidth, H200 4800, H100 3350). For
// q/k/v's shape it times cuBLAS (cublasGemmEx, float32 accumulation, no norm; where nvcc finds
// cuBLAS's header) at 1..128 rows: the prefill alternative, to show where the GEMV stops paying (the
// graph pass fuses <= 16 rows). Exit status 1 when a check fails.
#include <cuda_runtime.h>
#ifdef MN_HAVE_CUBLAS  // the Makefile defines it where nvcc finds cublas_v2.h
#include <cublas_v2.h>
#endif

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_decode_linear.cu"
// After the kernels: it needs their element-type enum.
#include "check_harness.cuh"

struct Shape {
  const char* name;
  int64_t K;
  std::vector<int64_t> N;
  bool swiglu;
};

struct Result {
  std::string line;
  double err = 0;
};

// One configuration: checks against the host reference, then times `iters` graph-replayed launches.
static Result RunCase(const Shape& s, int64_t M, int dt, bool trans_b, int iters, double peak_gbs, Timer& tm) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd;
  std::vector<float> x(M * s.K), gamma(s.K);
  for (float& v : x) v = nd(rng);
  for (float& v : gamma) v = 0.5f + std::fabs(nd(rng)) * 0.5f;
  std::vector<std::vector<float>> w(s.N.size());
  std::vector<void*> dw, dy;
  double weight_bytes = 0;
  for (size_t i = 0; i < s.N.size(); ++i) {
    w[i].resize(s.K * s.N[i]);
    for (float& v : w[i]) v = nd(rng) / std::sqrt(static_cast<float>(s.K));
    dw.push_back(Upload(ToDevice(&w[i], dt)));
    weight_bytes += static_cast<double>(w[i].size()) * ElemBytes(dt);
  }
  void* dx = Upload(ToDevice(&x, dt));
  void* dg = Upload(ToDevice(&gamma, dt));
  const size_t outs = s.swiglu ? 1 : s.N.size();
  for (size_t i = 0; i < outs; ++i) {
    void* d = nullptr;
    CK(cudaMalloc(&d, M * s.N[i] * ElemBytes(dt)));
    dy.push_back(d);
  }
  const float eps = 1e-5f;
  auto launch = [&](cudaStream_t stream) {
    int e = s.swiglu ? mn_cuda_rms_norm_swiglu(dt, dx, dg, M, s.K, eps, trans_b, dw[0], dw[1], s.N[0], dy[0], stream)
                     : mn_cuda_rms_norm_linear(dt, dx, dg, M, s.K, eps, trans_b, static_cast<int>(dw.size()), dw.data(), s.N.data(),
                                               dy.data(), stream);
    if (e) {
      std::printf("launch failed: %s\n", cudaGetErrorString(static_cast<cudaError_t>(e)));
      std::exit(1);
    }
  };
  launch(tm.s);
  CK(cudaStreamSynchronize(tm.s));
  // host reference in double from the rounded inputs
  std::vector<double> xn(M * s.K);
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t k = 0; k < s.K; ++k) ss += double(x[m * s.K + k]) * x[m * s.K + k];
    const double r = std::sqrt(ss / s.K + eps);
    for (int64_t k = 0; k < s.K; ++k) xn[m * s.K + k] = x[m * s.K + k] / r * gamma[k];
  }
  auto proj = [&](size_t i, int64_t m, int64_t n) {
    double acc = 0;
    for (int64_t k = 0; k < s.K; ++k) acc += xn[m * s.K + k] * w[i][trans_b ? n * s.K + k : k * s.N[i] + n];
    return acc;
  };
  double err = 0;
  for (size_t i = 0; i < outs; ++i) {
    std::vector<unsigned char> got(M * s.N[i] * ElemBytes(dt));
    CK(cudaMemcpy(got.data(), dy[i], got.size(), cudaMemcpyDeviceToHost));
    const int64_t step = std::max<int64_t>(1, s.N[i] / 1024);  // the LM head: a sample of its columns
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < s.N[i]; n += step) {
        double want = proj(i, m, n);
        if (s.swiglu) want = want / (1.0 + std::exp(-want)) * proj(1, m, n);
        const double g = FromDevice(got.data() + (m * s.N[i] + n) * ElemBytes(dt), dt);
        err = std::max(err, std::fabs(g - want) / (1.0 + std::fabs(want)));
      }
  }
  // timing: `iters` launches captured in one CUDA graph
  const double us = tm.Graph(launch, iters), gbs = weight_bytes / (us * 1e-6) / 1e9;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"op\": \"%s\", \"shape\": \"%s\", \"dtype\": \"%s\", \"layout\": \"%s\", \"M\": %lld, \"K\": %lld, \"us\": %.2f, "
                "\"weight_GBps\": %.0f, \"of_peak\": %.3f, \"max_rel_err\": %.2e}",
                s.swiglu ? "RMSNormSwiGLU" : "RMSNormLinear", s.name, kTypeName[dt], trans_b ? "[N,K]" : "[K,N]", (long long)M,
                (long long)s.K, us, gbs, gbs / peak_gbs, err);
  for (void* p : dw) CK(cudaFree(p));
  for (void* p : dy) CK(cudaFree(p));
  CK(cudaFree(dx));
  CK(cudaFree(dg));
  return {buf, err};
}

#ifdef MN_HAVE_CUBLAS
// cuBLAS y [M, N] = x [M, K] @ w^T (w [N, K]), the Gemm the unfused graph runs, in the same element type.
static std::string CublasCase(cublasHandle_t h, int64_t M, int64_t K, int64_t N, int dt, int iters, Timer& tm) {
  const cudaDataType t = dt == MN_F32 ? CUDA_R_32F : dt == MN_F16 ? CUDA_R_16F : CUDA_R_16BF;
  void *a, *b, *c;
  CK(cudaMalloc(&a, M * K * ElemBytes(dt)));
  CK(cudaMalloc(&b, N * K * ElemBytes(dt)));
  CK(cudaMalloc(&c, M * N * ElemBytes(dt)));
  CK(cudaMemset(a, 0, M * K * ElemBytes(dt)));
  CK(cudaMemset(b, 0, N * K * ElemBytes(dt)));
  const float one = 1.0f, zero = 0.0f;
  cublasSetStream(h, tm.s);
  // column-major: C^T [N, M] = W [N, K] (stored as K x N column-major, transposed) * X^T [K, M]
  auto gemm = [&]() {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, b, t, (int)K, a, t, (int)K, &zero, c, t, (int)N,
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const double us = tm.Stream([&](cudaStream_t) { gemm(); }, iters);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"op\": \"cublasGemmEx\", \"dtype\": \"%s\", \"M\": %lld, \"K\": %lld, \"N\": %lld, \"us\": %.2f}",
                kTypeName[dt], (long long)M, (long long)K, (long long)N, us);
  return buf;
}
#endif

int main(int argc, char** argv) {
  int iters = 200;
  const DeviceInfo dev = QueryDevice();
  double peak = dev.peak_gbps;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--peak-gbs") && i + 1 < argc) peak = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
  }
  std::printf("device %s (%d SMs), peak %.0f GB/s\n", dev.name.c_str(), dev.sms, peak);
  Timer tm;
  const std::vector<Shape> shapes = {
      {"smollm2 q|k|v", 576, {576, 192, 192}, false},
      {"smollm2 gate/up", 576, {1536, 1536}, true},
      {"smollm2 lm_head", 576, {49152}, false},
      {"odd K/N", 333, {77, 5}, false},
  };
  std::vector<std::string> lines;
  bool ok = true;
  for (const Shape& s : shapes)
    for (int64_t M : {1, 8, 16})
      for (int dt : {MN_F32, MN_F16, MN_BF16})
        for (bool trans_b : {true, false}) {
          Result r = RunCase(s, M, dt, trans_b, iters, peak, tm);
          const double tol = dt == MN_F32 ? 1e-4 : dt == MN_F16 ? 4e-3 : 3e-2;  // float32 sums; one rounding of the output
          if (!(r.err <= tol)) ok = false;
          std::printf("%s%s\n", r.line.c_str(), r.err <= tol ? "" : "   <-- FAILED");
          lines.push_back(r.line);
        }
#ifdef MN_HAVE_CUBLAS
  cublasHandle_t h;
  if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
    for (int dt : {MN_F32, MN_F16})
      for (int64_t M : {1, 8, 16, 32, 128}) {
        lines.push_back(CublasCase(h, M, 576, 960, dt, iters, tm));
        std::printf("%s\n", lines.back().c_str());
      }
    cublasDestroy(h);
  }
#else
  std::printf("(built without cuBLAS: no Gemm timings next to the GEMV)\n");
#endif
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (f) {
      std::fprintf(f, "[\n");
      for (size_t i = 0; i < lines.size(); ++i) std::fprintf(f, "  %s%s\n", lines[i].c_str(), i + 1 < lines.size() ? "," : "");
      std::fprintf(f, "]\n");
      std::fclose(f);
    }
  }
  std::printf(ok ? "decode_linear_check: all checks passed\n" : "decode_linear_check: CHECKS FAILED\n");
  return ok ? 0 : 1;
}
