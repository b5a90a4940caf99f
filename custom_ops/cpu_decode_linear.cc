// CPU kernels of RMSNormLinear, RMSNormSwiGLU and LinearResidual (decode_linear.h), with the checks,
// attribute reading, output-shape inference and op descriptors the CUDA glue shares.
//
// The rows are normalised (LinearResidual: converted) once into a float32 buffer [M, K] (K is a hidden
// size: a few KB), then every weight is cut into tasks (column slices, and for [K, N] weights blocks
// of rows; SplitOf) over ORT's thread pool; each task reads its piece of a weight once and reuses it
// for all M rows (a decode step has M = 1..16). Half values go through the whole-row conversions of
// cpu_elements.h.
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>

#include "cpu_elements.h"
#include "cpu_parallel.h"
#include "decode_linear.h"

namespace mn {

OrtStatus* ReadNormLinearAttrs(const OrtKernelInfo* info, bool swiglu, NormLinearAttrs* a) {
  int64_t trans_b = 0;
  if (swiglu) {  // literal op names: tests/test_custom_op_schema.py reads these calls against the op table
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

namespace {

// Weight `arg` against x [M, K]: [N, K] with trans_b, else [K, N]; its N in *n.
OrtStatus* CheckWeight(const char* op, const char* arg, const Tensor& w, const Tensor& x, bool trans_b, int64_t* n) {
  MN_RETURN_IF(CheckTensor(op, arg, w, x.type, 2));
  const int64_t K = x.shape[1], k = trans_b ? w.shape[1] : w.shape[0];
  if (k != K)
    return MN_INVALID("%s: weight %s has shape %s, x has shape %s (with trans_b=%d the weight must be %s with K = %lld)", op, arg,
                      ShapeStr(w.shape).c_str(), ShapeStr(x.shape).c_str(), (int)trans_b, trans_b ? "[N, K]" : "[K, N]", (long long)K);
  *n = trans_b ? w.shape[0] : w.shape[1];
  return nullptr;
}

}  // namespace

OrtStatus* PrepareNormLinear(OrtKernelContext* ctx, const NormLinearAttrs& a, bool swiglu, NormLinearCall* c) {
  const char* op = swiglu ? "RMSNormSwiGLU" : "RMSNormLinear";
  size_t n_in = 0, n_out = 0;
  MN_RETURN_IF(g_api->KernelContext_GetInputCount(ctx, &n_in));
  if (n_in < 3) return MN_INVALID("%s: takes x, gamma and one or more weights, got %zu inputs", op, n_in);
  MN_RETURN_IF(GetInput(ctx, 0, &c->x));
  MN_RETURN_IF(GetInput(ctx, 1, &c->gamma));
  MN_RETURN_IF(CheckFloatTensor(op, "x", c->x, 2));
  MN_RETURN_IF(CheckTensor(op, "gamma", c->gamma, c->x.type, 1));
  c->type = c->x.type;
  c->M = c->x.shape[0];
  c->K = c->x.shape[1];
  if (c->K == 0) return MN_INVALID("%s: x has shape %s; RMSNorm needs at least one feature", op, ShapeStr(c->x.shape).c_str());
  if (c->gamma.shape[0] != c->K)
    return MN_INVALID("%s: gamma has shape %s, x has shape %s (gamma must be [K] = [%lld])", op, ShapeStr(c->gamma.shape).c_str(),
                      ShapeStr(c->x.shape).c_str(), (long long)c->K);
  MN_RETURN_IF(g_api->KernelContext_GetOutputCount(ctx, &n_out));
  const size_t weights = n_in - 2, want = swiglu ? 1 : weights;
  if (n_out != want) return MN_INVALID("%s: %zu weights need %zu outputs, got %zu", op, weights, want, n_out);
  if (swiglu && weights != 2) return MN_INVALID("RMSNormSwiGLU: takes x, gamma, w_gate and w_up, got %zu weights", weights);
  c->ws.assign(weights, Tensor());
  c->N.assign(weights, 0);
  for (size_t i = 0; i < weights; ++i) {
    char arg[24];
    std::snprintf(arg, sizeof arg, "w%zu", i);
    MN_RETURN_IF(GetInput(ctx, i + 2, &c->ws[i]));
    MN_RETURN_IF(CheckWeight(op, swiglu ? (i == 0 ? "w_gate" : "w_up") : arg, c->ws[i], c->x, a.trans_b, &c->N[i]));
  }
  if (swiglu && c->N[0] != c->N[1])
    return MN_INVALID("RMSNormSwiGLU: w_gate and w_up must give one output width, got %lld and %lld (shapes %s and %s)",
                      (long long)c->N[0], (long long)c->N[1], ShapeStr(c->ws[0].shape).c_str(), ShapeStr(c->ws[1].shape).c_str());
  c->outs.assign(want, nullptr);
  for (size_t i = 0; i < want; ++i) MN_RETURN_IF(GetOutput(ctx, i, {c->M, c->N[i]}, &c->outs[i]));
  return nullptr;
}

OrtStatus* ReadLinearResidualAttrs(const OrtKernelInfo* info, bool* trans_b) {
  int64_t t = 0;
  MN_RETURN_IF(AttrInt(info, "LinearResidual", "trans_b", &t, nullptr));
  if (t != 0 && t != 1) return MN_INVALID("LinearResidual: attribute trans_b must be 0 or 1, got %lld", (long long)t);
  *trans_b = t == 1;
  return nullptr;
}

OrtStatus* PrepareLinearResidual(OrtKernelContext* ctx, bool trans_b, LinearResidualCall* c) {
  const char* op = "LinearResidual";
  MN_RETURN_IF(GetInput(ctx, 0, &c->x));
  MN_RETURN_IF(GetInput(ctx, 1, &c->w));
  MN_RETURN_IF(GetInput(ctx, 2, &c->residual));
  MN_RETURN_IF(CheckFloatTensor(op, "x", c->x, 2));
  MN_RETURN_IF(CheckWeight(op, "w", c->w, c->x, trans_b, &c->N));
  MN_RETURN_IF(CheckTensor(op, "residual", c->residual, c->x.type, 2));
  c->type = c->x.type;
  c->M = c->x.shape[0];
  c->K = c->x.shape[1];
  if (c->residual.shape[0] != c->M || c->residual.shape[1] != c->N)
    return MN_INVALID("%s: residual has shape %s, the product of x %s and w %s is [%lld, %lld]", op, ShapeStr(c->residual.shape).c_str(),
                      ShapeStr(c->x.shape).c_str(), ShapeStr(c->w.shape).c_str(), (long long)c->M, (long long)c->N);
  return GetOutput(ctx, 0, {c->M, c->N}, &c->y);
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

// x [M, K] -> xn [M, K] float32: x / sqrt(mean(x^2) + eps) * gamma per row (whole-row conversions).
template <class T>
void NormalizeRows(const T* x, const T* gamma, int64_t M, int64_t K, float eps, float* xn) {
  std::vector<float> gbuf(std::is_same<T, float>::value ? 0 : K);
  const float* g = FloatRow(gamma, K, gbuf.data());
  for (int64_t m = 0; m < M; ++m) {
    float* row = xn + m * K;
    ToFloatRow(x + m * K, row, K);
    float ss = 0.0f;
    for (int64_t k = 0; k < K; ++k) ss += row[k] * row[k];
    const float rms = std::sqrt(ss / static_cast<float>(K) + eps);
    for (int64_t k = 0; k < K; ++k) row[k] = row[k] / rms * g[k];
  }
}

// acc[m * width + j] = sum_k xn[m, k] * w(k, n0 + j) for j < width over the rows k in [k0, k1) of the
// weight, which is read once for all M rows. A half weight is converted a row at a time into wbuf (4
// rows: 4 * K floats with trans_b, else kRowsPerPass * width); a float one is read in place (FloatRow).
constexpr int64_t kRowsPerPass = 8;  // [K, N] weight rows per pass over the accumulators
template <class T>
inline __attribute__((always_inline)) void ProductSpan(const float* __restrict__ xn, const T* __restrict__ w, int64_t M, int64_t K,
                                                       int64_t N, bool trans_b, int64_t n0, int64_t width, int64_t k0, int64_t k1,
                                                       float* wbuf, float* __restrict__ acc) {
  if (trans_b) {  // w [N, K]: dot products over the weight's contiguous rows, 4 columns at a time (k0 = 0, k1 = K)
    int64_t j = 0;
    for (; j + 4 <= width; j += 4) {
      const T* wr = w + (n0 + j) * K;
      const float* __restrict__ w0 = FloatRow(wr, K, wbuf);
      const float* __restrict__ w1 = FloatRow(wr + K, K, wbuf + K);
      const float* __restrict__ w2 = FloatRow(wr + 2 * K, K, wbuf + 2 * K);
      const float* __restrict__ w3 = FloatRow(wr + 3 * K, K, wbuf + 3 * K);
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = xn + m * K;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t k = 0; k < K; ++k) {
          const float v = xr[k];
          s0 += v * w0[k];
          s1 += v * w1[k];
          s2 += v * w2[k];
          s3 += v * w3[k];
        }
        float* a = acc + m * width + j;
        a[0] = s0;
        a[1] = s1;
        a[2] = s2;
        a[3] = s3;
      }
    }
    for (; j < width; ++j) {
      const float* __restrict__ wr = FloatRow(w + (n0 + j) * K, K, wbuf);
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = xn + m * K;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < K; ++k) s += xr[k] * wr[k];
        acc[m * width + j] = s;
      }
    }
    return;
  }
  std::memset(acc, 0, sizeof(float) * M * width);  // w [K, N]: axpys of weight row slices, 8 rows per pass
  int64_t k = k0;  // (the accumulators' load and store once per 8 weight rows instead of 4: on the
                   // 2-core VM one thread streamed a decode step's weights a few percent faster)
  for (; k + kRowsPerPass <= k1; k += kRowsPerPass) {
    const T* wr = w + k * N + n0;
    const float* __restrict__ w0 = FloatRow(wr, width, wbuf);
    const float* __restrict__ w1 = FloatRow(wr + N, width, wbuf + width);
    const float* __restrict__ w2 = FloatRow(wr + 2 * N, width, wbuf + 2 * width);
    const float* __restrict__ w3 = FloatRow(wr + 3 * N, width, wbuf + 3 * width);
    const float* __restrict__ w4 = FloatRow(wr + 4 * N, width, wbuf + 4 * width);
    const float* __restrict__ w5 = FloatRow(wr + 5 * N, width, wbuf + 5 * width);
    const float* __restrict__ w6 = FloatRow(wr + 6 * N, width, wbuf + 6 * width);
    const float* __restrict__ w7 = FloatRow(wr + 7 * N, width, wbuf + 7 * width);
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = xn + m * K + k;
      const float x0 = xr[0], x1 = xr[1], x2 = xr[2], x3 = xr[3], x4 = xr[4], x5 = xr[5], x6 = xr[6], x7 = xr[7];
      float* a = acc + m * width;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j)
        a[j] += x0 * w0[j] + x1 * w1[j] + x2 * w2[j] + x3 * w3[j] + x4 * w4[j] + x5 * w5[j] + x6 * w6[j] + x7 * w7[j];
    }
  }
  for (; k < k1; ++k) {
    const float* __restrict__ wr = FloatRow(w + k * N + n0, width, wbuf);
    for (int64_t m = 0; m < M; ++m) {
      const float xv = xn[m * K + k];
      float* a = acc + m * width;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) a[j] += xv * wr[j];
    }
  }
}

