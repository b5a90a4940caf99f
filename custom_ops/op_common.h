// Shared plumbing for the com.meganeura custom ops: a thin layer over the
// ONNX Runtime C API (no C++ wrapper, no exceptions crossing the ABI), input
// validation shared by the CPU and CUDA kernels, and error-status helpers.
#pragma once

#include <onnxruntime_c_api.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mn {

extern const OrtApi* g_api;

// An ORT error status; message is printf-formatted and always starts with the op name.
inline OrtStatus* Error(OrtErrorCode code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return g_api->CreateStatus(code, buf);
}
#define MN_INVALID(...) ::mn::Error(ORT_INVALID_ARGUMENT, __VA_ARGS__)
#define MN_RETURN_IF(expr)              \
  do {                                  \
    OrtStatus* _st = (expr);            \
    if (_st != nullptr) return _st;     \
  } while (0)

std::string ShapeStr(const std::vector<int64_t>& s);

// Largest position (Rope offset, offset_dyn) and head count the kernels accept: with these bounds no
// position + row count and no heads * head_dim product can overflow int64.
constexpr int64_t kMaxPosition = int64_t(1) << 40;
constexpr int64_t kMaxHeads = int64_t(1) << 20;

// One input tensor as the kernel sees it.
struct Tensor {
  bool present = false;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  const float* f32() const { return static_cast<const float*>(data); }
};

// Float element types the Rope/CacheWrite/CachedAttention kernels take (float16 and bfloat16 are
// held in memory as such and computed in float32).
bool IsFloatType(ONNXTensorElementDataType t);
size_t ElementSize(ONNXTensorElementDataType t);

// Reads input `index`; an absent optional input leaves present == false.
OrtStatus* GetInput(OrtKernelContext* ctx, size_t index, Tensor* out);
// Allocates output `index` with `shape` and returns its data pointer.
OrtStatus* GetOutput(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape, float** data);
OrtStatus* GetOutput(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape, void** data);
// An optional output: *data = nullptr when the node does not have it (fewer outputs, or an empty name).
OrtStatus* GetOptionalOutput(OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& shape, void** data);

// Checks the element type and rank of an input, naming op/argument/shape on failure.
OrtStatus* CheckTensor(const char* op, const char* arg, const Tensor& t, ONNXTensorElementDataType type, size_t rank);
// Reads element `i` of an integer index tensor (int64, int32 or uint32) held in host memory.
int64_t IndexAt(const Tensor& t, int64_t i);
OrtStatus* CheckIndexType(const char* op, const char* arg, const Tensor& t);
// Type and shape of a [1] (or scalar) integer tensor, without reading it (it may be device memory).
OrtStatus* CheckScalarIndex(const char* op, const char* arg, const Tensor& t);
// A [1] (or scalar) integer tensor in host memory -> its value.
OrtStatus* ReadScalarIndex(const char* op, const char* arg, const Tensor& t, int64_t* value);
// Type and shape of a per-sequence position tensor: [B] integers (or a scalar / [1] when B == 1),
// without reading it (it may be device memory).
OrtStatus* CheckPositions(const char* op, const char* arg, const Tensor& t, int64_t batch);
// A float input of rank 2 ([rows, width]) or 3 ([batch, rows, width]) of a float type the kernels take.
OrtStatus* CheckFloatTensor(const char* op, const char* arg, const Tensor& t, size_t rank);

OrtStatus* AttrInt(const OrtKernelInfo* info, const char* op, const char* name, int64_t* out, const int64_t* dflt);
OrtStatus* AttrFloat(const OrtKernelInfo* info, const char* op, const char* name, float* out, const float* dflt);

// ---- per-op attributes and validated problem descriptions (shared CPU/CUDA) ----

// check_positions (Rope, CacheWrite, CachedAttention, RopeCacheWrite; default 1): 1 = the kernels validate
// position values on the host (CUDA: a read-back and a stream sync per op, see cuda_ops.cc); 0 = the
// caller validated them (our Session does, per run) and the CUDA kernels rely on their device guards.
// The CPU kernels always validate (no sync to save there). Returns an error unless value is 0 or 1.
OrtStatus* CheckPositionsFlag(const char* op, int64_t value);

