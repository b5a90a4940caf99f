// CUDAExecutionProvider registrations of the com.meganeura ops. ORT API code only (g++);
// the kernels are in cuda_kernels.cu behind the plain C launchers of cuda_kernels.h.
// Positions (Rope's offset_dyn, kv_pos) are device-memory inputs: the kernels read them on the GPU
// (no Memcpy node, CUDA-graph capturable). With check_positions = 1 (the attribute's default: an
// ONNX file run by any ONNX Runtime with this library) each position is also read back and validated
// here exactly as on the CPU (an ORT error naming the op and the values), outside graph capture; the
// read-back synchronises the stream, once per op. With check_positions = 0 (the graphs our Session
// builds: it validates every position input itself, on upload and against each run's shapes) and
// under capture (no sync allowed) nothing is read back: the kernels guard on the device, writing
// NaN (Rope, CachedAttention) or nothing (CacheWrite, RopeCacheWrite) for an invalid position.
// ScatterAdd's indices (training: the embedding gradient; the Session checks token ids on upload)
// are device memory too, read back and validated the same way when check_positions = 1, outside
// capture; otherwise an index out of range makes the output NaN.
#include <vector>

#include "cuda_glue.h"
#include "cuda_kernels.h"
#include "fused_ops.h"
#include "flash_ops.h"
#include "decode_layer.h"
#include "decode_linear.h"
#include "losses_ops.h"
#include "rope_attention.h"
#include "op_common.h"

namespace mn {
namespace {

constexpr auto F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr auto F16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto BF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
constexpr auto ANY = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
constexpr auto U32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32;

class RopeCuda : public Kernel {
 public:
  explicit RopeCuda(const RopeAttrs& a) : a_(a), inv_freq_(a.head_dim / 2) {
    RopeInvFreq(a.theta, a.head_dim, inv_freq_.data());
    if (a.inverse)  // the negated angle: sincosf is odd in its argument, so cos stays and sin is negated
      for (float& f : inv_freq_) f = -f;
  }
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
    MN_RETURN_IF(CheckFloatTensor("Rope", "X", x, x.shape.size() == 3 ? 3 : 2));
    HostPos h;
    MN_RETURN_IF(ReadBack("Rope", "offset_dyn", off, a_.check_positions != 0, stream, &h));
    MN_RETURN_IF(CheckRope(a_, x, h.device_only ? off : h.host, &p, /*host_positions=*/!h.device_only));
    void* y = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, x.shape, &y));
    // the kernel adds offset_dyn itself, read on the device
    return Cuda("Rope", mn_cuda_rope(DType(p.type), x.data, y, p.B, p.S, p.D, p.head_dim, a_.offset, DevicePos(off),
                                     inv_freq_.data(), stream));
  }

 private:
  RopeAttrs a_;
  std::vector<float> inv_freq_;
};

class CacheWriteCuda : public Kernel {
 public:
  explicit CacheWriteCuda(bool check_positions) : check_positions_(check_positions) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    const int64_t one = 1;
    int64_t check = 1;
    MN_RETURN_IF(AttrInt(info, "CacheWrite", "check_positions", &check, &one));
    MN_RETURN_IF(CheckPositionsFlag("CacheWrite", check));
    *out = new CacheWriteCuda(check != 0);
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
    MN_RETURN_IF(ReadBack("CacheWrite", "kv_pos", pos, check_positions_, stream, &h));
    CacheWriteProblem p;
    MN_RETURN_IF(CheckCacheWrite(nw, cache, h.device_only ? pos : h.host, &p, /*host_positions=*/!h.device_only));
    void* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, cache.shape, &out));
    if (out != cache.data && p.B * p.max_seq * p.dim > 0) CountCacheCopy();
    return Cuda("CacheWrite", mn_cuda_cache_write(ElementSize(p.type), nw.data, cache.data, out, p.B, p.T, p.dim, p.max_seq,
                                                  DevicePos(pos), stream));
  }

 private:
  bool check_positions_;
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
    MN_RETURN_IF(ReadBack("CachedAttention", "kv_pos", pos, a_.check_positions != 0, stream, &h));
    AttnProblem p;
    MN_RETURN_IF(CheckCachedAttention(a_, q, k, v, h.device_only ? pos : h.host, &p, /*host_positions=*/!h.device_only));
    if (p.B * p.T > 65535 || p.B * p.T * p.H > (int64_t(1) << 31) - 1)
      return MN_INVALID("CachedAttention: batch %lld x T %lld x num_heads %lld is too large for the CUDA kernel", (long long)p.B,
                        (long long)p.T, (long long)p.H);
    void* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, q.shape, &out));
    return Cuda("CachedAttention", mn_cuda_cached_attention(DType(p.type), q.data, k.data, v.data, out, p.B, p.T, p.H, p.KVH, p.hd,
                                                            p.max_seq, DevicePos(pos), scratch_, stream));
  }

 private:
  AttnAttrs a_;
  MnScratch* scratch_;  // split-K partials and counters / generic scores: allocated once per shape and stream, then reused
};

