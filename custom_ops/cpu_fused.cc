// CPU kernels of the fused decode-layer ops (meganeura_onnx/ops/fused.py declares them):
//   SwiGLU          out = gate * sigmoid(gate) * up, one pass instead of ORT's QuickGelu + Mul;
//   SwiGLUPacked    SwiGLU on a merged gate|up product x [.., 2F]: both halves read in place (no Split);
//   SwiGLUGrad      SwiGLU's backward: dgate = dy * up * silu'(gate) and dup = dy * silu(gate) in one pass
//                   (decomposed: about ten elementwise nodes, each a pass over the tensors);
//   RMSNormGrad     RMSNorm's dx per row, 1/rms recomputed in float32, and the weight's gradient
//                   (a float32 sum over the rows): one pass over x and dy;
//   RopeCacheWrite  rotate the new key rows and write them into the KV cache in place, one pass
//                   instead of Rope + CacheWrite (the rotated rows never go through memory);
//   AddRMSNorm      a residual add and the RMSNorm after it in one pass over the rows (a prefill's
//                   Gemm then needs no C input, which ORT's CUDA Gemm copies into its output first).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_elements.h"
#include "cpu_math.h"
#include "cpu_parallel.h"
#include "fused_ops.h"

namespace mn {

OrtStatus* CheckSwiGLU(const Tensor& gate, const Tensor& up) {
  if (!IsFloatType(gate.type) || up.type != gate.type)
    return MN_INVALID("SwiGLU: gate and up must be float, float16 or bfloat16 of one element type, got element types %d and %d",
                      (int)gate.type, (int)up.type);
  if (gate.shape != up.shape)
    return MN_INVALID("SwiGLU: gate and up must have one shape, got %s and %s", ShapeStr(gate.shape).c_str(),
                      ShapeStr(up.shape).c_str());
  return nullptr;
}

OrtStatus* CheckSwiGLUPacked(const Tensor& x) {
  if (!IsFloatType(x.type))
    return MN_INVALID("SwiGLUPacked: x must be float, float16 or bfloat16, got element type %d", (int)x.type);
  if (x.shape.empty()) return MN_INVALID("SwiGLUPacked: x must have rank >= 1 (gate|up along the last dimension), got a scalar []");
  if (x.shape.back() % 2 != 0)
    return MN_INVALID("SwiGLUPacked: x must have an even last dimension (gate|up, 2F), got %lld (shape %s)", (long long)x.shape.back(),
                      ShapeStr(x.shape).c_str());
  return nullptr;
}

OrtStatus* CheckSwiGLUGrad(const Tensor& gate, const Tensor& up, const Tensor& dy) {
  if (!IsFloatType(gate.type) || up.type != gate.type || dy.type != gate.type)
    return MN_INVALID("SwiGLUGrad: gate, up and dy must be float, float16 or bfloat16 of one element type, got element types %d, %d and %d",
                      (int)gate.type, (int)up.type, (int)dy.type);
  if (gate.shape != up.shape || gate.shape != dy.shape)
    return MN_INVALID("SwiGLUGrad: gate, up and dy must have one shape, got %s, %s and %s", ShapeStr(gate.shape).c_str(),
                      ShapeStr(up.shape).c_str(), ShapeStr(dy.shape).c_str());
  return nullptr;
}

OrtStatus* ReadRMSNormGradAttrs(const OrtKernelInfo* info, float* epsilon) {
  MN_RETURN_IF(AttrFloat(info, "RMSNormGrad", "epsilon", epsilon, nullptr));
  if (!(*epsilon > 0.0f) || !std::isfinite(*epsilon))
    return MN_INVALID("RMSNormGrad: attribute epsilon must be a positive finite number, got %g", (double)*epsilon);
  return nullptr;
}

OrtStatus* CheckRMSNormGrad(const Tensor& x, const Tensor& weight, const Tensor& dy) {
  MN_RETURN_IF(CheckFloatTensor("RMSNormGrad", "x", x, 2));
  MN_RETURN_IF(CheckTensor("RMSNormGrad", "weight", weight, x.type, 1));
  MN_RETURN_IF(CheckTensor("RMSNormGrad", "dy", dy, x.type, 2));
  if (weight.shape[0] != x.shape[1])
    return MN_INVALID("RMSNormGrad: weight must have shape [%lld] for x %s, got %s", (long long)x.shape[1], ShapeStr(x.shape).c_str(),
                      ShapeStr(weight.shape).c_str());
  if (dy.shape != x.shape)
    return MN_INVALID("RMSNormGrad: dy must have the shape of x %s, got %s", ShapeStr(x.shape).c_str(), ShapeStr(dy.shape).c_str());
  return nullptr;
}

OrtStatus* ReadAddRMSNormAttrs(const OrtKernelInfo* info, float* epsilon) {
  MN_RETURN_IF(AttrFloat(info, "AddRMSNorm", "epsilon", epsilon, nullptr));
  if (!(*epsilon > 0.0f) || !std::isfinite(*epsilon))
    return MN_INVALID("AddRMSNorm: attribute epsilon must be a positive finite number, got %g", (double)*epsilon);
  return nullptr;
}

OrtStatus* CheckAddRMSNorm(const Tensor& x, const Tensor& residual, const Tensor& weight) {
  MN_RETURN_IF(CheckFloatTensor("AddRMSNorm", "x", x, 2));
  MN_RETURN_IF(CheckTensor("AddRMSNorm", "residual", residual, x.type, 2));
  MN_RETURN_IF(CheckTensor("AddRMSNorm", "weight", weight, x.type, 1));
  if (residual.shape != x.shape)
    return MN_INVALID("AddRMSNorm: residual must have the shape of x %s, got %s", ShapeStr(x.shape).c_str(),
                      ShapeStr(residual.shape).c_str());
  if (weight.shape[0] != x.shape[1])
    return MN_INVALID("AddRMSNorm: weight must have shape [%lld] for x %s, got %s", (long long)x.shape[1], ShapeStr(x.shape).c_str(),
                      ShapeStr(weight.shape).c_str());
  return nullptr;
}

OrtStatus* AddRMSNormArgs(OrtKernelContext* ctx, Tensor* x, Tensor* residual, Tensor* weight, void** y, void** sum) {
  MN_RETURN_IF(GetInput(ctx, 0, x));
  MN_RETURN_IF(GetInput(ctx, 1, residual));
  MN_RETURN_IF(GetInput(ctx, 2, weight));
  MN_RETURN_IF(CheckAddRMSNorm(*x, *residual, *weight));
  MN_RETURN_IF(GetOutput(ctx, 0, x->shape, y));
  return GetOutput(ctx, 1, x->shape, sum);
}

OrtStatus* ReadRopeCacheWriteAttrs(const OrtKernelInfo* info, RopeCacheWriteAttrs* a) {
  MN_RETURN_IF(AttrFloat(info, "RopeCacheWrite", "theta", &a->theta, nullptr));
  MN_RETURN_IF(AttrInt(info, "RopeCacheWrite", "head_dim", &a->head_dim, nullptr));
  const int64_t one = 1;
  MN_RETURN_IF(AttrInt(info, "RopeCacheWrite", "check_positions", &a->check_positions, &one));
  MN_RETURN_IF(CheckPositionsFlag("RopeCacheWrite", a->check_positions));
  if (a->head_dim <= 0 || a->head_dim % 2 != 0 || a->head_dim > 1024)
    return MN_INVALID("RopeCacheWrite: attribute head_dim must be even and in [2, 1024], got %lld", (long long)a->head_dim);
  if (!(a->theta > 0.0f) || !std::isfinite(a->theta))
    return MN_INVALID("RopeCacheWrite: attribute theta must be a positive finite number, got %g", (double)a->theta);
  return nullptr;
}

OrtStatus* CheckRopeCacheWrite(const RopeCacheWriteAttrs& a, const Tensor& nw, const Tensor& cache, const Tensor& kv_pos,
                               RopeCacheWriteProblem* p, bool host_positions) {
  MN_RETURN_IF(CheckFloatTensor("RopeCacheWrite", "new_kv", nw, 2));
  MN_RETURN_IF(CheckTensor("RopeCacheWrite", "cache", cache, nw.type, 2));
  p->type = nw.type;
  p->kv_pos = -1;
  if (host_positions)
    MN_RETURN_IF(ReadScalarIndex("RopeCacheWrite", "kv_pos", kv_pos, &p->kv_pos));
  else
    MN_RETURN_IF(CheckScalarIndex("RopeCacheWrite", "kv_pos", kv_pos));
  p->T = nw.shape[0];
  p->dim = nw.shape[1];
  p->max_seq = cache.shape[0];
  if (cache.shape[1] != p->dim)
    return MN_INVALID("RopeCacheWrite: new_kv has shape %s but cache has shape %s (row widths differ)", ShapeStr(nw.shape).c_str(),
                      ShapeStr(cache.shape).c_str());
  if (p->dim % a.head_dim != 0)
    return MN_INVALID("RopeCacheWrite: new_kv has %lld features, not a multiple of head_dim %lld (shape %s)", (long long)p->dim,
                      (long long)a.head_dim, ShapeStr(nw.shape).c_str());
  if (p->T > p->max_seq)  // never kv_pos + T > max_seq below: kv_pos may be near 2^63
    return MN_INVALID("RopeCacheWrite: new_kv has %lld rows, more than the cache length max_seq %lld", (long long)p->T,
                      (long long)p->max_seq);
  if (host_positions && (p->kv_pos < 0 || p->kv_pos > p->max_seq - p->T))
    return MN_INVALID("RopeCacheWrite: kv_pos %lld + T %lld exceeds the cache length max_seq %lld", (long long)p->kv_pos,
                      (long long)p->T, (long long)p->max_seq);
  return nullptr;
}

OrtStatus* SwiGLUArgs(OrtKernelContext* ctx, Tensor* gate, Tensor* up, void** out) {
  MN_RETURN_IF(GetInput(ctx, 0, gate));
  MN_RETURN_IF(GetInput(ctx, 1, up));
  MN_RETURN_IF(CheckSwiGLU(*gate, *up));
  return GetOutput(ctx, 0, gate->shape, out);
}

OrtStatus* SwiGLUPackedArgs(OrtKernelContext* ctx, Tensor* x, int64_t* rows, int64_t* f, void** out) {
  MN_RETURN_IF(GetInput(ctx, 0, x));
  MN_RETURN_IF(CheckSwiGLUPacked(*x));
  std::vector<int64_t> shape = x->shape;
  *f = shape.back() / 2;
  shape.back() = *f;
  *rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) *rows *= shape[i];  // numel / 2F, exact also when F == 0
  return GetOutput(ctx, 0, shape, out);
}

