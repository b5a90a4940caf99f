// ORT-side helpers of the CUDA kernel classes (cuda_ops.cc, cuda_fused_ops.cc): the compute stream,
// device positions for the kernels, CUDA errors as ORT statuses, and the host read-back of a position.
#pragma once

#include "cuda_kernels.h"
#include "op_common.h"

namespace mn {

inline OrtStatus* Stream(OrtKernelContext* ctx, void** stream) {
  return g_api->KernelContext_GetGPUComputeStream(ctx, stream);
}

// A [1] integer input in device memory, for the kernels (types were checked by Check*).
inline MnPos DevicePos(const Tensor& t) {
  if (!t.present) return MnPos{nullptr, MN_POS_NONE};
  switch (t.type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return MnPos{t.data, MN_POS_I64};
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return MnPos{t.data, MN_POS_I32};
    default: return MnPos{t.data, MN_POS_U32};
  }
}

inline OrtStatus* Cuda(const char* op, int code) {
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

inline OrtStatus* ReadBack(const char* op, const char* arg, const Tensor& t, void* stream, HostPos* out) {
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

}  // namespace mn