template <class T>
void Product(const float* xn, const T* w, int64_t M, int64_t K, int64_t N, bool trans_b, int64_t n0, int64_t width, int64_t k0, int64_t k1,
             float* wbuf, float* acc) {
  ProductSpan(xn, w, M, K, N, trans_b, n0, width, k0, k1, wbuf, acc);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// float32 weights on a CPU with AVX2 + FMA: the same loops for 8 lanes (the baseline build has 4), as SwiGLU does.
__attribute__((target("avx2,fma"))) void ProductAvx2(const float* xn, const float* w, int64_t M, int64_t K, int64_t N, bool trans_b,
                                                     int64_t n0, int64_t width, int64_t k0, int64_t k1, float* acc) {
  ProductSpan(xn, w, M, K, N, trans_b, n0, width, k0, k1, nullptr, acc);
}
template <>
void Product<float>(const float* xn, const float* w, int64_t M, int64_t K, int64_t N, bool trans_b, int64_t n0, int64_t width, int64_t k0,
                    int64_t k1, float*, float* acc) {
  if (HasAvx2Fma())
    ProductAvx2(xn, w, M, K, N, trans_b, n0, width, k0, k1, acc);
  else
    ProductSpan(xn, w, M, K, N, trans_b, n0, width, k0, k1, nullptr, acc);
}
#endif

inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }

