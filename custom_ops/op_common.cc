// Validation, OrtCustomOp plumbing and the exported RegisterCustomOps.
#include "op_common.h"
#include "rope_attention.h"

#include "fused_ops.h"
#include "flash_ops.h"
#include "decode_linear.h"
#include "losses_ops.h"

#include <cmath>
#include <cstdlib>
#include <exception>
#include <atomic>
#include <mutex>

namespace mn {

const OrtApi* g_api = nullptr;

static std::atomic<int64_t> g_cache_copies{0};
void CountCacheCopy() { g_cache_copies.fetch_add(1, std::memory_order_relaxed); }

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

static const char* TypeName(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return "uint32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    default: return "other";
  }
}

bool IsFloatType(ONNXTensorElementDataType t) {
  return t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 ||
         t == ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
}
size_t ElementSize(ONNXTensorElementDataType t) { return t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT ? 4 : 2; }

OrtStatus* GetInput(OrtKernelContext* ctx, size_t index, Tensor* out) {
  *out = Tensor();
  size_t count = 0;
  MN_RETURN_IF(g_api->KernelContext_GetInputCount(ctx, &count));
  if (index >= count) return nullptr;
  const OrtValue* v = nullptr;
  MN_RETURN_IF(g_api->KernelContext_GetInput(ctx, index, &v));
  if (v == nullptr) return nullptr;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  MN_RETURN_IF(g_api->GetTensorTypeAndShape(v, &info));
  size_t rank = 0;
  OrtStatus* st = g_api->GetTensorElementType(info, &out->type);
  if (!st) st = g_api->GetDimensionsCount(info, &rank);
  if (!st) {
    out->shape.resize(rank);
    st = g_api->GetDimensions(info, out->shape.data(), rank);
  }
  g_api->ReleaseTensorTypeAndShapeInfo(info);
  MN_RETURN_IF(st);
  void* data = nullptr;  // the 1.21 C API has no const accessor
  MN_RETURN_IF(g_api->GetTensorMutableData(const_cast<OrtValue*>(v), &data));
  out->data = data;
  out->present = true;
  return nullptr;
}

OrtStatus* GetOutput(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape, float** data) {
  OrtValue* v = nullptr;
  MN_RETURN_IF(g_api->KernelContext_GetOutput(ctx, index, shape.data(), shape.size(), &v));
  return g_api->GetTensorMutableData(v, reinterpret_cast<void**>(data));
}

OrtStatus* GetOutput(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape, void** data) {
  OrtValue* v = nullptr;
  MN_RETURN_IF(g_api->KernelContext_GetOutput(ctx, index, shape.data(), shape.size(), &v));
  return g_api->GetTensorMutableData(v, data);
}

OrtStatus* GetOptionalOutput(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape, void** data) {
  *data = nullptr;
  size_t count = 0;
  MN_RETURN_IF(g_api->KernelContext_GetOutputCount(ctx, &count));
  if (index >= count) return nullptr;
  OrtValue* v = nullptr;
  MN_RETURN_IF(g_api->KernelContext_GetOutput(ctx, index, shape.data(), shape.size(), &v));
  return v == nullptr ? nullptr : g_api->GetTensorMutableData(v, data);  // nullptr: optional and absent
}

OrtStatus* CheckFloatTensor(const char* op, const char* arg, const Tensor& t, size_t rank) {
  if (!t.present) return MN_INVALID("%s: input '%s' is missing", op, arg);
  if (!IsFloatType(t.type))
    return MN_INVALID("%s: input '%s' must be float32, float16 or bfloat16, got %s", op, arg, TypeName(t.type));
  return CheckTensor(op, arg, t, t.type, rank);
}

OrtStatus* CheckTensor(const char* op, const char* arg, const Tensor& t, ONNXTensorElementDataType type,
                       size_t rank) {
  if (!t.present) return MN_INVALID("%s: input '%s' is missing", op, arg);
  if (t.type != type)
    return MN_INVALID("%s: input '%s' must be %s, got %s", op, arg, TypeName(type), TypeName(t.type));
  if (t.shape.size() != rank)
    return MN_INVALID("%s: input '%s' must have rank %zu, got shape %s", op, arg, rank, ShapeStr(t.shape).c_str());
  for (int64_t d : t.shape)
    if (d < 0) return MN_INVALID("%s: input '%s' has a negative dimension %s", op, arg, ShapeStr(t.shape).c_str());
  return nullptr;
}

