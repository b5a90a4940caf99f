// CUDAExecutionProvider registrations of the com.meganeura ops. ORT API code only (g++);
// the kernels are in cuda_kernels.cu behind the plain C launchers of cuda_kernels.h.
// Positions (Rope's offset_dyn, kv_pos) are device-memory inputs: the kernels read them on the GPU
// (no Memcpy node, CUDA-graph capturable). Outside graph capture each position is also read back and
// validated here exactly as on the CPU (an ORT error naming the op and the values). Under capture a
// sync is not allowed: the Session validates positions when they are uploaded, and the kernels guard
// on the device, writing NaN (Rope, CachedAttention) or nothing (CacheWrite) for an invalid position.
// ScatterAdd's indices (training: the embedding gradient) are device memory too, read back and
// validated the same way outside capture; under capture an index out of range makes the output NaN.
#include <vector>

#include "cuda_kernels.h"
#include "flash_ops.h"
#include "op_common.h"

namespace mn {
namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;

OrtStatus* Stream(OrtKernelContext* ctx, void** stream) {
  return g_api->KernelContext_GetGPUComputeStream(ctx, stream);
}

// A [1] integer input in device memory, for the kernels (types were checked by Check*).
MnPos DevicePos(const Tensor& t) {
  if (!t.present) return MnPos{nullptr, MN_POS_NONE};
  switch (t.type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return MnPos{t.data, MN_POS_I64};
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return MnPos{t.data, MN_POS_I32};
    default: return MnPos{t.data, MN_POS_U32};
  }
}

OrtStatus* Cuda(const char* op, int code) {
  if (code == 0) return nullptr;
  return Error(ORT_EP_FAIL, "%s: CUDA error %d (%s)", op, code, mn_cuda_error_string(code));
}

// A device position read back for the host checks (see the top of this file). `host` views `value`
// with the input's own element type, so Check*(..., host_positions=true) validates it as on the CPU.
struct HostPos {
  Tensor host;
  bool captured = false;
  union {
    int64_t i64;
    int32_t i32;
    uint32_t u32;
  } value{};
};

OrtStatus* ReadBack(const char* op, const char* arg, const Tensor& t, void* stream, HostPos* out) {
  out->host = t;
  if (!t.present) return nullptr;
  MN_RETURN_IF(CheckScalarIndex(op, arg, t));
  int64_t v = 0;
  int captured = 0;
  MN_RETURN_IF(Cuda(op, mn_cuda_read_pos(DevicePos(t), stream, &v, &captured)));
  out->captured = captured != 0;
  if (t.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64) out->value.i64 = v;
  else if (t.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32) out->value.i32 = static_cast<int32_t>(v);
  else out->value.u32 = static_cast<uint32_t>(v);
  out->host.data = &out->value;
  return nullptr;
}

class RopeCuda : public Kernel {
 public:
  explicit RopeCuda(const RopeAttrs& a) : a_(a), inv_freq_(a.head_dim / 2) { RopeInvFreq(a.theta, a.head_dim, inv_freq_.data()); }
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    RopeAttrs a;
    MN_RETURN_IF(ReadRopeAttrs(info, &a));
    if (a.head_dim / 2 > MN_ROPE_MAX_HALF)
      return MN_INVALID("Rope: head_dim %lld exceeds the CUDA kernel's limit %d", (long long)a.head_dim, 2 * MN_ROPE_MAX_HALF);
    *out = new RopeCuda(a);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor x, off;
    MN_RETURN_IF(GetInput(ctx, 0, &x));
    MN_RETURN_IF(GetInput(ctx, 1, &off));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    RopeProblem p;
    MN_RETURN_IF(CheckTensor("Rope", "X", x, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, 2));
    HostPos h;
    MN_RETURN_IF(ReadBack("Rope", "offset_dyn", off, stream, &h));
    MN_RETURN_IF(CheckRope(a_, x, h.captured ? off : h.host, &p, /*host_positions=*/!h.captured));
    p.pos0 = a_.offset;  // the kernel adds offset_dyn itself, read on the device
    float* y = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, x.shape, &y));
    return Cuda("Rope", mn_cuda_rope_f32(x.f32(), y, p.S, p.D, p.head_dim, p.pos0, DevicePos(off), inv_freq_.data(), stream));
  }

 private:
  RopeAttrs a_;
  std::vector<float> inv_freq_;
};

class CacheWriteCuda : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new CacheWriteCuda();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor nw, cache, pos;
    MN_RETURN_IF(GetInput(ctx, 0, &nw));
    MN_RETURN_IF(GetInput(ctx, 1, &cache));
    MN_RETURN_IF(GetInput(ctx, 2, &pos));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    HostPos h;
    MN_RETURN_IF(ReadBack("CacheWrite", "kv_pos", pos, stream, &h));
    CacheWriteProblem p;
    MN_RETURN_IF(CheckCacheWrite(nw, cache, h.captured ? pos : h.host, &p, /*host_positions=*/!h.captured));
    float* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, cache.shape, &out));
    if (out != cache.f32() && p.max_seq * p.dim > 0) CountCacheCopy();
    return Cuda("CacheWrite", mn_cuda_cache_write_f32(nw.f32(), cache.f32(), out, p.T, p.dim, p.max_seq, DevicePos(pos), stream));
  }
};