// RopeCachedAttention (rope_attention.h): one kernel for the decode step's rope, cache writes and attention.
class RopeCachedAttentionCuda : public Kernel {
 public:
  explicit RopeCachedAttentionCuda(const RopeAttnAttrs& a)
      : a_(a), inv_freq_(a.heads.head_dim / 2), scratch_(mn_cuda_scratch_new()), rope_scratch_(mn_cuda_scratch_new()) {
    RopeInvFreq(a.theta, a.heads.head_dim, inv_freq_.data());
  }
  ~RopeCachedAttentionCuda() override {
    mn_cuda_scratch_free(scratch_);
    mn_cuda_scratch_free(rope_scratch_);
  }
  RopeCachedAttentionCuda(const RopeCachedAttentionCuda&) = delete;
  RopeCachedAttentionCuda& operator=(const RopeCachedAttentionCuda&) = delete;
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    RopeAttnAttrs a;
    MN_RETURN_IF(ReadRopeAttnAttrs(info, &a));
    if (a.heads.head_dim / 2 > MN_ROPE_MAX_HALF)
      return MN_INVALID("RopeCachedAttention: head_dim %lld exceeds the CUDA kernel's limit %d", (long long)a.heads.head_dim,
                        2 * MN_ROPE_MAX_HALF);
    *out = new RopeCachedAttentionCuda(a);
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    Tensor in[6];  // q, k_new, v_new, k_cache, v_cache, kv_pos
    for (size_t i = 0; i < 6; ++i) MN_RETURN_IF(GetInput(ctx, i, &in[i]));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    HostPos h;
    MN_RETURN_IF(ReadBack("RopeCachedAttention", "kv_pos", in[5], a_.heads.check_positions != 0, stream, &h));
    AttnProblem p;
    MN_RETURN_IF(CheckRopeCachedAttention(a_, in[0], in[1], in[2], in[3], in[4], h.device_only ? in[5] : h.host, &p,
                                          /*host_positions=*/!h.device_only));
    if (p.B * p.T > 65535 || p.B * p.T * p.H > (int64_t(1) << 31) - 1)
      return MN_INVALID("RopeCachedAttention: batch %lld x T %lld x num_heads %lld is too large for the CUDA kernel", (long long)p.B,
                        (long long)p.T, (long long)p.H);
    void *out = nullptr, *kc = nullptr, *vc = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, in[0].shape, &out));
    MN_RETURN_IF(GetOutput(ctx, 1, in[3].shape, &kc));
    MN_RETURN_IF(GetOutput(ctx, 2, in[4].shape, &vc));
    if (p.B * p.max_seq * p.KVH > 0) {
      if (kc != in[3].data) CountCacheCopy();
      if (vc != in[4].data) CountCacheCopy();
    }
    return Cuda("RopeCachedAttention",
                mn_cuda_rope_cached_attention(DType(p.type), in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, out, kc, vc, p.B,
                                              p.T, p.H, p.KVH, p.hd, p.max_seq, DevicePos(in[5]), inv_freq_.data(), scratch_,
                                              rope_scratch_, stream));
  }

 private:
  RopeAttnAttrs a_;
  std::vector<float> inv_freq_;
  MnScratch* scratch_;       // the split-K workspace, as CachedAttention's
  MnScratch* rope_scratch_;  // the two-kernel path's rotated queries
};

class ScatterAddCuda : public Kernel {
 public:
  ScatterAddCuda(int64_t n, bool check) : num_rows_(n), check_indices_(check) {}
  static OrtStatus* Create(const OrtKernelInfo* info, Kernel** out) {
    int64_t n = 0;
    MN_RETURN_IF(AttrInt(info, "ScatterAdd", "num_rows", &n, nullptr));
    if (n < 1) return MN_INVALID("ScatterAdd: attribute num_rows must be >= 1, got %lld", (long long)n);
    const int64_t one = 1;
    int64_t check = 1;
    MN_RETURN_IF(AttrInt(info, "ScatterAdd", "check_positions", &check, &one));
    MN_RETURN_IF(CheckPositionsFlag("ScatterAdd", check));
    *out = new ScatterAddCuda(n, check != 0);
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
    // With check_positions = 1, outside CUDA-graph capture, the indices are read back and every one
    // is validated as on the CPU (an ORT error naming the index); otherwise the kernel guards on the
    // device (an index out of range makes the output NaN).
    if (check_indices_) {
      const size_t width = idx.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 ? 8 : 4;
      std::vector<int64_t> host(static_cast<size_t>(p.N));  // 8 bytes per index: room for any width
      int captured = 0;
      MN_RETURN_IF(Cuda("ScatterAdd", mn_cuda_read_indices(idx.data, width * p.N, host.data(), stream, &captured)));
      if (!captured) {
        Tensor on_host = idx;
        on_host.data = host.data();
        MN_RETURN_IF(CheckScatterAdd(num_rows_, on_host, src, &p));
      }
    }
    float* out = nullptr;
    MN_RETURN_IF(GetOutput(ctx, 0, {p.num_rows, p.D}, &out));
    return Cuda("ScatterAdd", mn_cuda_scatter_add_f32(DevicePos(idx), src.f32(), out, p.N, p.D, p.num_rows, stream));
  }

