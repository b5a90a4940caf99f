// CPU kernels of RMSNormLinear and RMSNormSwiGLU (decode_linear.h), with the checks, attribute reading,
// output-shape inference and op descriptors the CUDA glue shares.
//
// The rows are normalised once into a float32 buffer [M, K] (K is a hidden size: a few KB), then the
// output columns of every weight are split into tasks over ORT's thread pool; each task reads its slice
// of a weight once and reuses it for all M rows (a decode step has M = 1..16).
#include <cmath>
#include <cstring>

#include "cpu_elements.h"
#include "cpu_parallel.h"
#include "decode_linear.h"

namespace mn {

OrtStatus* ReadNormLinearAttrs(const OrtKernelInfo* info, bool swiglu, NormLinearAttrs* a) {
  int64_t trans_b = 0;
  if (swiglu) {
    MN_RETURN_IF(AttrFloat(info, "RMSNormSwiGLU", "epsilon", &a->epsilon, nullptr));
    MN_RETURN_IF(AttrInt(info, "RMSNormSwiGLU", "trans_b", &trans_b, nullptr));
  } else {
    MN_RETURN_IF(AttrFloat(info, "RMSNormLinear", "epsilon", &a->epsilon, nullptr));
    MN_RETURN_IF(AttrInt(info, "RMSNormLinear", "trans_b", &trans_b, nullptr));
  }
  const char* op = swiglu ? "RMSNormSwiGLU" : "RMSNormLinear";
  if (!(a->epsilon > 0.0f) || !std::isfinite(a->epsilon))
    return MN_INVALID("%s: attribute epsilon must be a positive finite number, got %g", op, (double)a->epsilon);
  if (trans_b != 0 && trans_b != 1) return MN_INVALID("%s: attribute trans_b must be 0 or 1, got %lld", op, (long long)trans_b);
  a->trans_b = trans_b == 1;
  return nullptr;
}

OrtStatus* ReadNormLinearInputs(OrtKernelContext* ctx, const char* op, const NormLinearAttrs& a, Tensor* x, Tensor* gamma,
                                std::vector<Tensor>* ws, NormLinearProblem* p) {
  size_t n_in = 0;
  MN_RETURN_IF(g_api->KernelContext_GetInputCount(ctx, &n_in));
  if (n_in < 3) return MN_INVALID("%s: takes x, gamma and one or more weights, got %zu inputs", op, n_in);
  MN_RETURN_IF(GetInput(ctx, 0, x));
  MN_RETURN_IF(GetInput(ctx, 1, gamma));
  MN_RETURN_IF(CheckFloatTensor(op, "x", *x, 2));
  MN_RETURN_IF(CheckTensor(op, "gamma", *gamma, x->type, 1));
  p->type = x->type;
  p->M = x->shape[0];
  p->K = x->shape[1];
  if (p->K == 0) return MN_INVALID("%s: x has shape %s; RMSNorm needs at least one feature", op, ShapeStr(x->shape).c_str());
  if (gamma->shape[0] != p->K)
    return MN_INVALID("%s: gamma has shape %s, x has shape %s (gamma must be [K] = [%lld])", op, ShapeStr(gamma->shape).c_str(),
                      ShapeStr(x->shape).c_str(), (long long)p->K);
  size_t n_out = 0;
  MN_RETURN_IF(g_api->KernelContext_GetOutputCount(ctx, &n_out));
  const size_t want = std::strcmp(op, "RMSNormSwiGLU") == 0 ? 1 : n_in - 2;
  if (n_out != want) return MN_INVALID("%s: %zu weights need %zu outputs, got %zu", op, n_in - 2, want, n_out);
  ws->assign(n_in - 2, Tensor());
  p->N.assign(n_in - 2, 0);
  for (size_t i = 0; i + 2 < n_in; ++i) {
    Tensor& w = (*ws)[i];
    MN_RETURN_IF(GetInput(ctx, i + 2, &w));
    char arg[24];
    std::snprintf(arg, sizeof arg, "w%zu", i);
    MN_RETURN_IF(CheckTensor(op, arg, w, x->type, 2));
    const int64_t k = a.trans_b ? w.shape[1] : w.shape[0];
    if (k != p->K)
      return MN_INVALID("%s: weight %s has shape %s, x has shape %s (with trans_b=%d the weight must be %s with K = %lld)", op, arg,
                        ShapeStr(w.shape).c_str(), ShapeStr(x->shape).c_str(), (int)a.trans_b, a.trans_b ? "[N, K]" : "[K, N]",
                        (long long)p->K);
    p->N[i] = a.trans_b ? w.shape[0] : w.shape[1];
  }
  return nullptr;
}

OrtStatus* CheckSwiGLUWidths(bool swiglu, const std::vector<Tensor>& ws, const NormLinearProblem& p) {
  if (!swiglu) return nullptr;  // RMSNormLinear: the output count was checked by ReadNormLinearInputs
  if (ws.size() != 2) return MN_INVALID("RMSNormSwiGLU: takes x, gamma, w_gate and w_up, got %zu weights", ws.size());
  if (p.N[0] != p.N[1])
    return MN_INVALID("RMSNormSwiGLU: w_gate and w_up must give one output width, got %lld and %lld (shapes %s and %s)",
                      (long long)p.N[0], (long long)p.N[1], ShapeStr(ws[0].shape).c_str(), ShapeStr(ws[1].shape).c_str());
  return nullptr;
}

namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;

// Output shape [M, N] of a projection of x [M, K] (input 0) by the weight at input `w`; unknown when an
// input shape is unknown (ORT then sizes the output at run time).
OrtStatus* ProjectionShape(OrtShapeInferContext* ctx, size_t w, size_t out, bool trans_b) {
  OrtTensorTypeAndShapeInfo *x = nullptr, *wi = nullptr;
  OrtStatus* st = g_api->ShapeInferContext_GetInputTypeShape(ctx, 0, &x);
  if (!st) st = g_api->ShapeInferContext_GetInputTypeShape(ctx, w, &wi);
  if (st) {
    g_api->ReleaseStatus(st);
    return nullptr;
  }
  size_t rx = 0, rw = 0;
  int64_t dx[2], dw[2];
  const char *sx[2] = {"", ""}, *sw[2] = {"", ""};
  st = g_api->GetDimensionsCount(x, &rx);
  if (!st) st = g_api->GetDimensionsCount(wi, &rw);
  if (st || rx != 2 || rw != 2) {  // a wrong rank: the kernel reports it
    if (st) g_api->ReleaseStatus(st);
    return nullptr;
  }
  ONNXTensorElementDataType type;
  st = g_api->GetDimensions(x, dx, 2);
  if (!st) st = g_api->GetSymbolicDimensions(x, sx, 2);
  if (!st) st = g_api->GetDimensions(wi, dw, 2);
  if (!st) st = g_api->GetSymbolicDimensions(wi, sw, 2);
  if (!st) st = g_api->GetTensorElementType(x, &type);
  if (st) return st;
  const int n = trans_b ? 0 : 1;
  int64_t dims[2] = {dx[0], dw[n]};
  const char* sym[2] = {sx[0], sw[n]};
  for (int i = 0; i < 2; ++i)
    if (dims[i] < 0 && (sym[i] == nullptr || sym[i][0] == '\0')) return nullptr;  // unnamed: leave unknown
  OrtTensorTypeAndShapeInfo* info = nullptr;
  st = g_api->CreateTensorTypeAndShapeInfo(&info);
  if (!st) st = g_api->SetTensorElementType(info, type);
  if (!st) st = g_api->SetDimensions(info, dims, 2);
  if (!st) st = g_api->SetSymbolicDimensions(info, sym, 2);
  if (!st) st = g_api->ShapeInferContext_SetOutputTypeShape(ctx, out, info);
  if (info) g_api->ReleaseTensorTypeAndShapeInfo(info);
  return st;
}

OrtStatus* ORT_API_CALL InferShapes(const OrtCustomOp* op, OrtShapeInferContext* ctx) {
  const OrtOpAttr* attr = nullptr;
  int64_t trans_b = 0;
  size_t len = 0, n_in = 0;
  OrtStatus* st = g_api->ShapeInferContext_GetAttribute(ctx, "trans_b", &attr);
  if (!st) st = g_api->ReadOpAttr(attr, ORT_OP_ATTR_INT, &trans_b, sizeof trans_b, &len);
  if (!st) st = g_api->ShapeInferContext_GetInputCount(ctx, &n_in);
  if (st) return st;  // a missing attribute fails the load with ORT's message
  const bool swiglu = std::strcmp(static_cast<const OpDef*>(op)->name, "RMSNormSwiGLU") == 0;
  for (size_t w = 2; w < (swiglu ? 3 : n_in); ++w) MN_RETURN_IF(ProjectionShape(ctx, w, w - 2, trans_b == 1));
  return nullptr;
}

// x [M, K] -> xn [M, K] float32: x / sqrt(mean(x^2) + eps) * gamma per row.
template <class T>
void NormalizeRows(const T* x, const T* gamma, int64_t M, int64_t K, float eps, float* xn) {
  for (int64_t m = 0; m < M; ++m) {
    const T* row = x + m * K;
    float ss = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float v = ToFloat(row[k]);
      ss += v * v;
    }
    const float rms = std::sqrt(ss / static_cast<float>(K) + eps);
    for (int64_t k = 0; k < K; ++k) xn[m * K + k] = ToFloat(row[k]) / rms * ToFloat(gamma[k]);
  }
}