class CachedAttentionCuda : public Kernel {
 public:
  explicit CachedAttentionCuda(const AttnAttrs& a) : a_(a), scratch_(mn_cuda_scratch_new()) {}
  ~CachedAttentionCuda() override { mn_cuda_scratch_free(scratch_); }
  CachedAttentionCuda(const CachedAttentionCuda&) = delete;
  CachedAttentionCuda& operator=(const CachedAttentionCuda&) = delete;
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    AttnAttrs a;
    MN_RETURN_IF(ReadAttnAttrs(info, &a));
    *out = new CachedAttentionCuda(a);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor q, k, v, pos;
    MN_RETURN_IF(GetInput(ctx, 0, &q));
    MN_RETURN_IF(GetInput(ctx, 1, &k));
    MN_RETURN_IF(GetInput(ctx, 2, &v));
    MN_RETURN_IF(GetInput(ctx, 3, &pos));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    HostPos h;
    MN_RETURN_IF(ReadBack("CachedAttention", "kv_pos", pos, stream, &h));
    AttnProblem p;
    MN_RETURN_IF(CheckCachedAttention(a_, q, k, v, h.captured ? pos : h.host, &p, /*host_positions=*/!h.captured));
    if (p.T > 65535 || p.T * p.H > (int64_t(1) << 31) - 1)
      return MN_INVALID("CachedAttention: T %lld x num_heads %lld is too large for the CUDA kernel", (long long)p.T, (long long)p.H);
    float* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, q.shape, &out));
    return Cuda("CachedAttention",
                mn_cuda_cached_attention_f32(q.f32(), k.f32(), v.f32(), out, p.T, p.H, p.KVH, p.hd, p.max_seq, DevicePos(pos), scratch_,
                                             stream));
  }

 private:
  AttnAttrs a_;
  MnScratch* scratch_;  // split-K partials / generic scores: allocated once per shape and stream, then reused
};

class ScatterAddCuda : public Kernel {
 public:
  explicit ScatterAddCuda(int64_t n) : num_rows_(n) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    int64_t n = 0;
    MN_RETURN_IF(AttrInt(info, "ScatterAdd", "num_rows", &n, nullptr));
    if (n < 1) return MN_INVALID("ScatterAdd: attribute num_rows must be >= 1, got %lld", (long long)n);
    *out = new ScatterAddCuda(n);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor idx, src;
    MN_RETURN_IF(GetInput(ctx, 0, &idx));
    MN_RETURN_IF(GetInput(ctx, 1, &src));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    ScatterAddProblem p;
    MN_RETURN_IF(CheckScatterAdd(num_rows_, idx, src, &p, /*host_indices=*/false));
    // Outside CUDA-graph capture the indices are read back and every one is validated as on the
    // CPU (an ORT error naming the index); under capture the kernel guards on the device.
    const size_t width = idx.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 ? 8 : 4;
    std::vector<int64_t> host(static_cast<size_t>(p.N));  // 8 bytes per index: room for any width
    int captured = 0;
    MN_RETURN_IF(Cuda("ScatterAdd", mn_cuda_read_indices(idx.data, width * p.N, host.data(), stream, &captured)));
    if (!captured) {
      Tensor on_host = idx;
      on_host.data = host.data();
      MN_RETURN_IF(CheckScatterAdd(num_rows_, on_host, src, &p));
    }
    float* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, {p.num_rows, p.D}, &out));
    return Cuda("ScatterAdd", mn_cuda_scatter_add_f32(DevicePos(idx), src.f32(), out, p.N, p.D, p.num_rows, stream));
  }

 private:
  int64_t num_rows_;
};

}  // namespace

void AddCudaOps(std::vector<OpDef*>* ops) {
  const char* ep = "CUDAExecutionProvider";
  // in_cpu: every position and index is in device memory (no Memcpy node: CUDA-graph capturable).
  ops->push_back(new OpDef("Rope", ep, {F32, ANY}, {F32}, {false, true}, {false, false}, RopeCuda::Create, 0));
  ops->push_back(new OpDef("CacheWrite", ep, {F32, F32, ANY}, {F32}, {false, false, false}, {false, false, false},
                           CacheWriteCuda::Create, 1, /*cache_inplace=*/true));
  ops->push_back(new OpDef("CachedAttention", ep, {F32, F32, F32, ANY}, {F32}, {false, false, false, false},
                           {false, false, false, false}, CachedAttentionCuda::Create, 0));
  ops->push_back(new OpDef("ScatterAdd", ep, {ANY, F32}, {F32}, {false, false}, {false, false}, ScatterAddCuda::Create, -1));
  AddCudaOptimOps(ops);  // AdamUpdate (cuda_optim_ops.cc)
  AddCudaFlashOps(ops);  // FlashAttention, FlashAttentionGrad (cuda_flash_ops.cc)
}

}  // namespace mn