OrtStatus* CheckIndexType(const char* op, const char* arg, const Tensor& t) {
  if (t.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 && t.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 &&
      t.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32)
    return MN_INVALID("%s: input '%s' must be int64, int32 or uint32, got %s", op, arg, TypeName(t.type));
  return nullptr;
}

int64_t IndexAt(const Tensor& t, int64_t i) {
  switch (t.type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return static_cast<const int64_t*>(t.data)[i];
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return static_cast<const int32_t*>(t.data)[i];
    default: return static_cast<const uint32_t*>(t.data)[i];
  }
}

OrtStatus* CheckScalarIndex(const char* op, const char* arg, const Tensor& t) {
  if (!t.present) return MN_INVALID("%s: input '%s' is missing", op, arg);
  MN_RETURN_IF(CheckIndexType(op, arg, t));
  if (t.shape.size() > 1 || t.numel() != 1)
    return MN_INVALID("%s: input '%s' must have shape [1], got %s", op, arg, ShapeStr(t.shape).c_str());
  return nullptr;
}

OrtStatus* CheckPositions(const char* op, const char* arg, const Tensor& t, int64_t batch) {
  if (!t.present) return MN_INVALID("%s: input '%s' is missing", op, arg);
  MN_RETURN_IF(CheckIndexType(op, arg, t));
  const bool one = t.shape.size() <= 1 && t.numel() == 1;
  if (!(one && batch == 1) && !(t.shape.size() == 1 && t.shape[0] == batch))
    return MN_INVALID("%s: input '%s' must have shape [%lld] (one position per sequence), got %s", op, arg, (long long)batch,
                      ShapeStr(t.shape).c_str());
  return nullptr;
}

OrtStatus* ReadScalarIndex(const char* op, const char* arg, const Tensor& t, int64_t* value) {
  MN_RETURN_IF(CheckScalarIndex(op, arg, t));
  *value = IndexAt(t, 0);
  return nullptr;
}

// The ONNX type of attribute `name` as the C API can read it ("int", "float", "string", "ints",
// "floats"), or nullptr when the node has no such attribute (or one of another type: tensor, graph).
static const char* AttrKind(const OrtKernelInfo* info, const char* name) {
  auto ok = [](OrtStatus* st) {
    if (st == nullptr) return true;
    g_api->ReleaseStatus(st);
    return false;
  };
  int64_t i = 0;
  float f = 0.f;
  size_t n = 0;
  if (ok(g_api->KernelInfoGetAttribute_int64(info, name, &i))) return "int";
  if (ok(g_api->KernelInfoGetAttribute_float(info, name, &f))) return "float";
  if (ok(g_api->KernelInfoGetAttribute_string(info, name, nullptr, &n))) return "string";
  n = 0;
  if (ok(g_api->KernelInfoGetAttributeArray_int64(info, name, nullptr, &n))) return "ints";
  n = 0;
  if (ok(g_api->KernelInfoGetAttributeArray_float(info, name, nullptr, &n))) return "floats";
  return nullptr;
}

// A missing attribute takes `dflt` (or is an error without one); one of another type is an error
// that says so (e.g. head_dim=64.0 is a float where an int belongs).
static OrtStatus* AttrAbsentOrMistyped(const OrtKernelInfo* info, const char* op, const char* name, const char* want,
                                       bool has_default) {
  auto phrase = [](const char* k) -> const char* {
    const std::string s = k;
    return s == "int" ? "an int" : s == "float" ? "a float" : s == "string" ? "a string" : s == "ints" ? "a list of ints" : "a list of floats";
  };
  const char* kind = AttrKind(info, name);
  if (kind != nullptr) return MN_INVALID("%s: attribute '%s' must be %s, got %s", op, name, phrase(want), phrase(kind));
  if (has_default) return nullptr;
  return MN_INVALID("%s: required %s attribute '%s' is missing", op, want, name);
}