// How one weight's product is cut into tasks: `slices` column slices of `width` (the last may be
// narrower) times `blocks` blocks of `rows` weight rows (the last may be shorter). [N, K] weights: 64
// columns (64 contiguous rows of the weight) per task, no row blocks. [K, N] weights: slices up to
// 2048 columns wide (a weight of SmolLM2-135M's layers is one slice, each of its rows read whole),
// and the rows in blocks so that a weight gives at least kTasksPerWeight tasks: each task then streams
// one contiguous stretch of the weight (where 64-column slices would read 256 bytes per 2 KB row, a
// page every few rows), and a layer's 576 x 576 or 1536 x 576 product still keeps both cores busy.
// The split depends on the shape alone, and the blocks' partial sums are added in block order, so
// the results do not depend on the threads.
struct Split {
  int64_t width = 0, slices = 0, rows = 0, blocks = 1;
};
constexpr int64_t kColumnsNK = 64, kColumnsKN = 2048, kTasksPerWeight = 8, kMinRowsPerBlock = 16;

Split SplitOf(int64_t K, int64_t N, bool trans_b) {
  Split s;
  if (N == 0) return s;  // no columns: no tasks
  s.rows = K;
  if (trans_b) {
    s.width = std::min(kColumnsNK, N);
    s.slices = (N + s.width - 1) / s.width;
    return s;
  }
  s.slices = (N + kColumnsKN - 1) / kColumnsKN;
  s.width = std::min(N, ((N + s.slices - 1) / s.slices + 7) / 8 * 8);  // equal slices, 8-column aligned
  s.slices = (N + s.width - 1) / s.width;
  const int64_t want = std::max<int64_t>(1, std::min((kTasksPerWeight + s.slices - 1) / s.slices, K / kMinRowsPerBlock));
  if (want > 1) {
    s.rows = ((K + want - 1) / want + kRowsPerPass - 1) / kRowsPerPass * kRowsPerPass;  // whole passes of ProductSpan
    s.blocks = (K + s.rows - 1) / s.rows;
  }
  return s;
}

