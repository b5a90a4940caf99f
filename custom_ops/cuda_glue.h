// ORT-side helpers of the CUDA kernel classes (cuda_ops.cc, cuda_fused_ops.cc): the compute stream,
// device positions for the kernels, CUDA errors as ORT statuses, and the host read-back of a position.
#pragma once

#include <vector>

#include "cuda_kernels.h"
#include "op_common.h"

namespace mn {

inline OrtStatus* Stream(OrtKernelContext* ctx, void** stream) {
  return g_api->KernelContext_GetGPUComputeStream(ctx, stream);
}

// A [1] or [B] integer input in device memory, for the kernels (types were checked by Check*).
inline MnPos DevicePos(const Tensor& t) {
  if (!t.present) return MnPos{nullptr, MN_POS_NONE, 0};
  const int64_t n = t.numel();
  switch (t.type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return MnPos{t.data, MN_POS_I64, n};
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return MnPos{t.data, MN_POS_I32, n};
    default: return MnPos{t.data, MN_POS_U32, n};
  }
}

// The launchers' element type of a float tensor (MN_F32, MN_F16, MN_BF16).
inline int DType(ONNXTensorElementDataType t) {
  return t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 ? MN_F16 : t == ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 ? MN_BF16 : MN_F32;
}

inline OrtStatus* Cuda(const char* op, int code) {
  if (code == 0) return nullptr;
  return Error(ORT_EP_FAIL, "%s: CUDA error %d (%s)", op, code, mn_cuda_error_string(code));
}

// Device positions read back for the host checks (see the top of cuda_ops.cc). `host` views the
// values as int64 with the input's shape, so Check*(..., host_positions=true) validates them as on the CPU.
// device_only: nothing was read (check_positions = 0, or the stream is capturing a CUDA graph): the
// caller checks types and shapes only and the kernel guards the values on the device.
struct HostPos {
  Tensor host;
  bool device_only = false;
  std::vector<int64_t> values;
};

// At most this many positions are read back (one per sequence of a batch).
constexpr int64_t kMaxReadBack = int64_t(1) << 16;

// `check`: the node's check_positions attribute. 0 skips the read-back and its stream sync (the
// Session that built the graph validated the positions when they were uploaded, per run).
inline OrtStatus* ReadBack(const char* op, const char* arg, const Tensor& t, bool check, void* stream, HostPos* out) {
  out->host = t;
  if (!t.present) return nullptr;
  MN_RETURN_IF(CheckIndexType(op, arg, t));
  if (t.shape.size() > 1 || t.numel() > kMaxReadBack)
    return MN_INVALID("%s: input '%s' must have shape [1] or [batch], got %s", op, arg, ShapeStr(t.shape).c_str());
  if (!check) {
    out->device_only = true;
    return nullptr;
  }
  out->values.assign(static_cast<size_t>(t.numel()), 0);
  int captured = 0;
  MN_RETURN_IF(Cuda(op, mn_cuda_read_pos(DevicePos(t), stream, out->values.data(), &captured)));
  out->device_only = captured != 0;
  out->host.type = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  out->host.data = out->values.data();
  return nullptr;
}

}  // namespace mn