OrtStatus* AttrInt(const OrtKernelInfo* info, const char* op, const char* name, int64_t* out, const int64_t* dflt) {
  OrtStatus* st = g_api->KernelInfoGetAttribute_int64(info, name, out);
  if (st == nullptr) return nullptr;
  g_api->ReleaseStatus(st);
  MN_RETURN_IF(AttrAbsentOrMistyped(info, op, name, "int", dflt != nullptr));
  *out = *dflt;
  return nullptr;
}

OrtStatus* AttrFloat(const OrtKernelInfo* info, const char* op, const char* name, float* out, const float* dflt) {
  OrtStatus* st = g_api->KernelInfoGetAttribute_float(info, name, out);
  if (st == nullptr) return nullptr;
  g_api->ReleaseStatus(st);
  MN_RETURN_IF(AttrAbsentOrMistyped(info, op, name, "float", dflt != nullptr));
  *out = *dflt;
  return nullptr;
}

OrtStatus* CheckPositionsFlag(const char* op, int64_t value) {
  if (value == 0 || value == 1) return nullptr;
  return MN_INVALID("%s: attribute check_positions must be 0 or 1, got %lld", op, (long long)value);
}

// ---------------------------------------------------------------- Rope
OrtStatus* ReadRopeAttrs(const OrtKernelInfo* info, RopeAttrs* a) {
  const int64_t zero = 0, one = 1;
  MN_RETURN_IF(AttrFloat(info, "Rope", "theta", &a->theta, nullptr));
  MN_RETURN_IF(AttrInt(info, "Rope", "head_dim", &a->head_dim, nullptr));
  MN_RETURN_IF(AttrInt(info, "Rope", "offset", &a->offset, &zero));
  MN_RETURN_IF(AttrInt(info, "Rope", "check_positions", &a->check_positions, &one));
  MN_RETURN_IF(CheckPositionsFlag("Rope", a->check_positions));
  MN_RETURN_IF(AttrInt(info, "Rope", "inverse", &a->inverse, &zero));
  if (a->inverse != 0 && a->inverse != 1) return MN_INVALID("Rope: attribute inverse must be 0 or 1, got %lld", (long long)a->inverse);
  if (a->head_dim <= 0 || a->head_dim % 2 != 0 || a->head_dim > 1024)
    return MN_INVALID("Rope: attribute head_dim must be even and in [2, 1024], got %lld", (long long)a->head_dim);
  if (!(a->theta > 0.0f) || !std::isfinite(a->theta))
    return MN_INVALID("Rope: attribute theta must be a positive finite number, got %g", (double)a->theta);
  if (a->offset < 0 || a->offset > kMaxPosition)
    return MN_INVALID("Rope: attribute offset must be in [0, 2^40], got %lld", (long long)a->offset);
  return nullptr;
}

OrtStatus* CheckRope(const RopeAttrs& a, const Tensor& x, const Tensor& offset_dyn, RopeProblem* p, bool host_positions) {
  if (!x.present) return MN_INVALID("Rope: input 'X' is missing");
  MN_RETURN_IF(CheckFloatTensor("Rope", "X", x, x.shape.size() == 3 ? 3 : 2));
  const bool batched = x.shape.size() == 3;
  p->type = x.type;
  p->B = batched ? x.shape[0] : 1;
  p->S = x.shape[batched ? 1 : 0];
  p->D = x.shape[batched ? 2 : 1];
  p->head_dim = a.head_dim;
  if (p->D % a.head_dim != 0)
    return MN_INVALID("Rope: X has %lld features, not a multiple of head_dim %lld (shape %s)", (long long)p->D,
                      (long long)a.head_dim, ShapeStr(x.shape).c_str());
  p->pos0.assign(1, a.offset);
  if (!offset_dyn.present) return nullptr;
  // One offset for all rows of a 2-D X; one per sequence (or one shared) for a 3-D X.
  if (batched && offset_dyn.numel() != 1) {
    MN_RETURN_IF(CheckPositions("Rope", "offset_dyn", offset_dyn, p->B));
  } else {
    MN_RETURN_IF(CheckScalarIndex("Rope", "offset_dyn", offset_dyn));
  }
  if (!host_positions) return nullptr;  // + offset_dyn, added (and checked) on the device
  const int64_t n = offset_dyn.numel();
  p->pos0.resize(n);
  for (int64_t b = 0; b < n; ++b) {
    const int64_t dyn = IndexAt(offset_dyn, b);
    if (dyn < 0) return MN_INVALID("Rope: offset_dyn[%lld] must be >= 0, got %lld", (long long)b, (long long)dyn);
    if (dyn > kMaxPosition)
      return MN_INVALID("Rope: offset_dyn[%lld] = %lld is too large (at most 2^40)", (long long)b, (long long)dyn);
    p->pos0[b] = a.offset + dyn;
  }
  return nullptr;
}