// Output 0: x's type and shape with the last dimension halved, where x's rank and last dimension are known
// and even and every other dimension has a size or a name; else unknown (the kernel reports a bad x).
static OrtStatus* ORT_API_CALL InferSwiGLUPackedShape(const OrtCustomOp*, OrtShapeInferContext* ctx) {
  return SetShapeLikeInput(ctx, 0, 0, kHalveLast, 1, SIZE_MAX);
}

OpDef* UseSwiGLUPackedShape(OpDef* def) {
  def->InferOutputShapeFn = InferSwiGLUPackedShape;
  return def;
}

OrtStatus* SwiGLUGradArgs(OrtKernelContext* ctx, Tensor* gate, Tensor* up, Tensor* dy, void** dgate, void** dup) {
  MN_RETURN_IF(GetInput(ctx, 0, gate));
  MN_RETURN_IF(GetInput(ctx, 1, up));
  MN_RETURN_IF(GetInput(ctx, 2, dy));
  MN_RETURN_IF(CheckSwiGLUGrad(*gate, *up, *dy));
  MN_RETURN_IF(GetOutput(ctx, 0, gate->shape, dgate));
  return GetOutput(ctx, 1, gate->shape, dup);
}

OrtStatus* RopeCacheWriteKernel::Inputs(OrtKernelContext* ctx, Tensor* nw, Tensor* cache, Tensor* pos) {
  MN_RETURN_IF(GetInput(ctx, 0, nw));
  MN_RETURN_IF(GetInput(ctx, 1, cache));
  return GetInput(ctx, 2, pos);
}

namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
constexpr auto FP32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;  // float32 whatever T is (dweight)

class SwiGLUCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new SwiGLUCpu();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor gate, up;
    void* out = nullptr;
    MN_RETURN_IF(SwiGLUArgs(ctx, &gate, &up, &out));
    return DispatchFloat(gate.type, [&](auto tag) {
      using T = decltype(tag);
      return Run(ctx, gate.numel(), static_cast<const T*>(gate.data), static_cast<const T*>(up.data), static_cast<T*>(out));
    });
  }

 private:
  template <class T>
  static OrtStatus* Run(OrtKernelContext* ctx, int64_t n, const T* g, const T* u, T* out) {
    Chunks ch(n, 1 << 14, 256);
    return ParallelFor(ctx, ch.count, [&](size_t c) { Span(g, u, out, ch.begin(c), ch.end(c)); });
  }

 public:  // the elementwise loops, which SwiGLUPackedCpu runs on each row's two halves
  // float16 / bfloat16: blocks converted to float32, computed by the float loop, converted back.
  template <class T>
  static void Span(const T* g, const T* u, T* out, int64_t begin, int64_t end) {
    constexpr int64_t kBlock = 512;
    float gf[kBlock], uf[kBlock], of[kBlock];
    for (int64_t i = begin; i < end; i += kBlock) {
      const int64_t n = std::min(kBlock, end - i);
      ToFloatRow(g + i, gf, n);
      ToFloatRow(u + i, uf, n);
      Span(gf, uf, of, 0, n);
      FromFloatRow(of, out + i, n);
    }
  }
  static void Span(const float* g, const float* u, float* out, int64_t begin, int64_t end) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    // On a CPU with AVX2 + FMA the same loop compiled for 8 lanes (the library's baseline,
    // x86-64-v2, has 4), picked at run time as ORT's own elementwise kernels do.
    if (HasAvx2Fma()) return SpanAvx2(g, u, out, begin, end);
