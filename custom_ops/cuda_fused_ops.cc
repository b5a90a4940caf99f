// CUDAExecutionProvider registrations of the fused ops SwiGLU, SwiGLUPacked, SwiGLUGrad, RMSNormGrad (dx and dweight), AddRMSNorm, RopeCacheWrite
// and QKVRopeCacheWrite (ORT API
// code only; the kernels are in cuda_fused.cu). kv_pos is in device memory and read by the kernel; it is
// read back and checked here as on the CPU unless check_positions = 0 or under CUDA-graph capture (see
// cuda_ops.cc).
#include <vector>

#include "cuda_fused.h"
#include "cuda_glue.h"
#include "fused_ops.h"
#include "rope_attention.h"

namespace mn {
namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
constexpr auto FP32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;  // float32 whatever T is (dweight)

class SwiGLUCuda : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new SwiGLUCuda();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor gate, up;
    void* out = nullptr;
    MN_RETURN_IF(SwiGLUArgs(ctx, &gate, &up, &out));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("SwiGLU", mn_cuda_swiglu(DType(gate.type), gate.data, up.data, out, gate.numel(), stream));
  }
};

class SwiGLUPackedCuda : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new SwiGLUPackedCuda();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {  // no allocation, no host sync: capturable in a CUDA graph
    Tensor x;
    int64_t rows = 0, f = 0;
    void* out = nullptr;
    MN_RETURN_IF(SwiGLUPackedArgs(ctx, &x, &rows, &f, &out));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("SwiGLUPacked", mn_cuda_swiglu_packed(DType(x.type), x.data, out, rows, f, stream));
  }
};

class SwiGLUGradCuda : public Kernel {
 public:
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new SwiGLUGradCuda();
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor gate, up, dy;
    void *dgate = nullptr, *dup = nullptr;
    MN_RETURN_IF(SwiGLUGradArgs(ctx, &gate, &up, &dy, &dgate, &dup));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("SwiGLUGrad", mn_cuda_swiglu_grad(DType(gate.type), gate.data, up.data, dy.data, dgate, dup, gate.numel(), stream));
  }
};

class RMSNormGradCuda : public Kernel {
 public:
  explicit RMSNormGradCuda(float eps) : eps_(eps) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    float eps = 0.0f;
    MN_RETURN_IF(ReadRMSNormGradAttrs(info, &eps));
    *out = new RMSNormGradCuda(eps);
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
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("RMSNormGrad",
                mn_cuda_rms_norm_grad(DType(x.type), x.data, w.data, dy.data, dx, dw, x.shape[0], x.shape[1], eps_, stream));
  }

 private:
  float eps_;
};

class AddRMSNormCuda : public Kernel {
 public:
  explicit AddRMSNormCuda(float eps) : eps_(eps) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    float eps = 0.0f;
    MN_RETURN_IF(ReadAddRMSNormAttrs(info, &eps));
    *out = new AddRMSNormCuda(eps);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {  // no allocation, no host sync: capturable in a CUDA graph
    Tensor x, res, w;
    void *y = nullptr, *sum = nullptr;
    MN_RETURN_IF(AddRMSNormArgs(ctx, &x, &res, &w, &y, &sum));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("AddRMSNorm", mn_cuda_add_rms_norm(DType(x.type), x.data, res.data, w.data, y, sum, x.shape[0], x.shape[1], eps_, stream));
  }

 private:
  float eps_;
};

class RopeCacheWriteCuda : public RopeCacheWriteKernel {
 public:
  explicit RopeCacheWriteCuda(const RopeCacheWriteAttrs& a) : RopeCacheWriteKernel(a) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return CreateAs<RopeCacheWriteCuda>(info, out); }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor nw, cache, pos;
    MN_RETURN_IF(Inputs(ctx, &nw, &cache, &pos));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    HostPos h;
    MN_RETURN_IF(ReadBack("RopeCacheWrite", "kv_pos", pos, a_.check_positions != 0, stream, &h));
    RopeCacheWriteProblem p;
    MN_RETURN_IF(CheckRopeCacheWrite(a_, nw, cache, h.device_only ? pos : h.host, &p, /*host_positions=*/!h.device_only));
    void* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, cache.shape, &out));
    if (out != cache.data && p.max_seq * p.dim > 0) CountCacheCopy();
    return Cuda("RopeCacheWrite", mn_cuda_rope_cache_write(DType(p.type), nw.data, cache.data, out, p.T, p.dim, p.max_seq, a_.head_dim,
                                                           inv_freq_.data(), DevicePos(pos), stream));
  }
};

