// Standalone check + timing of the RMSNormLinear / RMSNormSwiGLU / LinearResidual GEMV launchers, without ORT:
//   make -C custom_ops decode-linear-check && custom_ops/build/decode_linear_check [--iters N] [--peak-gbs G] [--json FILE] [--no-pdl]
// Checks every element type (float32, float16, bfloat16) against a double-precision host reference of
// the same (rounded) inputs, for SmolLM2-135M's decode shapes (q|k|v, gate/up, the LM head, and o_proj
// 576x576 and down_proj 1536x576 with their residual) at M = 1, 8 and 16 rows and both weight layouts. Then times each launch with CUDA events over N launches captured in a CUDA graph (GPU time
// only; weights over a quarter of L2, the LM head, are read from four copies in turn, so from DRAM as in
// a decode step) and reports the weight bytes read per second and its fraction of --peak-gbs (default: the
// device's nominal bandwidth, H200 4800, H100 3350). For
// q/k/v's shape it times cuBLAS (cublasGemmEx, float32 accumulation, no norm; where nvcc finds
// cuBLAS's header) at 1..128 rows: the prefill alternative, to show where the GEMV stops paying (the
// graph pass fuses <= 16 rows), and for o_proj's and down_proj's shapes what ONNX Runtime's CUDA Gemm
// with a residual C does instead of LinearResidual: a copy of C into the output, then cublasGemmEx with
// beta = 1 (both timed, one row and 16). Exit status 1 when a check fails.
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

enum Op { kOpNormLinear, kOpNormSwiGLU, kOpResidual };
static const char* kOpName[] = {"RMSNormLinear", "RMSNormSwiGLU", "LinearResidual"};

struct Shape {
  const char* name;
  int64_t K;
  std::vector<int64_t> N;
  Op op;
};

// The double-precision reference of output i, row m, column n from the rounded inputs: the normalised
// rows xn (x itself for LinearResidual) times the weights, then the op's epilogue.
static double Reference(const Shape& s, bool trans_b, const std::vector<double>& xn, const std::vector<std::vector<float>>& w,
                        const std::vector<float>& residual, size_t i, int64_t m, int64_t n) {
  auto proj = [&](size_t j) {
    double acc = 0;
    for (int64_t k = 0; k < s.K; ++k) acc += xn[m * s.K + k] * w[j][trans_b ? n * s.K + k : k * s.N[j] + n];
    return acc;
  };
  const double g = proj(i);
  if (s.op == kOpNormSwiGLU) return g / (1.0 + std::exp(-g)) * proj(1);
  if (s.op == kOpResidual) return g + residual[m * s.N[0] + n];
  return g;
}

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
  // Weights larger than a quarter of L2 (the LM head) are read from `copies` copies in turn, as a decode
  // step reads its LM head after ~200 MB of layer weights: from DRAM, not from the last launch's L2.
  const int copies = weight_bytes * 4 > L2Bytes() ? 4 : 1;
  std::vector<std::vector<void*>> dws(copies, dw);
  for (int c = 1; c < copies; ++c)
    for (size_t i = 0; i < dw.size(); ++i) dws[c][i] = Upload(ToDevice(&w[i], dt));
  int turn = 0;
  std::vector<float> residual(s.op == kOpResidual ? M * s.N[0] : 0);
  for (float& v : residual) v = nd(rng);
  void* dx = Upload(ToDevice(&x, dt));
  void* dg = Upload(ToDevice(&gamma, dt));
  void* dr = residual.empty() ? nullptr : Upload(ToDevice(&residual, dt));
  const size_t outs = s.op == kOpNormLinear ? s.N.size() : 1;
  for (size_t i = 0; i < outs; ++i) {
    void* d = nullptr;
    CK(cudaMalloc(&d, M * s.N[i] * ElemBytes(dt)));
    dy.push_back(d);
  }
  const float eps = 1e-5f;
  auto launch = [&](cudaStream_t stream) {
    const std::vector<void*>& dw = dws[turn++ % copies];
    int e = s.op == kOpNormSwiGLU ? mn_cuda_rms_norm_swiglu(dt, dx, dg, M, s.K, eps, trans_b, dw[0], dw[1], s.N[0], dy[0], stream)
            : s.op == kOpResidual ? mn_cuda_linear_residual(dt, dx, dw[0], dr, M, s.K, s.N[0], trans_b, dy[0], stream)
                                  : mn_cuda_rms_norm_linear(dt, dx, dg, M, s.K, eps, trans_b, static_cast<int>(dw.size()), dw.data(),
                                                            s.N.data(), dy.data(), stream);
    if (e) {
      std::printf("launch failed: %s\n", cudaGetErrorString(static_cast<cudaError_t>(e)));
      std::exit(1);
    }
  };
  launch(tm.s);
  CK(cudaStreamSynchronize(tm.s));
  // host reference in double from the rounded inputs (LinearResidual: no norm)
  std::vector<double> xn(M * s.K);
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t k = 0; k < s.K; ++k) ss += double(x[m * s.K + k]) * x[m * s.K + k];
    const double r = std::sqrt(ss / s.K + eps);
    for (int64_t k = 0; k < s.K; ++k) xn[m * s.K + k] = s.op == kOpResidual ? x[m * s.K + k] : x[m * s.K + k] / r * gamma[k];
  }
  double err = 0;
  for (size_t i = 0; i < outs; ++i) {
    std::vector<unsigned char> got(M * s.N[i] * ElemBytes(dt));
    CK(cudaMemcpy(got.data(), dy[i], got.size(), cudaMemcpyDeviceToHost));
    const int64_t step = std::max<int64_t>(1, s.N[i] / 1024);  // the LM head: a sample of its columns
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < s.N[i]; n += step) {
        const double want = Reference(s, trans_b, xn, w, residual, i, m, n);
        const double g = FromDevice(got.data() + (m * s.N[i] + n) * ElemBytes(dt), dt);
        err = WorseErr(err, std::fabs(g - want) / (1.0 + std::fabs(want)));
      }
  }
  // timing: `iters` launches captured in one CUDA graph
  const double us = tm.Graph(launch, iters), gbs = weight_bytes / (us * 1e-6) / 1e9;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"op\": \"%s\", \"shape\": \"%s\", \"dtype\": \"%s\", \"layout\": \"%s\", \"M\": %lld, \"K\": %lld, \"us\": %.2f, "
                "\"weight_GBps\": %.0f, \"of_peak\": %.3f, \"weight_copies\": %d, \"max_rel_err\": %.2e}",
                kOpName[s.op], s.name, kTypeName[dt], trans_b ? "[N,K]" : "[K,N]", (long long)M,
                (long long)s.K, us, gbs, gbs / peak_gbs, copies, err);
  for (const std::vector<void*>& set : dws)
    for (void* p : set) CK(cudaFree(p));
  for (void* p : dy) CK(cudaFree(p));
  CK(cudaFree(dx));
  CK(cudaFree(dg));
  CK(cudaFree(dr));
  return {buf, err};
}