#endif
    SpanBaseline(g, u, out, begin, end);
  }
  // sigmoid(x) from e = exp(-|x|) in (0, 1]: 1 / (1 + e) for x >= 0, e / (1 + e) below; never
  // overflows, and ExpNeg (plain arithmetic, unlike libm's expf) lets the loop vectorise.
  static inline float Value(float x, float u) {
    const float e = ExpNeg(-std::fabs(x));
    const float s = 1.0f / (1.0f + e);
    return x * (x >= 0.0f ? s : e * s) * u;
  }
  static void SpanBaseline(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ out, int64_t begin,
                           int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out[i] = Value(g[i], u[i]);
  }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __attribute__((target("avx2,fma"))) static void SpanAvx2(const float* __restrict__ g, const float* __restrict__ u,
                                                           float* __restrict__ out, int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out[i] = Value(g[i], u[i]);
  }
#endif
};

// out [rows, F] from x [rows, 2F]: the flat output range in chunks over the thread pool (one row of a decode
// step spreads over the pool as well as a prefill's rows); each chunk runs SwiGLU's loops on the pieces of
// the rows it covers, gate at x + r * 2F + j and up F further. int64 offsets throughout.
class SwiGLUPackedCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new SwiGLUPackedCpu();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor x;
    int64_t rows = 0, f = 0;
    void* out = nullptr;
    MN_RETURN_IF(SwiGLUPackedArgs(ctx, &x, &rows, &f, &out));
    if (rows == 0 || f == 0) return nullptr;  // empty output
    return DispatchFloat(x.type, [&](auto tag) {
      using T = decltype(tag);
      const T* xs = static_cast<const T*>(x.data);
      T* os = static_cast<T*>(out);
      Chunks ch(rows * f, 1 << 14, 256);
      return ParallelFor(ctx, ch.count, [&](size_t c) {
        for (int64_t i = ch.begin(c), end = ch.end(c); i < end;) {
          const int64_t r = i / f, j = i - r * f, n = std::min(end - i, f - j);
          const T* row = xs + r * 2 * f;
          SwiGLUCpu::Span(row + j, row + f + j, os + i, 0, n);
          i += n;
        }
      });
    });
  }
};

