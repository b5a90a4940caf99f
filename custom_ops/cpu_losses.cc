// CPU kernels of com.meganeura.SparseCrossEntropy / SparseCrossEntropyGrad (losses_ops.h), and the
// kernel class, checks and registration the CUDA glue shares. Rows are split over ORT's thread pool; each row is read twice by the
// forward (max, then the sum of exp(x - max)) and once by the backward (softmax from the forward's
// log-sum-exp, minus the label's one-hot, times the scale). ExpNeg (cpu_math.h) keeps the loops
// vectorisable; labels are validated on the host before anything is read.
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_elements.h"
#include "cpu_math.h"
#include "cpu_parallel.h"
#include "losses_ops.h"

namespace mn {

OrtStatus* ReadIgnoreIndex(const OrtKernelInfo* info, bool grad, int64_t* ignore) {
  if (grad)
    MN_RETURN_IF(AttrInt(info, "SparseCrossEntropyGrad", "ignore_index", ignore, nullptr));
  else
    MN_RETURN_IF(AttrInt(info, "SparseCrossEntropy", "ignore_index", ignore, nullptr));
  if (*ignore < -1 || *ignore > int64_t(0xffffffffLL))
    return MN_INVALID("%s: attribute ignore_index must be -1 (none) or a label in [0, 2^32 - 1], got %lld",
                      grad ? "SparseCrossEntropyGrad" : "SparseCrossEntropy", (long long)*ignore);
  return nullptr;
}

OrtStatus* CheckLabels(const char* op, const Tensor& labels, const CrossEntropyProblem& p) {
  for (int64_t r = 0; r < p.R; ++r) {
    const int64_t lab = IndexAt(labels, r);
    if (lab != p.ignore && (lab < 0 || lab >= p.C))
      return MN_INVALID("%s: labels[%lld] = %lld is out of range [0, %lld) (and not ignore_index %lld)", op, (long long)r,
                        (long long)lab, (long long)p.C, (long long)p.ignore);
  }
  return nullptr;
}

namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
// Loss terms, log-sum-exp and scale are float32 whatever T is (FP32: not one of the loop's types).
constexpr auto FP32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr int64_t kRowsPerTask = 8;

// Reads and checks the inputs (2 for the forward, 4 for the gradient): types and shapes only.
OrtStatus* CheckInputs(OrtKernelContext* ctx, const char* op, bool grad, int64_t ignore, CrossEntropyProblem* p,
                       std::vector<Tensor>* in) {
  in->resize(grad ? 4 : 2);
  for (size_t i = 0; i < in->size(); ++i) MN_RETURN_IF(GetInput(ctx, i, &(*in)[i]));
  const Tensor &logits = (*in)[0], &labels = (*in)[1];
  MN_RETURN_IF(CheckFloatTensor(op, "logits", logits, 2));
  if (!labels.present) return MN_INVALID("%s: input 'labels' is missing", op);
  MN_RETURN_IF(CheckIndexType(op, "labels", labels));
  *p = {logits.shape[0], logits.shape[1], ignore, logits.type};
  if (labels.shape != std::vector<int64_t>{p->R})
    return MN_INVALID("%s: labels must be [%lld] (one per row of logits %s), got %s", op, (long long)p->R,
                      ShapeStr(logits.shape).c_str(), ShapeStr(labels.shape).c_str());
  if (p->C == 0 && p->R > 0) return MN_INVALID("%s: logits %s have no classes", op, ShapeStr(logits.shape).c_str());
  if (!grad) return nullptr;
  MN_RETURN_IF(CheckTensor(op, "lse", (*in)[2], ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, 1));
  if ((*in)[2].shape[0] != p->R)
    return MN_INVALID("%s: lse must be [%lld] (one per row of logits), got %s", op, (long long)p->R, ShapeStr((*in)[2].shape).c_str());
  const Tensor& scale = (*in)[3];
  if (!scale.present || scale.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || scale.shape.size() > 1 || scale.numel() != 1)
    return MN_INVALID("%s: scale must be a [1] float32 tensor, got shape %s", op, ShapeStr(scale.shape).c_str());
  return nullptr;
}

// The float32 rows also get an AVX2 + FMA copy that the loader picks on CPUs that have it (GCC
// function multi-versioning, as cpu_flash.cc): 8 lanes instead of the x86-64-v2 baseline's 4.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MN_LOSS_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MN_LOSS_CLONES
#endif

template <class T>
float RowLogSumExp(const T* __restrict__ x, int64_t C) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < C; ++c) mx = std::max(mx, ToFloat(x[c]));
  if (!std::isfinite(mx)) return mx;  // an infinite (or NaN) logit: the row's result is that value
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += ExpNeg(ToFloat(x[c]) - mx);
  return mx + std::log(s);
}

template <class T>
void GradRow(const T* __restrict__ x, T* __restrict__ out, int64_t C, float lse, float scale, int64_t label) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) out[c] = FromFloat<T>(ExpNeg(ToFloat(x[c]) - lse) * scale);
  out[label] = FromFloat<T>((ExpNeg(ToFloat(x[label]) - lse) - 1.f) * scale);
}

MN_LOSS_CLONES float RowLogSumExp(const float* __restrict__ x, int64_t C) { return RowLogSumExp<float>(x, C); }
MN_LOSS_CLONES void GradRow(const float* __restrict__ x, float* __restrict__ out, int64_t C, float lse, float scale, int64_t label) {
  GradRow<float>(x, out, C, lse, scale, label);
}