void RopeInvFreq(float theta, int64_t head_dim, float* inv_freq) {
  for (int64_t j = 0; j < head_dim / 2; ++j)
    inv_freq[j] = powf(theta, -2.0f * static_cast<float>(j) / static_cast<float>(head_dim));
}

// ---------------------------------------------------------------- CacheWrite
// Reads B positions (host memory) and checks 0 <= kv_pos[b] <= max_seq - T for each; never computes
// kv_pos + T (a position from the model may be near 2^63).
static OrtStatus* ReadCachePositions(const char* op, const Tensor& kv_pos, int64_t B, int64_t T, int64_t max_seq,
                                     std::vector<int64_t>* out) {
  out->resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t v = IndexAt(kv_pos, b);
    if (v < 0 || v > max_seq - T) {
      if (B == 1)
        return MN_INVALID("%s: kv_pos %lld + T %lld exceeds the cache length max_seq %lld", op, (long long)v, (long long)T,
                          (long long)max_seq);
      return MN_INVALID("%s: kv_pos[%lld] = %lld + T %lld exceeds the cache length max_seq %lld", op, (long long)b,
                        (long long)v, (long long)T, (long long)max_seq);
    }
    (*out)[b] = v;
  }
  return nullptr;
}

OrtStatus* CheckCacheWrite(const Tensor& nw, const Tensor& cache, const Tensor& kv_pos, CacheWriteProblem* p,
                           bool host_positions) {
  const char* op = "CacheWrite";
  const size_t rank = nw.present && nw.shape.size() == 3 ? 3 : 2;  // [B, T, dim] or [T, dim]
  MN_RETURN_IF(CheckFloatTensor(op, "new", nw, rank));
  MN_RETURN_IF(CheckTensor(op, "cache", cache, nw.type, rank));
  const size_t r0 = rank - 2;
  p->type = nw.type;
  p->B = rank == 3 ? nw.shape[0] : 1;
  p->T = nw.shape[r0];
  p->dim = nw.shape[r0 + 1];
  p->max_seq = cache.shape[r0];
  if (cache.shape[r0 + 1] != p->dim || (rank == 3 && cache.shape[0] != p->B))
    return MN_INVALID("%s: new has shape %s but cache has shape %s (batch sizes or row widths differ)", op,
                      ShapeStr(nw.shape).c_str(), ShapeStr(cache.shape).c_str());
  MN_RETURN_IF(CheckPositions(op, "kv_pos", kv_pos, p->B));
  p->kv_pos.clear();
  // Never kv_pos + T > max_seq: kv_pos comes from the model and may be near 2^63 (signed overflow).
  if (p->T > p->max_seq)
    return MN_INVALID("%s: new has %lld rows, more than the cache length max_seq %lld", op, (long long)p->T,
                      (long long)p->max_seq);
  if (host_positions) MN_RETURN_IF(ReadCachePositions(op, kv_pos, p->B, p->T, p->max_seq, &p->kv_pos));
  return nullptr;
}

// ---------------------------------------------------------------- CachedAttention
OrtStatus* ReadAttnAttrs(const OrtKernelInfo* info, AttnAttrs* a) {
  MN_RETURN_IF(AttrInt(info, "CachedAttention", "num_heads", &a->num_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "CachedAttention", "num_kv_heads", &a->num_kv_heads, nullptr));
  MN_RETURN_IF(AttrInt(info, "CachedAttention", "head_dim", &a->head_dim, nullptr));
  const int64_t one = 1;
  MN_RETURN_IF(AttrInt(info, "CachedAttention", "check_positions", &a->check_positions, &one));
  return CheckAttnAttrs("CachedAttention", *a);
}