#ifdef MN_HAVE_CUBLAS
// cuBLAS y [M, N] = x [M, K] @ w^T (w [N, K]), the Gemm the unfused graph runs, in the same element type.
// residual: y = r + x @ w^T as ONNX Runtime's CUDA Gemm runs it with a full-size C: r copied into y
// (cudaMemcpyAsync), then the product accumulated into it with beta = 1; both are timed.
static std::string CublasCase(cublasHandle_t h, int64_t M, int64_t K, int64_t N, int dt, int iters, Timer& tm, bool residual = false) {
  const cudaDataType t = dt == MN_F32 ? CUDA_R_32F : dt == MN_F16 ? CUDA_R_16F : CUDA_R_16BF;
  void *a, *b, *c, *r;
  CK(cudaMalloc(&r, M * N * ElemBytes(dt)));
  CK(cudaMemset(r, 0, M * N * ElemBytes(dt)));
  CK(cudaMalloc(&a, M * K * ElemBytes(dt)));
  CK(cudaMalloc(&b, N * K * ElemBytes(dt)));
  CK(cudaMalloc(&c, M * N * ElemBytes(dt)));
  CK(cudaMemset(a, 0, M * K * ElemBytes(dt)));
  CK(cudaMemset(b, 0, N * K * ElemBytes(dt)));
  const float one = 1.0f, zero = 0.0f;
  cublasSetStream(h, tm.s);
  // column-major: C^T [N, M] = W [N, K] (stored as K x N column-major, transposed) * X^T [K, M]
  auto gemm = [&]() {
    if (residual) CK(cudaMemcpyAsync(c, r, M * N * ElemBytes(dt), cudaMemcpyDeviceToDevice, tm.s));
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, b, t, (int)K, a, t, (int)K, residual ? &one : &zero, c, t,
                 (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const double us = tm.Stream([&](cudaStream_t) { gemm(); }, iters);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
  CK(cudaFree(r));
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"op\": \"%s\", \"dtype\": \"%s\", \"M\": %lld, \"K\": %lld, \"N\": %lld, \"us\": %.2f}",
                residual ? "copy C + cublasGemmEx beta=1" : "cublasGemmEx", kTypeName[dt], (long long)M, (long long)K, (long long)N, us);
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
    else if (!std::strcmp(argv[i], "--no-pdl")) g_decode_linear_pdl = false;
  }
  std::printf("device %s (%d SMs), peak %.0f GB/s\n", dev.name.c_str(), dev.sms, peak);
  Timer tm;
  const std::vector<Shape> shapes = {
      {"smollm2 q|k|v", 576, {576, 192, 192}, kOpNormLinear},
      {"smollm2 gate/up", 576, {1536, 1536}, kOpNormSwiGLU},
      {"smollm2 lm_head", 576, {49152}, kOpNormLinear},
      {"odd K/N", 333, {77, 5}, kOpNormLinear},
      {"smollm2 o_proj + residual", 576, {576}, kOpResidual},
      {"smollm2 down_proj + residual", 1536, {576}, kOpResidual},
      {"odd K/N + residual", 333, {77}, kOpResidual},
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
    for (int dt : {MN_F32, MN_F16})  // o_proj, down_proj: what the unfused graph runs instead of LinearResidual
      for (int64_t K : {576, 1536})
        for (int64_t M : {1, 16}) {
          lines.push_back(CublasCase(h, M, K, 576, dt, iters, tm, true));
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