OrtStatus* ForwardCpu(OrtKernelContext* ctx, const CrossEntropyRun& run) {
  const CrossEntropyProblem& p = run.p;
  const Tensor& labels = run.in[1];
  MN_RETURN_IF(CheckLabels(run.op, labels, p));
  return DispatchFloat(p.type, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(run.in[0].data);
    return ParallelFor(ctx, size_t((p.R + kRowsPerTask - 1) / kRowsPerTask), [&](size_t task) {
      for (int64_t r = int64_t(task) * kRowsPerTask; r < std::min(p.R, int64_t(task + 1) * kRowsPerTask); ++r) {
        const T* row = x + r * p.C;
        const int64_t lab = IndexAt(labels, r);
        run.lse[r] = RowLogSumExp(row, p.C);
        run.loss[r] = lab == p.ignore ? 0.f : run.lse[r] - ToFloat(row[lab]);
      }
    });
  });
}

OrtStatus* GradCpu(OrtKernelContext* ctx, const CrossEntropyRun& run) {
  const CrossEntropyProblem& p = run.p;
  const Tensor& labels = run.in[1];
  MN_RETURN_IF(CheckLabels(run.op, labels, p));
  const float* lse = run.in[2].f32();
  const float scale = run.in[3].f32()[0];
  return DispatchFloat(p.type, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(run.in[0].data);
    T* dx = static_cast<T*>(run.dlogits);
    return ParallelFor(ctx, size_t((p.R + kRowsPerTask - 1) / kRowsPerTask), [&](size_t task) {
      for (int64_t r = int64_t(task) * kRowsPerTask; r < std::min(p.R, int64_t(task + 1) * kRowsPerTask); ++r) {
        const int64_t lab = IndexAt(labels, r);
        if (lab == p.ignore)
          std::memset(dx + r * p.C, 0, sizeof(T) * p.C);  // +0 in every float type
        else
          GradRow(x + r * p.C, dx + r * p.C, p.C, lse[r], scale, lab);
      }
    });
  });
}

// SparseCrossEntropy's outputs loss_rows and lse: float32 [R], R the rows of the logits (a symbolic R
// keeps its name), not the logits' shape.
OrtStatus* ORT_API_CALL InferRowShapes(const OrtCustomOp*, OrtShapeInferContext* ctx) {
  OrtTensorTypeAndShapeInfo* logits = nullptr;  // belongs to the context
  OrtStatus* st = g_api->ShapeInferContext_GetInputTypeShape(ctx, 0, &logits);
  if (st) {  // unknown input shape: leave the outputs unknown
    g_api->ReleaseStatus(st);
    return nullptr;
  }
  size_t rank = 0;
  MN_RETURN_IF(g_api->GetDimensionsCount(logits, &rank));
  if (rank != 2) return nullptr;  // the kernel reports the rank when it runs
  int64_t dims[2];
  const char* names[2] = {nullptr, nullptr};
  MN_RETURN_IF(g_api->GetDimensions(logits, dims, 2));
  MN_RETURN_IF(g_api->GetSymbolicDimensions(logits, names, 2));
  if (dims[0] < 0 && (names[0] == nullptr || names[0][0] == '\0')) return nullptr;  // an unnamed dim: see AllDimsNamed
  OrtTensorTypeAndShapeInfo* out = nullptr;
  MN_RETURN_IF(g_api->CreateTensorTypeAndShapeInfo(&out));
  const char* sym[1] = {names[0] ? names[0] : ""};
  st = g_api->SetTensorElementType(out, F32);
  if (!st) st = g_api->SetDimensions(out, dims, 1);
  if (!st) st = g_api->SetSymbolicDimensions(out, sym, 1);
  if (!st) st = g_api->ShapeInferContext_SetOutputTypeShape(ctx, 0, out);
  if (!st) st = g_api->ShapeInferContext_SetOutputTypeShape(ctx, 1, out);
  g_api->ReleaseTensorTypeAndShapeInfo(out);
  return st;
}

}  // namespace

OrtStatus* CrossEntropyKernel::Compute(OrtKernelContext* ctx) {
  CrossEntropyRun run;
  run.op = grad_ ? "SparseCrossEntropyGrad" : "SparseCrossEntropy";
  MN_RETURN_IF(CheckInputs(ctx, run.op, grad_, ignore_, &run.p, &run.in));
  if (grad_) {
    MN_RETURN_IF(GetOutput(ctx, 0, run.in[0].shape, &run.dlogits));
  } else {
    MN_RETURN_IF(GetOutput(ctx, 0, {run.p.R}, &run.loss));
    MN_RETURN_IF(GetOutput(ctx, 1, {run.p.R}, &run.lse));
  }
  return compute_(ctx, run);
}

void AddCrossEntropyOps(std::vector<OpDef*>* ops, const char* ep, KernelFactory forward, KernelFactory grad) {
  for (const auto T : {F32, F16, BF16}) {
    ops->push_back(new OpDef("SparseCrossEntropy", ep, {T, ANY}, {FP32, FP32}, {false, false}, {false, false}, forward, 0));
    ops->back()->InferOutputShapeFn = InferRowShapes;
    ops->push_back(new OpDef("SparseCrossEntropyGrad", ep, {T, ANY, FP32, FP32}, {T}, {false, false, false, false},
                             {false, false, false, false}, grad, 0));
  }
}

void AddCpuLossOps(std::vector<OpDef*>* ops) {
  AddCrossEntropyOps(ops, "CPUExecutionProvider", CreateCrossEntropyKernel<false, ForwardCpu>, CreateCrossEntropyKernel<true, GradCpu>);
}

}  // namespace mn