// acc[m * width + j] = sum_k xn[m, k] * w(k, n0 + j) for j < width, the weight read once for all rows.
template <class T>
inline __attribute__((always_inline)) void ProductSpan(const float* __restrict__ xn, const T* __restrict__ w, int64_t M, int64_t K,
                                                       int64_t N, bool trans_b, int64_t n0, int64_t width, float* __restrict__ acc) {
  if (trans_b) {  // w [N, K]: dot products over the weight's contiguous rows, 4 columns at a time
    int64_t j = 0;
    for (; j + 4 <= width; j += 4) {
      const T *w0 = w + (n0 + j) * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = xn + m * K;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t k = 0; k < K; ++k) {
          const float v = xr[k];
          s0 += v * ToFloat(w0[k]);
          s1 += v * ToFloat(w1[k]);
          s2 += v * ToFloat(w2[k]);
          s3 += v * ToFloat(w3[k]);
        }
        float* a = acc + m * width + j;
        a[0] = s0;
        a[1] = s1;
        a[2] = s2;
        a[3] = s3;
      }
    }
    for (; j < width; ++j) {
      const T* wr = w + (n0 + j) * K;
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = xn + m * K;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < K; ++k) s += xr[k] * ToFloat(wr[k]);
        acc[m * width + j] = s;
      }
    }
    return;
  }
  std::memset(acc, 0, sizeof(float) * M * width);  // w [K, N]: axpys of weight row slices, 4 rows per pass
  int64_t k = 0;                                   // (the accumulators' load/store once per 4 weight rows)
  for (; k + 4 <= K; k += 4) {
    const T *w0 = w + k * N + n0, *w1 = w0 + N, *w2 = w1 + N, *w3 = w2 + N;
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = xn + m * K + k;
      const float x0 = xr[0], x1 = xr[1], x2 = xr[2], x3 = xr[3];
      float* a = acc + m * width;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j)
        a[j] += x0 * ToFloat(w0[j]) + x1 * ToFloat(w1[j]) + x2 * ToFloat(w2[j]) + x3 * ToFloat(w3[j]);
    }
  }
  for (; k < K; ++k) {
    const T* wr = w + k * N + n0;
    for (int64_t m = 0; m < M; ++m) {
      const float xv = xn[m * K + k];
      float* a = acc + m * width;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) a[j] += xv * ToFloat(wr[j]);
    }
  }
}