// The float32 rows xn [M, K] times every weight ws[i] ([N_i, K] or [K, N_i]), each cut as SplitOf
// says, over ORT's thread pool. Weights form groups whose slices are finished together: each weight
// alone, or (paired: RMSNormSwiGLU) weights 0 and 1, which then have one shape. The task that
// completes a slice of a group (the last of its blocks to finish, found with a counter) adds the
// blocks' partial sums in block order and calls store(group, n0, width, sums, scratch): sums[i] the
// products [M, width] of the group's weight i, scratch 2 * width floats.
template <class T, class Store>
OrtStatus* ProjectRows(const Pool& ctx, const float* xn, int64_t M, int64_t K, bool trans_b, const std::vector<const T*>& ws,
                       const std::vector<int64_t>& N, bool paired, Store&& store) {
  const size_t n_w = ws.size(), per_group = paired ? 2 : 1;
  std::vector<Split> split(n_w);
  std::vector<int64_t> base(n_w + 1, 0), first_slice(n_w + 1, 0);  // partials' offset, groups' first counter
  struct Task {
    size_t w;
    int64_t slice, block;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < n_w; ++i) {
    split[i] = SplitOf(K, N[i], trans_b);
    const Split& s = split[i];
    base[i + 1] = base[i] + s.slices * s.blocks * M * s.width;
    first_slice[i + 1] = first_slice[i] + (i % per_group == 0 ? s.slices : 0);
    for (int64_t b = 0; b < s.blocks; ++b)  // block-major: a weight's blocks spread over the threads
      for (int64_t sl = 0; sl < s.slices; ++sl) tasks.push_back({i, sl, b});
  }
  std::vector<float> partial(base[n_w]);
  std::unique_ptr<std::atomic<int64_t>[]> pending(new std::atomic<int64_t>[first_slice[n_w]]);
  for (size_t i = 0; i < n_w; i += per_group)
    for (int64_t sl = 0; sl < split[i].slices; ++sl) pending[first_slice[i] + sl].store(split[i].blocks * static_cast<int64_t>(per_group));
  auto sums = [&](size_t i, int64_t sl, int64_t b) { return partial.data() + base[i] + (sl * split[i].blocks + b) * M * split[i].width; };
  return ParallelFor(ctx, tasks.size(), [&](size_t t) {
    const Task& task = tasks[t];
    const Split& s = split[task.w];
    const int64_t n0 = task.slice * s.width, width = std::min(s.width, N[task.w] - n0);
    const int64_t k0 = task.block * s.rows, k1 = std::min(K, k0 + s.rows);
    std::vector<float> wbuf(std::is_same<T, float>::value ? 0 : (trans_b ? 4 * K : kRowsPerPass * width));
    Product(xn, ws[task.w], M, K, N[task.w], trans_b, n0, width, k0, k1, wbuf.data(), sums(task.w, task.slice, task.block));
    const size_t group = task.w - task.w % per_group;
    if (pending[first_slice[group] + task.slice].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    const float* done[2] = {nullptr, nullptr};
    for (size_t j = 0; j < per_group; ++j) {
      float* total = sums(group + j, task.slice, 0);
      for (int64_t b = 1; b < s.blocks; ++b) {  // in block order, whichever thread got here
        const float* p = sums(group + j, task.slice, b);
        for (int64_t e = 0; e < M * width; ++e) total[e] += p[e];
      }
      done[j] = total;
    }
    std::vector<float> scratch(2 * width);
    store(group, n0, width, done, scratch.data());
  });
}

// RMSNormLinear / RMSNormSwiGLU of a prepared call: the rows normalised once into float32, then the
// split products (SwiGLU: w_gate and w_up paired, silu(gate) * up when both sums of a slice are in).
template <class T>
OrtStatus* RunNormLinear(const Pool& ctx, const NormLinearAttrs& a, bool swiglu, const NormLinearCall& c) {
  std::vector<float> xn(c.M * c.K);
  NormalizeRows(static_cast<const T*>(c.x.data), static_cast<const T*>(c.gamma.data), c.M, c.K, a.epsilon, xn.data());
  std::vector<const T*> ws;
  for (const Tensor& t : c.ws) ws.push_back(static_cast<const T*>(t.data));
  return ProjectRows<T>(ctx, xn.data(), c.M, c.K, a.trans_b, ws, c.N, swiglu,
                        [&](size_t i, int64_t n0, int64_t width, const float* const* s, float* row) {
                          for (int64_t m = 0; m < c.M; ++m) {
                            T* y = static_cast<T*>(c.outs[i]) + m * c.N[i] + n0;
                            float* out = OutRow(y, row);
                            const float* g = s[0] + m * width;
                            if (swiglu)
                              for (int64_t j = 0; j < width; ++j) out[j] = Silu(g[j]) * s[1][m * width + j];
                            else
                              std::memcpy(out, g, sizeof(float) * width);
                            StoreRow(out, y, width);
                          }
                        });
}

// y = residual + x @ w^T (or @ w): x's rows as float32, then the same split product, the residual
// added in float32 before the one rounding to T.
template <class T>
OrtStatus* RunLinearResidual(const Pool& ctx, bool trans_b, const LinearResidualCall& c) {
  std::vector<float> xf(c.M * c.K);  // K = 0: no rows to read (x's data may be null), the product is zeros
  for (int64_t m = 0; c.K > 0 && m < c.M; ++m) ToFloatRow(static_cast<const T*>(c.x.data) + m * c.K, xf.data() + m * c.K, c.K);
  const T* residual = static_cast<const T*>(c.residual.data);
  return ProjectRows<T>(ctx, xf.data(), c.M, c.K, trans_b, {static_cast<const T*>(c.w.data)}, {c.N}, false,
                        [&](size_t, int64_t n0, int64_t width, const float* const* s, float* row) {
                          for (int64_t m = 0; m < c.M; ++m) {
                            T* y = static_cast<T*>(c.y) + m * c.N + n0;
                            const float* r = FloatRow(residual + m * c.N + n0, width, row + width);
                            float* out = OutRow(y, row);
                            for (int64_t j = 0; j < width; ++j) out[j] = r[j] + s[0][m * width + j];
                            StoreRow(out, y, width);
                          }
                        });
}

class NormLinearCpu : public Kernel {
 public:
  NormLinearCpu(const NormLinearAttrs& a, bool swiglu) : a_(a), swiglu_(swiglu) {}
  static OrtStatus* CreateLinear(const OrtKernelInfo* info, Kernel** out) { return Create(info, false, out); }
  static OrtStatus* CreateSwiGLU(const OrtKernelInfo* info, Kernel** out) { return Create(info, true, out); }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    NormLinearCall c;
    MN_RETURN_IF(PrepareNormLinear(ctx, a_, swiglu_, &c));
    return NormLinearCpuRun(ctx, a_, swiglu_, c);
  }

 private:
  static OrtStatus* Create(const OrtKernelInfo* info, bool swiglu, Kernel** out) {
    NormLinearAttrs a;
    MN_RETURN_IF(ReadNormLinearAttrs(info, swiglu, &a));
    *out = new NormLinearCpu(a, swiglu);
    return nullptr;
  }

  NormLinearAttrs a_;
  bool swiglu_;
};