OrtStatus* CheckAttnAttrs(const char* op, const AttnAttrs& a) {
  MN_RETURN_IF(CheckPositionsFlag(op, a.check_positions));
  // Bounded so that num_heads * head_dim cannot overflow.
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads > kMaxHeads || a.num_kv_heads > kMaxHeads || a.head_dim <= 0 ||
      a.head_dim > 1024)
    return MN_INVALID("%s: num_heads %lld, num_kv_heads %lld must be in [1, 2^20] and head_dim %lld in [1, 1024]", op,
                      (long long)a.num_heads, (long long)a.num_kv_heads, (long long)a.head_dim);
  if (a.num_heads % a.num_kv_heads != 0)
    return MN_INVALID("%s: num_heads %lld is not a multiple of num_kv_heads %lld", op, (long long)a.num_heads,
                      (long long)a.num_kv_heads);
  return nullptr;
}

OrtStatus* CheckCachedAttention(const AttnAttrs& a, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& kv_pos, AttnProblem* p, bool host_positions, const char* op) {
  const size_t rank = q.present && q.shape.size() == 3 ? 3 : 2;  // [B, T, H*hd] or [T, H*hd]
  MN_RETURN_IF(CheckFloatTensor(op, "Q", q, rank));
  MN_RETURN_IF(CheckTensor(op, "K_cache", k, q.type, rank));
  MN_RETURN_IF(CheckTensor(op, "V_cache", v, q.type, rank));
  const size_t r0 = rank - 2;
  p->type = q.type;
  p->B = rank == 3 ? q.shape[0] : 1;
  p->T = q.shape[r0];
  p->H = a.num_heads;
  p->KVH = a.num_kv_heads;
  p->hd = a.head_dim;
  p->max_seq = k.shape[r0];
  if (q.shape[r0 + 1] != a.num_heads * a.head_dim)
    return MN_INVALID("%s: Q has shape %s but num_heads %lld * head_dim %lld = %lld", op, ShapeStr(q.shape).c_str(),
                      (long long)a.num_heads, (long long)a.head_dim, (long long)(a.num_heads * a.head_dim));
  if (k.shape[r0 + 1] != a.num_kv_heads * a.head_dim)
    return MN_INVALID("%s: K_cache has shape %s but num_kv_heads %lld * head_dim %lld = %lld", op,
                      ShapeStr(k.shape).c_str(), (long long)a.num_kv_heads, (long long)a.head_dim,
                      (long long)(a.num_kv_heads * a.head_dim));
  if (rank == 3 && k.shape[0] != p->B)
    return MN_INVALID("%s: Q has shape %s but K_cache has shape %s (batch sizes differ)", op, ShapeStr(q.shape).c_str(),
                      ShapeStr(k.shape).c_str());
  if (v.shape != k.shape)
    return MN_INVALID("%s: V_cache shape %s differs from K_cache shape %s", op, ShapeStr(v.shape).c_str(),
                      ShapeStr(k.shape).c_str());
  MN_RETURN_IF(CheckPositions(op, "kv_pos", kv_pos, p->B));
  p->kv_pos.clear();
  if (p->T > p->max_seq)
    return MN_INVALID("%s: Q has %lld rows, more than the cache length max_seq %lld", op, (long long)p->T,
                      (long long)p->max_seq);
  if (host_positions) MN_RETURN_IF(ReadCachePositions(op, kv_pos, p->B, p->T, p->max_seq, &p->kv_pos));
  return nullptr;
}

// ---------------------------------------------------------------- ScatterAdd
OrtStatus* CheckScatterAdd(int64_t num_rows, const Tensor& idx, const Tensor& src, ScatterAddProblem* p, bool host_indices) {
  const char* op = "ScatterAdd";
  if (!idx.present) return MN_INVALID("%s: input 'indices' is missing", op);
  MN_RETURN_IF(CheckIndexType(op, "indices", idx));
  if (idx.shape.size() != 1)
    return MN_INVALID("%s: indices must have rank 1, got shape %s", op, ShapeStr(idx.shape).c_str());
  MN_RETURN_IF(CheckTensor(op, "src", src, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, 2));
  p->N = idx.shape[0];
  p->D = src.shape[1];
  p->num_rows = num_rows;
  int64_t out_numel = 0;
  if (__builtin_mul_overflow(num_rows, p->D, &out_numel) || out_numel > (int64_t(1) << 40))
    return MN_INVALID("%s: output [num_rows %lld, %lld] is too large", op, (long long)num_rows, (long long)p->D);
  if (src.shape[0] != p->N)
    return MN_INVALID("%s: indices has %lld entries but src has shape %s", op, (long long)p->N,
                      ShapeStr(src.shape).c_str());
  for (int64_t i = 0; host_indices && i < p->N; ++i) {
    int64_t r = IndexAt(idx, i);
    if (r < 0 || r >= num_rows)
      return MN_INVALID("%s: indices[%lld] = %lld is out of range [0, %lld)", op, (long long)i, (long long)r,
                        (long long)num_rows);
  }
  return nullptr;
}

