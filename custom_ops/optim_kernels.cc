// com.meganeura.AdamUpdate on the CPU: the Adam/AdamW update of every parameter in one kernel.
//
// Inputs: lr, beta1, beta2, eps, step, weight_decay ([1] F32 each), then per parameter k
// p_k, g_k, m_k, v_k (variadic, F32, one shape per k). Outputs: p_k', m_k', v_k' per k (variadic).
// The arithmetic follows the op's ONNX function body (meganeura_onnx/ops/optim.py) operation by
// operation, in float32, so both give the same numbers up to the scalar exp/log of the bias correction:
//   m' = m*b1 + g*(1-b1);  v' = v*b2 + (g*g)*(1-b2)
//   p' = p*(1 - lr*wd) - (m' / (sqrt(v')*(1/sqrt(bc2)) + eps)) * (lr/bc1),  bc = 1 - b^step
// One pass over the four tensors of each parameter, split into chunks over ORT's thread pool.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_math.h"
#include "op_common.h"

namespace mn {
namespace {

constexpr const char* kOp = "AdamUpdate";
constexpr size_t kHyper = kAdamHyper;
const char* const kHyperNames[kHyper] = {"lr", "beta1", "beta2", "eps", "step", "weight_decay"};
const char* const kTensorNames[4] = {"p", "g", "m", "v"};
constexpr int64_t kChunk = 1 << 14;  // elements per task: big enough to amortise the task, small enough to balance

struct Scalars {
  float b1, b2, eps, omb1, omb2, step_size, inv_sqrt_bc2, decay;
};

OrtStatus* ReadScalars(OrtKernelContext* ctx, Scalars* s) {
  float h[kHyper];
  for (size_t i = 0; i < kHyper; ++i) {
    Tensor t;
    MN_RETURN_IF(GetInput(ctx, i, &t));
    if (!t.present || t.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || t.numel() != 1)
      return MN_INVALID("%s: input '%s' must be a [1] float tensor, got shape %s", kOp, kHyperNames[i], ShapeStr(t.shape).c_str());
    h[i] = t.f32()[0];
  }
  const float lr = h[0], b1 = h[1], b2 = h[2], eps = h[3], step = h[4], wd = h[5];
  if (!(b1 >= 0.f && b1 < 1.f && b2 >= 0.f && b2 < 1.f))
    return MN_INVALID("%s: beta1 and beta2 must be in [0, 1), got %g and %g", kOp, b1, b2);
  if (!(step >= 1.f)) return MN_INVALID("%s: step must be >= 1 (it counts updates from 1), got %g", kOp, step);
  const float bc1 = 1.f - std::exp(step * std::log(b1));
  const float bc2 = 1.f - std::exp(step * std::log(b2));
  *s = {b1, b2, eps, 1.f - b1, 1.f - b2, lr / bc1, 1.f / std::sqrt(bc2), 1.f - lr * wd};
  return nullptr;
}

struct Param {
  const float *p, *g, *m, *v;
  float *p2, *m2, *v2;
  int64_t n;
};

// Vectorises (sqrtps/divps) because the library builds with -fno-math-errno: a sqrt that may set
// errno is a branch in the loop. IEEE sqrt and division stay exact: results do not change.
// The loop is bound by the sqrt and the division: AVX2's 8 lanes take it from ~140 to ~55 us for
// the MNIST MLP's 101,770 parameters on one core (MN_AVX2_CLONES; same bits).
MN_AVX2_CLONES void Update(const Scalars& s, const Param& t, int64_t i0, int64_t i1) {
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) {
    const float g = t.g[i];
    const float m = t.m[i] * s.b1 + g * s.omb1;
    const float v = t.v[i] * s.b2 + (g * g) * s.omb2;
    const float denom = std::sqrt(v) * s.inv_sqrt_bc2 + s.eps;
    t.p2[i] = t.p[i] * s.decay - (m / denom) * s.step_size;
    t.m2[i] = m;
    t.v2[i] = v;
  }
}

class AdamUpdateCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new AdamUpdateCpu();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    size_t n = 0;
    MN_RETURN_IF(AdamUpdateArity(ctx, &n));
    Scalars s;
    MN_RETURN_IF(ReadScalars(ctx, &s));
    std::vector<Param> params(n);
    std::vector<std::pair<size_t, int64_t>> tasks;  // (parameter, first element)
    for (size_t k = 0; k < n; ++k) {
      Tensor t[4];
      for (size_t j = 0; j < 4; ++j) {
        MN_RETURN_IF(GetInput(ctx, kHyper + 4 * k + j, &t[j]));
        if (t[j].type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
          return MN_INVALID("%s: input '%s%zu' must be float", kOp, kTensorNames[j], k);
        if (t[j].shape != t[0].shape)
          return MN_INVALID("%s: input '%s%zu' has shape %s, but p%zu has %s", kOp, kTensorNames[j], k,
                            ShapeStr(t[j].shape).c_str(), k, ShapeStr(t[0].shape).c_str());
      }
      Param& q = params[k];
      q = {t[0].f32(), t[1].f32(), t[2].f32(), t[3].f32(), nullptr, nullptr, nullptr, t[0].numel()};
      MN_RETURN_IF(GetOutput(ctx, 3 * k, t[0].shape, &q.p2));
      MN_RETURN_IF(GetOutput(ctx, 3 * k + 1, t[0].shape, &q.m2));
      MN_RETURN_IF(GetOutput(ctx, 3 * k + 2, t[0].shape, &q.v2));
      for (int64_t i = 0; i < q.n; i += kChunk) tasks.emplace_back(k, i);
    }
    if (tasks.size() == 1) {  // one small task: no thread-pool round trip
      Update(s, params[0], 0, params[0].n);
      return nullptr;
    }
    auto run = [&](size_t c) {
      const Param& q = params[tasks[c].first];
      const int64_t i0 = tasks[c].second;
      Update(s, q, i0, std::min(q.n, i0 + kChunk));
    };
    using Fn = decltype(run);
    auto tramp = [](void* f, size_t i) { (*static_cast<Fn*>(f))(i); };
    return g_api->KernelContext_ParallelFor(ctx, tramp, tasks.size(), 0, &run);
  }
};