struct RopeAttrs {
  float theta;
  int64_t head_dim, offset;
  int64_t check_positions = 1;
  int64_t inverse = 0;  // 1: rotate by the negated angle (rope's VJP; default 0)
};
OrtStatus* ReadRopeAttrs(const OrtKernelInfo* info, RopeAttrs* a);
// X is [S, D] (one sequence) or [B, S, D]; offset_dyn is [1] or [B]: row s of sequence b has position
// offset + offset_dyn[b] + s (offset_dyn[0] for every sequence when it has one element).
struct RopeProblem {
  int64_t B, S, D, head_dim;
  std::vector<int64_t> pos0;  // per sequence (host_positions); a single entry when offset_dyn has one
  ONNXTensorElementDataType type;
};
// host_positions = false (CUDA: offset_dyn is in device memory): types and shapes are checked, the
// values are not read (pos0 = {static offset}; the kernel adds offset_dyn and checks it).
OrtStatus* CheckRope(const RopeAttrs& a, const Tensor& x, const Tensor& offset_dyn, RopeProblem* p, bool host_positions = true);
// inv_freq[j] = powf(theta, -2j/hd) in float32, j < hd/2 (host; passed to the device kernels too).
void RopeInvFreq(float theta, int64_t head_dim, float* inv_freq);

// new [T, dim] with cache [max_seq, dim] and kv_pos [1] (B = 1), or new [B, T, dim] with cache
// [B, max_seq, dim] and kv_pos [B]: sequence b's rows [kv_pos[b], kv_pos[b] + T) are replaced.
struct CacheWriteProblem {
  int64_t B, T, dim, max_seq;
  std::vector<int64_t> kv_pos;  // B entries; empty when not read (host_positions = false)
  ONNXTensorElementDataType type;
};
// host_positions = false: kv_pos is in device memory; its type and shape are checked, not its values.
OrtStatus* CheckCacheWrite(const Tensor& nw, const Tensor& cache, const Tensor& kv_pos, CacheWriteProblem* p,
                           bool host_positions = true);

struct AttnAttrs {
  int64_t num_heads, num_kv_heads, head_dim;
  int64_t check_positions = 1;
};
OrtStatus* ReadAttnAttrs(const OrtKernelInfo* info, AttnAttrs* a);
// The ranges and relation of the attributes read (errors name `op`).
OrtStatus* CheckAttnAttrs(const char* op, const AttnAttrs& a);
// Q [T, H*hd] with K/V [max_seq, KVH*hd] and kv_pos [1], or Q [B, T, H*hd] with K/V
// [B, max_seq, KVH*hd] and kv_pos [B]: query row t of sequence b attends to its rows [0, kv_pos[b] + t].
struct AttnProblem {
  int64_t B, T, H, KVH, hd, max_seq;
  std::vector<int64_t> kv_pos;  // B entries; empty when not read (host_positions = false)
  ONNXTensorElementDataType type;
};
// `op`: the name errors give (RopeCachedAttention checks its q and caches here too).
OrtStatus* CheckCachedAttention(const AttnAttrs& a, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& kv_pos, AttnProblem* p, bool host_positions = true,
                                const char* op = "CachedAttention");

struct ScatterAddProblem {
  int64_t N, D, num_rows;
};
// Validates shapes and, with host_indices (indices in host memory), every index.
OrtStatus* CheckScatterAdd(int64_t num_rows, const Tensor& idx, const Tensor& src, ScatterAddProblem* p,
                           bool host_indices = true);

// GreedyStep: logits [B, V] (float32, float16 or bfloat16), kv_pos uint32 [B], token_log uint32 [B, n].
struct GreedyStepProblem {
  int64_t B, V, n;
};
OrtStatus* CheckGreedyStep(const Tensor& logits, const Tensor& kv_pos, const Tensor& token_log, GreedyStepProblem* p);
// A GreedyStep call: its inputs read and checked, its three outputs allocated (the CPU and CUDA kernels' common part).
struct GreedyStepCall {
  Tensor logits, kv_pos, token_log;
  GreedyStepProblem p;
  uint32_t *token, *next_pos, *next_log;
};
OrtStatus* PrepareGreedyStep(OrtKernelContext* ctx, GreedyStepCall* c);