// ---------------------------------------------------------------- OrtCustomOp glue
namespace {

const OpDef* Self(const OrtCustomOp* op) { return static_cast<const OpDef*>(op); }

OrtStatus* ORT_API_CALL CreateKernelV2(const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info,
                                       void** kernel) {
  try {
    Kernel* k = nullptr;
    MN_RETURN_IF(Self(op)->factory(info, &k));
    *kernel = k;
    return nullptr;
  } catch (const std::exception& e) {
    return Error(ORT_RUNTIME_EXCEPTION, "%s: kernel creation failed: %s", Self(op)->name, e.what());
  }
}

OrtStatus* ORT_API_CALL KernelComputeV2(void* kernel, OrtKernelContext* ctx) {
  try {
    return static_cast<Kernel*>(kernel)->Compute(ctx);
  } catch (const std::exception& e) {
    return Error(ORT_RUNTIME_EXCEPTION, "com.meganeura kernel failed: %s", e.what());
  } catch (...) {
    return Error(ORT_RUNTIME_EXCEPTION, "com.meganeura kernel failed with an unknown exception");
  }
}

void ORT_API_CALL KernelDestroy(void* kernel) { delete static_cast<Kernel*>(kernel); }

// A dimension ORT knows neither the size nor the name of (e.g. the -1 of a Reshape between
// symbolic dims) must not be copied to the output: ORT would give every such output the same empty
// dim_param, and its memory planner then reuses a buffer of one such output for another of a
// different size ("Shape mismatch attempting to re-use buffer"). Leave those outputs unknown.
static bool AllDimsNamed(const OrtTensorTypeAndShapeInfo* info) {
  size_t n = 0;
  if (OrtStatus* st = g_api->GetDimensionsCount(info, &n)) {
    g_api->ReleaseStatus(st);
    return false;
  }
  std::vector<int64_t> dims(n);
  std::vector<const char*> names(n, nullptr);
  OrtStatus* st = g_api->GetDimensions(info, dims.data(), n);
  if (!st) st = g_api->GetSymbolicDimensions(info, names.data(), n);
  if (st) {
    g_api->ReleaseStatus(st);
    return false;
  }
  for (size_t i = 0; i < n; ++i)
    if (dims[i] < 0 && (names[i] == nullptr || names[i][0] == '\0')) return false;
  return true;
}

// Static output shapes let ORT's memory planner apply the in-place hint (it needs equal,
// known sizes) and give Netron/ORT typed outputs. Unknown input shapes are left unknown.
// Output `out` takes the type and shape of input `in` (left unknown where ORT does not know them).
static OrtStatus* ShapeOfInput(OrtShapeInferContext* ctx, size_t in, size_t out) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  OrtStatus* st = g_api->ShapeInferContext_GetInputTypeShape(ctx, in, &info);
  if (st) {  // unknown input shape: leave the output unknown
    g_api->ReleaseStatus(st);
    return nullptr;
  }
  // `info` belongs to the context (ORT releases it): do not release it here.
  if (!AllDimsNamed(info)) return nullptr;
  return g_api->ShapeInferContext_SetOutputTypeShape(ctx, out, info);
}