template <class T>
void Product(const float* xn, const T* w, int64_t M, int64_t K, int64_t N, bool trans_b, int64_t n0, int64_t width, float* acc) {
  ProductSpan(xn, w, M, K, N, trans_b, n0, width, acc);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// float32 weights on a CPU with AVX2 + FMA: the same loops for 8 lanes (the baseline build has 4), as SwiGLU does.
__attribute__((target("avx2,fma"))) void ProductAvx2(const float* xn, const float* w, int64_t M, int64_t K, int64_t N, bool trans_b,
                                                     int64_t n0, int64_t width, float* acc) {
  ProductSpan(xn, w, M, K, N, trans_b, n0, width, acc);
}
template <>
void Product<float>(const float* xn, const float* w, int64_t M, int64_t K, int64_t N, bool trans_b, int64_t n0, int64_t width,
                    float* acc) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2)
    ProductAvx2(xn, w, M, K, N, trans_b, n0, width, acc);
  else
    ProductSpan(xn, w, M, K, N, trans_b, n0, width, acc);
}
#endif

inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }

// Output columns per task: a slice of a weight. [K, N] weights are read row by row: a slice 1024 wide
// reads 4 KB per row (one page) where 64 columns would cost a TLB miss per 256 bytes.
constexpr int64_t kColumnsNK = 64, kColumnsKN = 1024;