// ---- the op descriptor: an OrtCustomOp filled from a table row ----

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual OrtStatus* Compute(OrtKernelContext* ctx) = 0;
};
using KernelFactory = OrtStatus* (*)(const OrtKernelInfo* info, Kernel** out);

struct OpDef : OrtCustomOp {
  const char* name;
  const char* ep;
  std::vector<ONNXTensorElementDataType> in_types, out_types;
  std::vector<bool> in_optional;
  std::vector<bool> in_cpu;  // input lives in host memory even on a GPU provider
  KernelFactory factory;
  bool cache_inplace;  // output 0 may reuse input 1 (CacheWrite)
  // Output 0's type/shape: that of input `shape_from` (>= 0), or ScatterAdd's [num_rows, src.shape[1]] (-1).
  int shape_from;
  std::vector<bool> out_optional;  // empty: every output required (see OptionalOutputs)
  // RopeCachedAttention: outputs 1 and 2 are inputs 3 and 4 (the K and V caches), with their shapes; each
  // may reuse its cache's buffer (written in place). DecodeLayer: inputs 10 and 11; GreedyStep: 1 and 2 (the
  // position and the token log). Set by UseKvCacheOutputs after construction.
  bool kv_cache_outputs = false;
  size_t kv_cache_input = 3;  // the K cache's input index (the V cache follows it)
  void UseKvCacheOutputs(size_t k_cache_input = 3);
  OpDef(const char* name, const char* ep, std::vector<ONNXTensorElementDataType> in,
        std::vector<ONNXTensorElementDataType> out, std::vector<bool> optional, std::vector<bool> cpu_inputs,
        KernelFactory factory, int shape_from, bool cache_inplace = false);
};

// `def` with the outputs flagged in `optional` declared optional (a node may leave them out); returns `def`.
OpDef* OptionalOutputs(OpDef* def, std::vector<bool> optional);

// Number of times a CacheWrite kernel had to copy the whole cache because ORT gave it an
// output buffer distinct from the cache input (exported for tests as MeganeuraCacheWriteFullCopies).
// Shape inference: output `out` typed and shaped like input `in` with its last dimension replaced by `last`
// (> 0), halved (kHalveLast; unknown or odd: the output stays unknown) or kept (0). An unknown input, a rank
// outside [min_rank, max_rank] or an unnamed symbolic dimension leave the output unknown (ORT then sizes it
// at run time, and the kernel reports a bad input).
constexpr int64_t kHalveLast = -1;
OrtStatus* SetShapeLikeInput(OrtShapeInferContext* ctx, size_t in, size_t out, int64_t last, size_t min_rank, size_t max_rank);

void CountCacheCopy();

// Appends the CPU op definitions (and, in the CUDA library, the CUDA ones).
void AddCpuOps(std::vector<OpDef*>* ops);
void AddCudaOps(std::vector<OpDef*>* ops);
// AdamUpdate (optim_kernels.cc): the multi-tensor Adam/AdamW update on the CPU; the op descriptor
// (variadic inputs/outputs, output shapes) for any EP's kernel (the CUDA one: cuda_optim_ops.cc).
void AddCpuOptimOps(std::vector<OpDef*>* ops);
OpDef* NewAdamUpdateOpDef(const char* ep, KernelFactory factory);
// AdamUpdate's inputs: kAdamHyper [1] hyper-parameters, then (p, g, m, v) per parameter; outputs
// (p', m', v') per parameter. Checks the counts (CPU and CUDA) and gives the number of parameters.
constexpr size_t kAdamHyper = 6;
OrtStatus* AdamUpdateArity(OrtKernelContext* ctx, size_t* n_params);
void AddCudaOptimOps(std::vector<OpDef*>* ops);

}  // namespace mn