 private:
  int64_t num_rows_;
  bool check_indices_;  // the node's check_positions
};

// A greedy decode step in one launch (mn_cuda_greedy_step): every input in device memory, nothing read
// back (CUDA-graph capturable); the checks are of shapes and types only (the kernel clamps the column).
class GreedyStepCuda : public Kernel {
 public:
  GreedyStepCuda() : scratch_(mn_cuda_scratch_new()) {}
  ~GreedyStepCuda() override { mn_cuda_scratch_free(scratch_); }
  static OrtStatus* Create(const OrtKernelInfo*, Kernel** out) {
    *out = new GreedyStepCuda;
    return nullptr;
  }
  OrtStatus* Compute(OrtKernelContext* ctx) override {
    GreedyStepCall c;
    MN_RETURN_IF(PrepareGreedyStep(ctx, &c));
    void* stream = nullptr;
    MN_RETURN_IF(Stream(ctx, &stream));
    return Cuda("GreedyStep", mn_cuda_greedy_step(DType(c.logits.type), c.logits.data, c.p.B, c.p.V, static_cast<const uint32_t*>(c.kv_pos.data),
                                                  static_cast<const uint32_t*>(c.token_log.data), c.p.n, c.token, c.next_pos, c.next_log,
                                                  scratch_, stream));
  }

 private:
  MnScratch* scratch_;  // each row's running maximum between its slices' blocks
};

}  // namespace

void AddCudaOps(std::vector<OpDef*>* ops) {
  const char* ep = "CUDAExecutionProvider";
  // in_cpu: every position and index is in device memory (no Memcpy node: CUDA-graph capturable).
  for (const auto T : {F32, F16, BF16}) {  // one registration per element type (the table's half_types)
    ops->push_back(new OpDef("Rope", ep, {T, ANY}, {T}, {false, true}, {false, false}, RopeCuda::Create, 0));
    ops->push_back(new OpDef("CacheWrite", ep, {T, T, ANY}, {T}, {false, false, false}, {false, false, false},
                             CacheWriteCuda::Create, 1, /*cache_inplace=*/true));
    ops->push_back(new OpDef("CachedAttention", ep, {T, T, T, ANY}, {T}, {false, false, false, false},
                             {false, false, false, false}, CachedAttentionCuda::Create, 0));
    ops->push_back(new OpDef("RopeCachedAttention", ep, {T, T, T, T, T, ANY}, {T, T, T}, {false, false, false, false, false, false},
                             {false, false, false, false, false, false}, RopeCachedAttentionCuda::Create, 0));
    ops->back()->UseKvCacheOutputs();  // outputs 1, 2: the caches (inputs 3, 4), written in place
  }
  ops->push_back(new OpDef("ScatterAdd", ep, {ANY, F32}, {F32}, {false, false}, {false, false}, ScatterAddCuda::Create, -1));
  for (const auto T : {F32, F16, BF16}) {
    ops->push_back(new OpDef("GreedyStep", ep, {T, U32, U32}, {U32, U32, U32}, {false, false, false}, {false, false, false},
                             GreedyStepCuda::Create, 1));
    ops->back()->UseKvCacheOutputs(1);  // outputs 1, 2: kv_pos's and token_log's shapes (may be updated in place)
  }
  AddCudaOptimOps(ops);  // AdamUpdate (cuda_optim_ops.cc)
  AddCudaFusedOps(ops);  // SwiGLU, SwiGLUGrad, RMSNormGrad, RopeCacheWrite, AddRMSNorm, QKVRopeCacheWrite (cuda_fused_ops.cc)
  AddCudaDecodeLinearOps(ops);  // RMSNormLinear, RMSNormSwiGLU (cuda_decode_linear_ops.cc)
  AddCudaDecodeLayerOps(ops);   // DecodeLayer (cuda_decode_layer_ops.cc)
  AddCudaFlashOps(ops);  // FlashAttention, FlashAttentionGrad (cuda_flash_ops.cc)
  AddCudaLossOps(ops);   // SparseCrossEntropy, SparseCrossEntropyGrad (cuda_losses_ops.cc)
}

}  // namespace mn