class LinearResidualCpu : public Kernel {
 public:
  explicit LinearResidualCpu(bool trans_b) : trans_b_(trans_b) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    bool trans_b = false;
    MN_RETURN_IF(ReadLinearResidualAttrs(info, &trans_b));
    *out = new LinearResidualCpu(trans_b);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    LinearResidualCall c;
    MN_RETURN_IF(PrepareLinearResidual(ctx, trans_b_, &c));
    return LinearResidualCpuRun(ctx, trans_b_, c);
  }

 private:
  bool trans_b_;
};

// The factories under the names the registration rows use (tests/test_custom_op_schema.py parses them).
struct RMSNormSwiGLUCpu {
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return NormLinearCpu::CreateSwiGLU(info, out); }
};

}  // namespace

OrtStatus* NormLinearCpuRun(const Pool& ctx, const NormLinearAttrs& a, bool swiglu, const NormLinearCall& c) {
  if (c.M == 0) return nullptr;
  return DispatchFloat(c.type, [&](auto tag) { return RunNormLinear<decltype(tag)>(ctx, a, swiglu, c); });
}

OrtStatus* LinearResidualCpuRun(const Pool& ctx, bool trans_b, const LinearResidualCall& c) {
  if (c.M == 0) return nullptr;
  return DispatchFloat(c.type, [&](auto tag) { return RunLinearResidual<decltype(tag)>(ctx, trans_b, c); });
}

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
    ops->push_back(new OpDef("LinearResidual", ep, {T, T, T}, {T}, {false, false, false}, {false, false, false}, LinearResidualCpu::Create, 2));
  }
}

}  // namespace mn