OrtStatus* ORT_API_CALL InferShape(const OrtCustomOp* op, OrtShapeInferContext* ctx) {
  const OpDef* self = Self(op);
  if (self->shape_from >= 0) {
    MN_RETURN_IF(ShapeOfInput(ctx, static_cast<size_t>(self->shape_from), 0));
    if (self->kv_cache_outputs) {
      MN_RETURN_IF(ShapeOfInput(ctx, 3, 1));
      MN_RETURN_IF(ShapeOfInput(ctx, 4, 2));
    }
    return nullptr;
  }
  // ScatterAdd: [num_rows, src.shape[1]]
  const OrtOpAttr* attr = nullptr;
  int64_t num_rows = 0;
  size_t len = 0;
  OrtStatus* st = g_api->ShapeInferContext_GetAttribute(ctx, "num_rows", &attr);
  if (!st) st = g_api->ReadOpAttr(attr, ORT_OP_ATTR_INT, &num_rows, sizeof num_rows, &len);
  if (st) return st;  // missing attribute: fail at load time with ORT's message
  if (num_rows < 0) return MN_INVALID("ScatterAdd: attribute num_rows must be >= 0, got %lld", (long long)num_rows);
  OrtTensorTypeAndShapeInfo* src = nullptr;
  st = g_api->ShapeInferContext_GetInputTypeShape(ctx, 1, &src);
  if (st) {
    g_api->ReleaseStatus(st);
    return nullptr;
  }
  size_t rank = 0;
  st = g_api->GetDimensionsCount(src, &rank);
  if (st) return st;
  // src's shape unknown here (e.g. made by a kernel whose output shape ORT cannot infer): leave the
  // output unknown too. An output with a type but no dims would be a scalar, and ORT's planner would
  // then hand a later elementwise op a one-element buffer to reuse.
  if (rank != 2) return nullptr;
  int64_t d[2];
  const char* sym[2] = {"", ""};
  st = g_api->GetDimensions(src, d, 2);
  if (!st) st = g_api->GetSymbolicDimensions(src, sym, 2);
  if (st) return st;
  const int64_t dims[2] = {num_rows, d[1]};
  sym[0] = "";
  OrtTensorTypeAndShapeInfo* out = nullptr;
  st = g_api->CreateTensorTypeAndShapeInfo(&out);
  if (!st) st = g_api->SetTensorElementType(out, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT);
  if (!st) st = g_api->SetDimensions(out, dims, 2);
  if (!st) st = g_api->SetSymbolicDimensions(out, sym, 2);
  if (!st) st = g_api->ShapeInferContext_SetOutputTypeShape(ctx, 0, out);
  if (out) g_api->ReleaseTensorTypeAndShapeInfo(out);  // ours; `src` belongs to the context
  return st;
}

// CacheWrite: output 0 may reuse input 1 (the cache). ORT reuses the buffer only when
// that is safe (last use, same size); the kernel copies when it gets a distinct buffer.
size_t ORT_API_CALL CacheMayInplace(int** in, int** out) {
  *in = new int[1]{1};
  *out = new int[1]{0};
  return 1;
}
// RopeCachedAttention: outputs 1 and 2 may reuse inputs 3 and 4 (the K and V caches).
size_t ORT_API_CALL KvCacheMayInplace(int** in, int** out) {
  *in = new int[2]{3, 4};
  *out = new int[2]{1, 2};
  return 2;
}
void ORT_API_CALL ReleaseIndexPair(int* in, int* out) {
  delete[] in;
  delete[] out;
}
size_t ORT_API_CALL NoPairs(int** in, int** out) {
  *in = nullptr;
  *out = nullptr;
  return 0;
}

}  // namespace