class NormLinearCpu : public Kernel {
 public:
  NormLinearCpu(const NormLinearAttrs& a, bool swiglu) : a_(a), swiglu_(swiglu) {}
  static OrtStatus* CreateLinear(const OrtKernelInfo* info, Kernel** out) { return Create(info, false, out); }
  static OrtStatus* CreateSwiGLU(const OrtKernelInfo* info, Kernel** out) { return Create(info, true, out); }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    const char* op = swiglu_ ? "RMSNormSwiGLU" : "RMSNormLinear";
    Tensor x, gamma;
    std::vector<Tensor> ws;
    NormLinearProblem p;
    MN_RETURN_IF(ReadNormLinearInputs(ctx, op, a_, &x, &gamma, &ws, &p));
    MN_RETURN_IF(CheckSwiGLUWidths(swiglu_, ws, p));
    std::vector<void*> outs(swiglu_ ? 1 : ws.size());
    for (size_t i = 0; i < outs.size(); ++i) MN_RETURN_IF(GetOutput(ctx, i, {p.M, p.N[i]}, &outs[i]));
    return DispatchFloat(p.type, [&](auto tag) {
      using T = decltype(tag);
      std::vector<const T*> w;
      for (const Tensor& t : ws) w.push_back(static_cast<const T*>(t.data));
      return Run(ctx, p, static_cast<const T*>(x.data), static_cast<const T*>(gamma.data), w, outs);
    });
  }

 private:
  static OrtStatus* Create(const OrtKernelInfo* info, bool swiglu, Kernel** out) {
    NormLinearAttrs a;
    MN_RETURN_IF(ReadNormLinearAttrs(info, swiglu, &a));
    *out = new NormLinearCpu(a, swiglu);
    return nullptr;
  }

  template <class T>
  OrtStatus* Run(OrtKernelContext* ctx, const NormLinearProblem& p, const T* x, const T* gamma, const std::vector<const T*>& w,
                 const std::vector<void*>& outs) {
    if (p.M == 0) return nullptr;
    std::vector<float> xn(p.M * p.K);
    NormalizeRows(x, gamma, p.M, p.K, a_.epsilon, xn.data());
    std::vector<std::pair<size_t, int64_t>> tasks;  // (output, first column)
    const int64_t columns = a_.trans_b ? kColumnsNK : kColumnsKN;
    for (size_t i = 0; i < outs.size(); ++i)
      for (int64_t n = 0; n < p.N[i]; n += columns) tasks.emplace_back(i, n);
    return ParallelFor(ctx, tasks.size(), [&](size_t t) {
      const size_t i = tasks[t].first;
      const int64_t n0 = tasks[t].second, width = std::min(columns, p.N[i] - n0), N = p.N[i];
      std::vector<float> acc(p.M * width), up;
      Product(xn.data(), w[i], p.M, p.K, N, a_.trans_b, n0, width, acc.data());
      T* y = static_cast<T*>(outs[i]);
      if (swiglu_) {
        up.resize(acc.size());
        Product(xn.data(), w[1], p.M, p.K, N, a_.trans_b, n0, width, up.data());
      }
      for (int64_t m = 0; m < p.M; ++m)
        for (int64_t j = 0; j < width; ++j) {
          const float v = acc[m * width + j];
          y[m * N + n0 + j] = FromFloat<T>(swiglu_ ? Silu(v) * up[m * width + j] : v);
        }
    });
  }

  NormLinearAttrs a_;
  bool swiglu_;
};

// The factories under the names the registration rows use (tests/test_custom_op_schema.py parses them).
struct RMSNormSwiGLUCpu {
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return NormLinearCpu::CreateSwiGLU(info, out); }
};

}  // namespace

OpDef* NewRMSNormLinearOpDef(const char* ep, ONNXTensorElementDataType type, KernelFactory factory) {
  // x, gamma, then the variadic weights (one type for all); one variadic output per weight.
  OpDef* op = new OpDef("RMSNormLinear", ep, {type, type, type}, {type}, {false, false, false}, {false, false, false}, factory, 0);
  op->GetInputCharacteristic = [](const OrtCustomOp*, size_t i) { return i < 2 ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_VARIADIC; };
  op->GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_VARIADIC; };
  InferNormLinearShapes(op);
  return op;
}

void InferNormLinearShapes(OpDef* op) { op->InferOutputShapeFn = InferShapes; }

void AddCpuDecodeLinearOps(std::vector<OpDef*>* ops) {
  const char* ep = "CPUExecutionProvider";
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(NewRMSNormLinearOpDef(ep, T, NormLinearCpu::CreateLinear));
    OpDef* swiglu = new OpDef("RMSNormSwiGLU", ep, {T, T, T, T}, {T}, {false, false, false, false}, {false, false, false, false},
                              RMSNormSwiGLUCpu::Create, 0);
    InferNormLinearShapes(swiglu);
    ops->push_back(swiglu);
  }
}

}  // namespace mn