class QKVRopeCacheWriteCuda : public RopeAttnKernel {
 public:
  explicit QKVRopeCacheWriteCuda(const RopeAttnAttrs& a) : RopeAttnKernel(a) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) { return CreateAs<QKVRopeCacheWriteCuda, ReadQkvRopeAttrs>(info, out); }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor in[4];  // qkv, k_cache, v_cache, kv_pos
    for (size_t i = 0; i < 4; ++i) MN_RETURN_IF(GetInput(ctx, i, &in[i]));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    HostPos h;
    MN_RETURN_IF(ReadBack("QKVRopeCacheWrite", "kv_pos", in[3], a_.heads.check_positions != 0, stream, &h));
    QkvRopeProblem p;
    MN_RETURN_IF(CheckQkvRopeCacheWrite(a_, in[0], in[1], in[2], h.device_only ? in[3] : h.host, &p, /*host_positions=*/!h.device_only));
    void *q_rot = nullptr, *kc = nullptr, *vc = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, p.q_shape, &q_rot));
    MN_RETURN_IF(GetOutput(ctx, 1, in[1].shape, &kc));
    MN_RETURN_IF(GetOutput(ctx, 2, in[2].shape, &vc));
    if (kc != in[1].data) CountCacheCopy();
    if (vc != in[2].data) CountCacheCopy();
    const int code = mn_cuda_qkv_rope_cache_write(DType(p.type), in[0].data, in[1].data, in[2].data, q_rot, kc, vc, p.B, p.T, p.H, p.KVH,
                                                  p.hd, p.max_seq, inv_freq_.data(), DevicePos(in[3]), stream);
    return Cuda("QKVRopeCacheWrite", code);
  }
};

}  // namespace

void AddCudaFusedOps(std::vector<OpDef*>* ops) {
  const char* ep = "CUDAExecutionProvider";
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(new OpDef("SwiGLU", ep, {T, T}, {T}, {false, false}, {false, false}, SwiGLUCuda::Create, 0));
    ops->push_back(UseSwiGLUPackedShape(new OpDef("SwiGLUPacked", ep, {T}, {T}, {false}, {false}, SwiGLUPackedCuda::Create, 0)));
    ops->push_back(NewRMSNormGradOpDef(
        new OpDef("RMSNormGrad", ep, {T, T, T}, {T, FP32}, {false, false, false}, {false, false, false}, RMSNormGradCuda::Create, 0)));
    ops->push_back(new OpDef("SwiGLUGrad", ep, {T, T, T}, {T, T}, {false, false, false}, {false, false, false}, SwiGLUGradCuda::Create, 0));
    ops->push_back(new OpDef("RopeCacheWrite", ep, {T, T, ANY}, {T}, {false, false, false}, {false, false, false},
                             RopeCacheWriteCuda::Create, 1, /*cache_inplace=*/true));
    ops->push_back(new OpDef("AddRMSNorm", ep, {T, T, T}, {T, T}, {false, false, false}, {false, false, false}, AddRMSNormCuda::Create, 0));
    ops->push_back(new OpDef("QKVRopeCacheWrite", ep, {T, T, T, ANY}, {T, T, T}, {false, false, false, false},
                             {false, false, false, false}, QKVRopeCacheWriteCuda::Create, 0));
    ops->back()->UseKvCacheOutputs(/*k_cache_input=*/1);  // outputs 1, 2: the caches (inputs 1, 2), written in place
    UseQkvRopeShapes(ops->back());                        // output 0: [.., T, num_heads * head_dim]
  }
}

}  // namespace mn