// dgate = dy * up * s * (1 + gate * (1 - s)), dup = dy * gate * s with s = sigmoid(gate), one pass.
class SwiGLUGradCpu : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new SwiGLUGradCpu();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor gate, up, dy;
    void *dgate = nullptr, *dup = nullptr;
    MN_RETURN_IF(SwiGLUGradArgs(ctx, &gate, &up, &dy, &dgate, &dup));
    return DispatchFloat(gate.type, [&](auto tag) {
      using T = decltype(tag);
      const Ptrs<T> p{static_cast<const T*>(gate.data), static_cast<const T*>(up.data), static_cast<const T*>(dy.data),
                      static_cast<T*>(dgate), static_cast<T*>(dup)};
      Chunks ch(gate.numel(), 1 << 14, 256);
      return ParallelFor(ctx, ch.count, [&](size_t c) { Span(p, ch.begin(c), ch.end(c)); });
    });
  }

 private:
  template <class T>
  struct Ptrs {
    const T *g, *u, *d;
    T *dg, *du;
  };
  // float16 / bfloat16: blocks converted to float32, computed by the float loop, converted back.
  template <class T>
  static void Span(const Ptrs<T>& p, int64_t begin, int64_t end) {
    constexpr int64_t kBlock = 512;
    float gf[kBlock], uf[kBlock], df[kBlock], dgf[kBlock], duf[kBlock];
    for (int64_t i = begin; i < end; i += kBlock) {
      const int64_t n = std::min(kBlock, end - i);
      ToFloatRow(p.g + i, gf, n);
      ToFloatRow(p.u + i, uf, n);
      ToFloatRow(p.d + i, df, n);
      Span(Ptrs<float>{gf, uf, df, dgf, duf}, 0, n);
      FromFloatRow(dgf, p.dg + i, n);
      FromFloatRow(duf, p.du + i, n);
    }
  }
  static void Span(const Ptrs<float>& p, int64_t begin, int64_t end) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (HasAvx2Fma()) return SpanAvx2(p.g, p.u, p.d, p.dg, p.du, begin, end);  // as SwiGLU's forward
#endif
    SpanBaseline(p.g, p.u, p.d, p.dg, p.du, begin, end);
  }
  // SwiGLU's overflow-free sigmoid (see SwiGLUCpu::Value).
  static inline float Sigmoid(float x) {
    const float e = ExpNeg(-std::fabs(x));
    const float s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
  }
  static void SpanBaseline(const float* __restrict__ g, const float* __restrict__ u, const float* __restrict__ d, float* __restrict__ dg,
                           float* __restrict__ du, int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float s = Sigmoid(g[i]);
      dg[i] = d[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
      du[i] = d[i] * (g[i] * s);
    }
  }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __attribute__((target("avx2,fma"))) static void SpanAvx2(const float* __restrict__ g, const float* __restrict__ u,
                                                           const float* __restrict__ d, float* __restrict__ dg, float* __restrict__ du,
                                                           int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float s = Sigmoid(g[i]);
      dg[i] = d[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
      du[i] = d[i] * (g[i] * s);
    }
  }
#endif
};