// Output 3k+j has the shape of input 6 + 4k + {0, 2, 3}[j] (p, m, v of parameter k).
OrtStatus* ORT_API_CALL InferAdamShapes(const OrtCustomOp*, OrtShapeInferContext* ctx) {
  size_t n_in = 0;
  MN_RETURN_IF(g_api->ShapeInferContext_GetInputCount(ctx, &n_in));
  if (n_in <= kHyper) return nullptr;
  const size_t n = (n_in - kHyper) / 4;
  const size_t from[3] = {0, 2, 3};
  for (size_t k = 0; k < n; ++k) {
    for (size_t j = 0; j < 3; ++j) {
      OrtTensorTypeAndShapeInfo* info = nullptr;
      OrtStatus* st = g_api->ShapeInferContext_GetInputTypeShape(ctx, kHyper + 4 * k + from[j], &info);
      if (st) {  // unknown input shape: leave the output unknown
        g_api->ReleaseStatus(st);
        continue;
      }
      MN_RETURN_IF(g_api->ShapeInferContext_SetOutputTypeShape(ctx, 3 * k + j, info));
    }
  }
  return nullptr;
}

constexpr ONNXTensorElementDataType F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

}  // namespace

OpDef* NewAdamUpdateOpDef(const char* ep, KernelFactory factory) {
  // Six [1] hyper-parameters, then the variadic (p, g, m, v) tensors; every input in the EP's memory.
  std::vector<ONNXTensorElementDataType> in(kHyper + 1, F32);
  OpDef* adam = new OpDef(kOp, ep, in, {F32}, std::vector<bool>(kHyper + 1, false), std::vector<bool>(kHyper + 1, false),
                          factory, 0);
  adam->GetInputCharacteristic = [](const OrtCustomOp*, size_t i) {
    return i < kHyper ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_VARIADIC;
  };
  adam->GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_VARIADIC; };
  adam->GetVariadicInputMinArity = [](const OrtCustomOp*) { return 4; };
  adam->GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 3; };
  adam->InferOutputShapeFn = InferAdamShapes;
  return adam;
}

void AddCpuOptimOps(std::vector<OpDef*>* ops) { ops->push_back(NewAdamUpdateOpDef("CPUExecutionProvider", AdamUpdateCpu::Create)); }

}  // namespace mn