OpDef::OpDef(const char* name_, const char* ep_, std::vector<ONNXTensorElementDataType> in,
             std::vector<ONNXTensorElementDataType> out, std::vector<bool> optional, std::vector<bool> cpu_inputs,
             KernelFactory factory_, int shape_from_, bool cache_inplace_)
    : OrtCustomOp(),
      name(name_),
      ep(ep_),
      in_types(std::move(in)),
      out_types(std::move(out)),
      in_optional(std::move(optional)),
      in_cpu(std::move(cpu_inputs)),
      factory(factory_),
      cache_inplace(cache_inplace_),
      shape_from(shape_from_) {
  version = ORT_API_VERSION;
  GetName = [](const OrtCustomOp* op) { return Self(op)->name; };
  GetExecutionProviderType = [](const OrtCustomOp* op) { return Self(op)->ep; };
  GetInputType = [](const OrtCustomOp* op, size_t i) { return Self(op)->in_types[i]; };
  GetInputTypeCount = [](const OrtCustomOp* op) { return Self(op)->in_types.size(); };
  GetOutputType = [](const OrtCustomOp* op, size_t i) { return Self(op)->out_types[i]; };
  GetOutputTypeCount = [](const OrtCustomOp* op) { return Self(op)->out_types.size(); };
  GetInputCharacteristic = [](const OrtCustomOp* op, size_t i) {
    return Self(op)->in_optional[i] ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  };
  GetOutputCharacteristic = [](const OrtCustomOp* op, size_t i) {
    const auto& opt = Self(op)->out_optional;
    return i < opt.size() && opt[i] ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  };
  GetInputMemoryType = [](const OrtCustomOp* op, size_t i) {
    return Self(op)->in_cpu[i] ? OrtMemTypeCPUInput : OrtMemTypeDefault;
  };
  GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
  GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
  CreateKernel = nullptr;
  KernelCompute = nullptr;
  CreateKernelV2 = mn::CreateKernelV2;
  KernelComputeV2 = mn::KernelComputeV2;
  KernelDestroy = mn::KernelDestroy;
  InferOutputShapeFn = InferShape;
  GetStartVersion = [](const OrtCustomOp*) { return 1; };
  GetEndVersion = [](const OrtCustomOp*) { return 1; };
  GetMayInplace = cache_inplace ? CacheMayInplace : NoPairs;
  ReleaseMayInplace = ReleaseIndexPair;
  GetAliasMap = NoPairs;
  ReleaseAliasMap = ReleaseIndexPair;
}

OpDef* OptionalOutputs(OpDef* def, std::vector<bool> optional) {
  def->out_optional = std::move(optional);
  return def;
}

void OpDef::UseKvCacheOutputs() {
  kv_cache_outputs = true;
  GetMayInplace = KvCacheMayInplace;
}

OrtStatus* AdamUpdateArity(OrtKernelContext* ctx, size_t* n_params) {
  size_t n_in = 0, n_out = 0;
  MN_RETURN_IF(g_api->KernelContext_GetInputCount(ctx, &n_in));
  MN_RETURN_IF(g_api->KernelContext_GetOutputCount(ctx, &n_out));
  if (n_in <= kAdamHyper || (n_in - kAdamHyper) % 4 != 0)
    return MN_INVALID("AdamUpdate: takes 6 hyper-parameters then (p, g, m, v) per parameter, got %zu inputs", n_in);
  const size_t n = (n_in - kAdamHyper) / 4;
  if (n_out != 3 * n) return MN_INVALID("AdamUpdate: %zu parameters need %zu outputs (p', m', v' each), got %zu", n, 3 * n, n_out);
  *n_params = n;
  return nullptr;
}

}  // namespace mn

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL RegisterCustomOps(
    OrtSessionOptions* options, const OrtApiBase* api_base) {
  static std::once_flag once;
  static std::vector<mn::OpDef*> ops;
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == nullptr) return nullptr;  // cannot even build a status; ORT older than 1.21
  std::call_once(once, [&] {
    mn::g_api = api;
    mn::AddCpuOps(&ops);
    mn::AddCpuOptimOps(&ops);
    mn::AddCpuFusedOps(&ops);
    mn::AddCpuRopeAttentionOps(&ops);  // cpu_rope_attention.cc
    mn::AddCpuDecodeLinearOps(&ops);  // cpu_decode_linear.cc
    mn::AddCpuFlashOps(&ops);  // cpu_flash.cc
    mn::AddCpuLossOps(&ops);   // cpu_losses.cc
    mn::AddCudaOps(&ops);
  });
  OrtCustomOpDomain* domain = nullptr;  // owned by the process: it must outlive every session
  MN_RETURN_IF(api->CreateCustomOpDomain("com.meganeura", &domain));
  for (mn::OpDef* op : ops) MN_RETURN_IF(api->CustomOpDomain_Add(domain, op));
  return api->AddCustomOpDomain(options, domain);
}

// Diagnostics: how many CacheWrite calls copied the whole cache (0 when ORT ran it in place).
extern "C" __attribute__((visibility("default"))) int64_t MeganeuraCacheWriteFullCopies() {
  return mn::g_cache_copies.load();
}
