// Validation, OrtCustomOp plumbing and the exported RegisterCustomOps.
#include "op_common.h"
#include "rope_attention.h"

#include "fused_ops.h"
#include "flash_ops.h"
#include "decode_layer.h"
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
      MN_RETURN_IF(ShapeOfInput(ctx, self->kv_cache_input, 1));
      MN_RETURN_IF(ShapeOfInput(ctx, self->kv_cache_input + 1, 2));
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
// RopeCachedAttention: outputs 1 and 2 may reuse inputs 3 and 4 (the K and V caches); DecodeLayer: 10 and 11;
// GreedyStep: 1 and 2 (the position and the token log, updated).
template <int K_CACHE>
size_t ORT_API_CALL KvCacheMayInplace(int** in, int** out) {
  *in = new int[2]{K_CACHE, K_CACHE + 1};
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

OrtStatus* SetShapeLikeInput(OrtShapeInferContext* ctx, size_t in, size_t out, int64_t last, size_t min_rank, size_t max_rank) {
  OrtTensorTypeAndShapeInfo* info = nullptr;  // belongs to the context
  OrtStatus* st = g_api->ShapeInferContext_GetInputTypeShape(ctx, in, &info);
  if (st) {
    g_api->ReleaseStatus(st);
    return nullptr;
  }
  size_t rank = 0;
  MN_RETURN_IF(g_api->GetDimensionsCount(info, &rank));
  if (rank < min_rank || rank > max_rank || rank == 0) return nullptr;
  std::vector<int64_t> dims(rank);
  std::vector<const char*> sym(rank, nullptr);
  ONNXTensorElementDataType type;
  MN_RETURN_IF(g_api->GetDimensions(info, dims.data(), rank));
  MN_RETURN_IF(g_api->GetSymbolicDimensions(info, sym.data(), rank));
  MN_RETURN_IF(g_api->GetTensorElementType(info, &type));
  if (last == kHalveLast) {
    if (dims.back() < 0 || dims.back() % 2 != 0) return nullptr;
    dims.back() /= 2;
    sym.back() = "";
  } else if (last > 0) {
    dims.back() = last;
    sym.back() = "";
  }
  for (size_t i = 0; i < rank; ++i)
    if (dims[i] < 0 && (sym[i] == nullptr || sym[i][0] == '\0')) return nullptr;  // unnamed: leave unknown
  OrtTensorTypeAndShapeInfo* shape = nullptr;
  st = g_api->CreateTensorTypeAndShapeInfo(&shape);
  if (!st) st = g_api->SetTensorElementType(shape, type);
  if (!st) st = g_api->SetDimensions(shape, dims.data(), rank);
  if (!st) st = g_api->SetSymbolicDimensions(shape, sym.data(), rank);
  if (!st) st = g_api->ShapeInferContext_SetOutputTypeShape(ctx, out, shape);
  if (shape) g_api->ReleaseTensorTypeAndShapeInfo(shape);
  return st;
}

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

void OpDef::UseKvCacheOutputs(size_t k_cache_input) {
  kv_cache_outputs = true;
  kv_cache_input = k_cache_input;
  GetMayInplace = k_cache_input == 10 ? KvCacheMayInplace<10> : k_cache_input == 1 ? KvCacheMayInplace<1> : KvCacheMayInplace<3>;
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
    mn::AddCpuDecodeLayerOps(&ops);   // cpu_decode_layer.cc
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
