// RopeCachedAttention: a decode step's rope, cache writes and attention in one op. Attribute reading
// and input checks shared by the CPU kernel (cpu_rope_attention.cc) and the CUDA glue (cuda_ops.cc).
//
//   k_cache' = k_cache with rows [kv_pos[b], kv_pos[b] + T) of sequence b = Rope(k_new) at those positions
//   v_cache' = v_cache with the same rows = v_new
//   out      = CachedAttention(Rope(q) at positions kv_pos[b] + t, k_cache', v_cache', kv_pos)
//
// q [T, H*hd], k_new/v_new [T, KVH*hd], caches [max_seq, KVH*hd], kv_pos [1]; or the batched forms
// [B, T, ...], [B, max_seq, ...], kv_pos [B]. Outputs 1 and 2 are the caches, written in place when ORT
// hands the kernel the input buffers (OpDef::UseKvCacheOutputs), else copied first.
#pragma once

#include <vector>

#include "cpu_pool.h"
#include "op_common.h"

namespace mn {

struct RopeAttnAttrs {
  AttnAttrs heads;  // num_heads, num_kv_heads, head_dim, check_positions
  float theta;
};
OrtStatus* ReadRopeAttnAttrs(const OrtKernelInfo* info, RopeAttnAttrs* a);

// What the rope + cache kernels hold (RopeCachedAttention on the CPU, QKVRopeCacheWrite on the CPU and
// CUDA): the attributes and the rope's inverse frequencies, made as RopeCacheWriteKernel makes its own.
// CreateAs<K, Read>: the attributes read by Read (each op checks its own), then new K(attributes).
class RopeAttnKernel : public Kernel {
 protected:
  explicit RopeAttnKernel(const RopeAttnAttrs& a) : a_(a), inv_freq_(a.heads.head_dim / 2) {
    RopeInvFreq(a.theta, a.heads.head_dim, inv_freq_.data());
  }
  template <class K, OrtStatus* (*Read)(const OrtKernelInfo*, RopeAttnAttrs*)>
  static OrtStatus* CreateAs(const OrtKernelInfo* info, Kernel** out) {
    RopeAttnAttrs a;
    MN_RETURN_IF(Read(info, &a));
    *out = new K(a);
    return nullptr;
  }
  RopeAttnAttrs a_;
  std::vector<float> inv_freq_;
};
// The attention problem of q and the caches (AttnProblem: kv_pos read when host_positions), and
// k_new/v_new checked against it.
OrtStatus* CheckRopeCachedAttention(const RopeAttnAttrs& a, const Tensor& q, const Tensor& k_new, const Tensor& v_new,
                                    const Tensor& k_cache, const Tensor& v_cache, const Tensor& kv_pos, AttnProblem* p,
                                    bool host_positions = true);

// The CPU CachedAttention kernel's work (cpu_kernels.cc) on checked inputs of p.type, for the fused op.
OrtStatus* CachedAttentionCpuRun(const Pool& pool, const AttnProblem& p, const void* q, const void* k, const void* v,
                                 void* out);

// The CPU kernel's work on checked inputs (host memory) of p.type: sequence b's k_new/v_new rows rotated
// (by inv_freq: RopeInvFreq's hd/2 values) and copied into the caches kc/vc at rows kv_pos[b] + t (after
// copying k_cache/v_cache into them unless they are the same buffers), then the rotated q's attention
// into out. DecodeLayer's CPU kernel runs it on its q/k/v temporaries.
OrtStatus* RopeCachedAttentionCpuRun(const Pool& pool, const AttnProblem& p, const float* inv_freq, const void* q,
                                     const void* k_new, const void* v_new, const void* k_cache, const void* v_cache, void* out,
                                     void* kc, void* vc);

// QKVRopeCacheWrite: a prefill's merged q/k/v product placed in one op (the same attributes as
// RopeCachedAttention, errors under its own name).
//
//   qkv [T, (H + 2*KVH)*hd] = q | k | v side by side (or [B, T, ...]), caches [max_seq, KVH*hd] (or [B, max_seq, ...])
//   q_rot    = Rope(q) at positions kv_pos[b] + t, rounded to the element type   (output 0, [.., T, H*hd])
//   k_cache' = k_cache with rows kv_pos[b] + t = Rope(k) there                     (output 1, in place)
//   v_cache' = v_cache with those rows = v                                          (output 2, in place)
struct QkvRopeProblem {
  int64_t B, T, H, KVH, hd, max_seq;
  std::vector<int64_t> kv_pos;  // B entries; empty when not read (host_positions = false)
  ONNXTensorElementDataType type;
  std::vector<int64_t> q_shape;  // output 0's shape
};
OrtStatus* ReadQkvRopeAttrs(const OrtKernelInfo* info, RopeAttnAttrs* a);
// Types, shapes and (host_positions) every position: 0 <= kv_pos[b] <= max_seq - T, so no row is read or
// written outside the inputs.
OrtStatus* CheckQkvRopeCacheWrite(const RopeAttnAttrs& a, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                                  const Tensor& kv_pos, QkvRopeProblem* p, bool host_positions = true);
// QKVRopeCacheWrite's output shapes for ORT (after UseKvCacheOutputs(1)): output 0 [.., T, num_heads * head_dim]
// (read from the attributes), outputs 1 and 2 the caches'.
void UseQkvRopeShapes(OpDef* def);

void AddCpuRopeAttentionOps(std::vector<OpDef*>* ops);

}  // namespace mn
