// Fused decode-layer ops (SwiGLU, SwiGLUPacked, SwiGLUGrad, RMSNormGrad, RopeCacheWrite, AddRMSNorm): attribute reading, input checks and the
// kernels' input/output handling shared by the CPU kernels (cpu_fused.cc) and the CUDA glue (cuda_fused_ops.cc).
#pragma once

#include <vector>

#include "op_common.h"

namespace mn {

// SwiGLU: out = silu(gate) * up elementwise; gate and up of one shape and float type (float16/bfloat16
// computed in float32).
OrtStatus* CheckSwiGLU(const Tensor& gate, const Tensor& up);
// SwiGLUPacked: out[.., j] = silu(x[.., j]) * x[.., F + j] for x [.., 2F] (gate|up of a merged product), out
// [.., F]; x of rank >= 1 with an even last dimension, float type (float16/bfloat16 computed in float32).
OrtStatus* CheckSwiGLUPacked(const Tensor& x);
// Input x checked, output [.., F] allocated; rows = numel(x) / 2F (the leading dimensions' product) and F.
OrtStatus* SwiGLUPackedArgs(OrtKernelContext* ctx, Tensor* x, int64_t* rows, int64_t* f, void** out);
// `def` (a SwiGLUPacked registration row) with its output shape inferred as x's with the last dimension halved.
OpDef* UseSwiGLUPackedShape(OpDef* def);
// SwiGLUGrad: SwiGLU's backward, dgate = dy * up * silu'(gate) and dup = dy * silu(gate); gate, up and dy
// of one shape and float type.
OrtStatus* CheckSwiGLUGrad(const Tensor& gate, const Tensor& up, const Tensor& dy);

// RMSNormGrad: dx of RMSNorm per row of x [M, N] (weight [N], dy [M, N], one float type; float32 math)
// and, as the optional second output, dweight [N] = sum over rows of dy * xhat in float32; attribute epsilon > 0.
OrtStatus* ReadRMSNormGradAttrs(const OrtKernelInfo* info, float* epsilon);
OrtStatus* CheckRMSNormGrad(const Tensor& x, const Tensor& weight, const Tensor& dy);
// The registration row's OpDef with dweight (output 1) optional: a node written with dx alone still runs.
inline OpDef* NewRMSNormGradOpDef(OpDef* def) { return OptionalOutputs(def, {false, true}); }
// dweight's float32 buffer (shape of weight), or nullptr when the node has no second output.
inline OrtStatus* RMSNormGradWeightOutput(OrtKernelContext* ctx, const std::vector<int64_t>& shape, float** dw) {
  void* p = nullptr;
  MN_RETURN_IF(GetOptionalOutput(ctx, 1, shape, &p));
  *dw = static_cast<float*>(p);
  return nullptr;
}

// AddRMSNorm: y = rms_norm(sum) * weight and sum = x + residual per row of x [M, K] (residual [M, K], weight [K],
// one float type): the sum is added in float32 and rounded once to the element type, the norm reads that rounded
// sum widened to float32 (a residual add in the model's dtype, then the norm in float32), y rounds once; attribute
// epsilon > 0. Inputs checked, outputs y (0) and sum (1) of x's shape allocated.
OrtStatus* ReadAddRMSNormAttrs(const OrtKernelInfo* info, float* epsilon);
OrtStatus* CheckAddRMSNorm(const Tensor& x, const Tensor& residual, const Tensor& weight);
OrtStatus* AddRMSNormArgs(OrtKernelContext* ctx, Tensor* x, Tensor* residual, Tensor* weight, void** y, void** sum);

// RopeCacheWrite: the cache with rows [kv_pos, kv_pos + T) = rotate-half RoPE of new_kv's rows at
// positions kv_pos + r (what Rope(offset_dyn = kv_pos) followed by CacheWrite does, in one pass).
struct RopeCacheWriteAttrs {
  float theta;
  int64_t head_dim;
  int64_t check_positions = 1;  // see CheckPositionsFlag (op_common.h)
};
OrtStatus* ReadRopeCacheWriteAttrs(const OrtKernelInfo* info, RopeCacheWriteAttrs* a);
struct RopeCacheWriteProblem {
  ONNXTensorElementDataType type;   // float, float16 or bfloat16 (new_kv and cache alike)
  int64_t T, dim, max_seq, kv_pos;  // kv_pos = -1 when not read (host_positions = false)
};
// host_positions = false (CUDA): kv_pos is in device memory; its type and shape are checked, not its value.
OrtStatus* CheckRopeCacheWrite(const RopeCacheWriteAttrs& a, const Tensor& nw, const Tensor& cache, const Tensor& kv_pos,
                               RopeCacheWriteProblem* p, bool host_positions = true);

// The kernels' shared input/output handling (CPU and CUDA), one helper per op:
// SwiGLU: inputs gate, up checked, output `out` of their shape allocated.
OrtStatus* SwiGLUArgs(OrtKernelContext* ctx, Tensor* gate, Tensor* up, void** out);
// SwiGLUGrad: inputs gate, up, dy checked, outputs dgate and dup of their shape allocated.
OrtStatus* SwiGLUGradArgs(OrtKernelContext* ctx, Tensor* gate, Tensor* up, Tensor* dy, void** dgate, void** dup);

// RopeCacheWrite's kernels (CPU, CUDA) derive from this: the attributes and rope frequencies they keep,
// their creation, their inputs.
class RopeCacheWriteKernel : public Kernel {
 protected:
  explicit RopeCacheWriteKernel(const RopeCacheWriteAttrs& a) : a_(a), inv_freq_(a.head_dim / 2) {
    RopeInvFreq(a.theta, a.head_dim, inv_freq_.data());
  }
  template <class K>
  static OrtStatus* CreateAs(const OrtKernelInfo* info, Kernel** out) {
    RopeCacheWriteAttrs a;
    MN_RETURN_IF(ReadRopeCacheWriteAttrs(info, &a));
    *out = new K(a);
    return nullptr;
  }
  // Inputs new_kv, cache and kv_pos.
  static OrtStatus* Inputs(OrtKernelContext* ctx, Tensor* nw, Tensor* cache, Tensor* pos);
  RopeCacheWriteAttrs a_;
  std::vector<float> inv_freq_;
};

void AddCpuFusedOps(std::vector<OpDef*>* ops);
void AddCudaFusedOps(std::vector<OpDef*>* ops);

}  // namespace mn