// dx = r * gx - x * r^3 * mean(gx * x) per row, r = 1 / sqrt(mean(x^2) + eps), gx = dy * weight; and,
// when the node has its second output, dweight = sum over rows of dy * x * r (float32): each chunk of
// rows adds into its own float32 partial row, then the partials are summed in chunk order. The chunks
// depend on the shape only, so the sum is the same for every thread count (deterministic).
class RMSNormGradCpu : public Kernel {
 public:
  explicit RMSNormGradCpu(float eps) : eps_(eps) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    float eps = 0.0f;
    MN_RETURN_IF(ReadRMSNormGradAttrs(info, &eps));
    *out = new RMSNormGradCpu(eps);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor x, w, dy;
    MN_RETURN_IF(GetInput(ctx, 0, &x));
    MN_RETURN_IF(GetInput(ctx, 1, &w));
    MN_RETURN_IF(GetInput(ctx, 2, &dy));
    MN_RETURN_IF(CheckRMSNormGrad(x, w, dy));
    void* dx = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, x.shape, &dx));
    float* dw = nullptr;
    MN_RETURN_IF(RMSNormGradWeightOutput(ctx, w.shape, &dw));
    const int64_t rows = x.shape[0], n = x.shape[1];
    Chunks ch(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n)), 256);
    std::vector<float> partial(dw != nullptr ? static_cast<size_t>(ch.count * n) : 0, 0.0f);
    OrtStatus* st = DispatchFloat(x.type, [&](auto tag) {
      using T = decltype(tag);
      const T *xs = static_cast<const T*>(x.data), *ws = static_cast<const T*>(w.data), *ds = static_cast<const T*>(dy.data);
      T* out = static_cast<T*>(dx);
      std::vector<float> wf(n);
      ToFloatRow(ws, wf.data(), n);
      return ParallelFor(ctx, ch.count, [&](size_t c) {
        std::vector<float> buf(std::is_same<T, float>::value ? 0 : 3 * n);  // half types: the row in float32
        float* acc = dw != nullptr ? partial.data() + c * n : nullptr;
        for (int64_t r = ch.begin(c); r < ch.end(c); ++r) Row(xs + r * n, wf.data(), ds + r * n, out + r * n, acc, n, buf.data());
      });
    });
    if (st != nullptr || dw == nullptr) return st;
    std::fill(dw, dw + n, 0.0f);
    for (int64_t c = 0; c < ch.count; ++c) {
      const float* p = partial.data() + c * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) dw[i] += p[i];
    }
    return nullptr;
  }

 private:
  void Row(const float* x, const float* w, const float* dy, float* dx, float* acc, int64_t n, float*) const { RowF(x, w, dy, dx, acc, n); }
  template <class T>
  void Row(const T* x, const float* w, const T* dy, T* dx, float* acc, int64_t n, float* buf) const {
    ToFloatRow(x, buf, n);
    ToFloatRow(dy, buf + n, n);
    RowF(buf, w, buf + n, buf + 2 * n, acc, n);
    FromFloatRow(buf + 2 * n, dx, n);
  }
  void RowF(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ dy, float* __restrict__ dx,
            float* __restrict__ acc, int64_t n) const {
    float ss = 0.0f, gxx = 0.0f;
#pragma omp simd reduction(+ : ss, gxx)
    for (int64_t i = 0; i < n; ++i) {
      ss += x[i] * x[i];
      gxx += dy[i] * w[i] * x[i];
    }
    const float inv_n = 1.0f / static_cast<float>(n);
    const float r = 1.0f / std::sqrt(ss * inv_n + eps_);
    const float c = r * r * r * gxx * inv_n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = r * (dy[i] * w[i]) - x[i] * c;
    if (acc == nullptr) return;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) acc[i] += dy[i] * (x[i] * r);
  }
  float eps_;
};

// Per row: s = x + residual in float32, rounded to T (the output sum), read back widened; r = 1 / sqrt(mean(s^2) +
// eps); y = s * r * weight rounded to T. Rows in chunks over the thread pool; a chunk's half rows go through
// float32 buffers of its own.
class AddRMSNormCpu : public Kernel {
 public:
  explicit AddRMSNormCpu(float eps) : eps_(eps) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    float eps = 0.0f;
    MN_RETURN_IF(ReadAddRMSNormAttrs(info, &eps));
    *out = new AddRMSNormCpu(eps);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor x, res, w;
    void *y = nullptr, *sum = nullptr;
    MN_RETURN_IF(AddRMSNormArgs(ctx, &x, &res, &w, &y, &sum));
    const int64_t rows = x.shape[0], n = x.shape[1];
    if (rows == 0 || n == 0) return nullptr;  // empty outputs
    return DispatchFloat(x.type, [&](auto tag) {
      using T = decltype(tag);
      const T *xs = static_cast<const T*>(x.data), *rs = static_cast<const T*>(res.data);
      T *ys = static_cast<T*>(y), *ss = static_cast<T*>(sum);
      std::vector<float> wf(n);
      ToFloatRow(static_cast<const T*>(w.data), wf.data(), n);
      Chunks ch(rows, std::max<int64_t>(1, 4096 / n), 256);
      return ParallelFor(ctx, ch.count, [&](size_t c) {
        std::vector<float> buf(3 * n);
        for (int64_t r = ch.begin(c); r < ch.end(c); ++r) Row(xs + r * n, rs + r * n, wf.data(), ys + r * n, ss + r * n, n, buf.data());
      });
    });
  }

 private:
  template <class T>
  void Row(const T* x, const T* res, const float* w, T* y, T* sum, int64_t n, float* buf) const {
    float *a = buf, *b = buf + n, *out = buf + 2 * n;
    ToFloatRow(x, a, n);
    ToFloatRow(res, b, n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
    FromFloatRow(a, sum, n);
    ToFloatRow(sum, a, n);  // the norm reads the sum as stored (a no-op round trip for float)
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; ++i) ss += a[i] * a[i];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps_);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] * r * w[i];
    FromFloatRow(out, y, n);
  }
  float eps_;
};

class RopeCacheWriteCpu : public RopeCacheWriteKernel {
 public:
  explicit RopeCacheWriteCpu(const RopeCacheWriteAttrs& a) : RopeCacheWriteKernel(a) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return CreateAs<RopeCacheWriteCpu>(info, out); }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor nw, cache, pos;
    MN_RETURN_IF(Inputs(ctx, &nw, &cache, &pos));
    RopeCacheWriteProblem p;
    MN_RETURN_IF(CheckRopeCacheWrite(a_, nw, cache, pos, &p));
    void* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, cache.shape, &out));
    return DispatchFloat(p.type, [&](auto tag) {
      using T = decltype(tag);
      return Run(ctx, p, static_cast<const T*>(nw.data), static_cast<const T*>(cache.data), static_cast<T*>(out));
    });
  }

 private:
  template <class T>
  OrtStatus* Run(OrtKernelContext* ctx, const RopeCacheWriteProblem& p, const T* x, const T* src, T* out) {
    if (out != src) MN_RETURN_IF(CopyCache(ctx, out, src, p.max_seq * p.dim * static_cast<int64_t>(sizeof(T))));
    const int64_t half = a_.head_dim / 2, heads = p.dim / a_.head_dim;
    const float* inv = inv_freq_.data();
    std::vector<float> cs(half), sn(half);
    // float16 / bfloat16: each row converted to float32, rotated, and converted back.
    std::vector<float> x_row(std::is_same<T, float>::value ? 0 : p.dim), y_row(x_row.size());
    for (int64_t r = 0; r < p.T; ++r) {  // T rows of one token each: a decode step writes one
      const float position = static_cast<float>(p.kv_pos + r);
      for (int64_t j = 0; j < half; ++j) {  // the same float32 angle as the Rope kernels
        const float ang = position * inv[j];
        cs[j] = std::cos(ang);
        sn[j] = std::sin(ang);
      }
      T* row = out + (p.kv_pos + r) * p.dim;
      float* rotated = OutRow(row, y_row.data());
      RotateHeads(FloatRow(x + r * p.dim, p.dim, x_row.data()), rotated, cs.data(), sn.data(), heads, a_.head_dim);
      StoreRow(rotated, row, p.dim);
    }
    return nullptr;
  }
};

}  // namespace

void AddCpuFusedOps(std::vector<OpDef*>* ops) {
  const char* ep = "CPUExecutionProvider";
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(new OpDef("SwiGLU", ep, {T, T}, {T}, {false, false}, {false, false}, SwiGLUCpu::Create, 0));
    ops->push_back(UseSwiGLUPackedShape(new OpDef("SwiGLUPacked", ep, {T}, {T}, {false}, {false}, SwiGLUPackedCpu::Create, 0)));
    ops->push_back(NewRMSNormGradOpDef(
        new OpDef("RMSNormGrad", ep, {T, T, T}, {T, FP32}, {false, false, false}, {false, false, false}, RMSNormGradCpu::Create, 0)));
    ops->push_back(new OpDef("SwiGLUGrad", ep, {T, T, T}, {T, T}, {false, false, false}, {false, false, false}, SwiGLUGradCpu::Create, 0));
    ops->push_back(new OpDef("RopeCacheWrite", ep, {T, T, ANY}, {T}, {false, false, false}, {false, false, false},
                             RopeCacheWriteCpu::Create, 1, /*cache_inplace=*/true));
    ops->push_back(new OpDef("AddRMSNorm", ep, {T, T, T}, {T, T}, {false, false, false}, {false, false, false}, AddRMSNormCpu::Create, 0));
  }
}

}  // namespace mn
