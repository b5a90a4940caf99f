"""Device buffers stored in float16 or bfloat16, filled from and read into float32 numpy arrays.

numpy has no bfloat16 and ONNX Runtime's Python API cannot update or read a bfloat16 ``OrtValue``
through numpy, so every conversion runs through ONNX Runtime itself: a one-``Cast`` model per
direction, with IOBinding on the session's device. A write casts on the device into the existing
buffer (its address stays, so bindings and captured CUDA graphs stay valid); a read casts into a
float32 buffer and copies that to the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from ..export import IR_VERSION
from ..export.precision import ONNX_TYPE, PRECISIONS

HALF_ITEMSIZE = 2


def _cast_model(src: int, dst: int) -> bytes:
    x = helper.make_tensor_value_info("x", src, None)
    y = helper.make_tensor_value_info("y", dst, None)
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=dst)], "cast", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)
    return model.SerializeToString()


def _without_cuda_graph(providers: Sequence) -> list:
    """``providers`` with CUDA-graph replay turned off. The cast sessions run on a new pair of
    buffers at every call; a captured graph would replay the first call's addresses, so every
    later write would land in the first buffer written."""
    out = []
    for p in providers:
        if isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], dict):
            p = (p[0], {k: v for k, v in p[1].items() if k != "enable_cuda_graph"})
        out.append(p)
    return out


class HalfBuffers:
    """Allocates, writes and reads ``dtype`` ("float16"/"bfloat16") buffers on ``device`` ("cpu"/"cuda")."""

    def __init__(self, dtype: str, device: str, providers: Sequence) -> None:
        if dtype not in ("float16", "bfloat16"):
            raise ValueError(f"HalfBuffers: dtype must be 'float16' or 'bfloat16', got {dtype!r}")
        self.dtype, self.device = dtype, device
        self.onnx_type = ONNX_TYPE[dtype]
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        providers = _without_cuda_graph(providers)
        self._down = ort.InferenceSession(_cast_model(TensorProto.FLOAT, self.onnx_type), opts, providers=providers)
        self._up = ort.InferenceSession(_cast_model(self.onnx_type, TensorProto.FLOAT), opts, providers=providers)

    def new(self, arr: np.ndarray) -> ort.OrtValue:
        """A new device buffer holding ``arr`` (float32 values) rounded to the half type."""
        value = ort.OrtValue.ortvalue_from_shape_and_type(list(np.shape(arr)), self.onnx_type, self.device, 0)
        self.write(value, arr)
        return value

    def write(self, value: ort.OrtValue, arr: np.ndarray) -> None:
        """Overwrite the half buffer ``value`` with ``arr`` (float32, same element count), in place."""
        src = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr, np.float32).reshape(value.shape()), self.device, 0)
        binding = self._down.io_binding()
        binding.bind_ortvalue_input("x", src)
        binding.bind_ortvalue_output("y", value)
        self._down.run_with_iobinding(binding)

    def read(self, value: ort.OrtValue) -> np.ndarray:
        """The half buffer ``value`` as a new float32 numpy array (float16 copied as it is and widened
        on the host; bfloat16, which numpy lacks, cast on the device)."""
        if self.dtype == "float16":
            return np.asarray(value.numpy(), np.float32)
        out = ort.OrtValue.ortvalue_from_shape_and_type(value.shape(), np.float32, self.device, 0)
        binding = self._up.io_binding()
        binding.bind_ortvalue_input("x", value)
        binding.bind_ortvalue_output("y", out)
        self._up.run_with_iobinding(binding)
        return np.array(out.numpy(), copy=True)


def check_precision(precision: str, device: str, providers: Sequence | None, what: str) -> str:
    """``precision`` checked against :data:`PRECISIONS` and the device: tf32 is a CUDA tensor-core mode."""
    if precision not in PRECISIONS:
        raise ValueError(f"{what}: precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if precision == "tf32" and (device != "cuda" or providers is not None):
        raise ValueError(f"{what}: precision='tf32' needs device='cuda' (TF32 is an NVIDIA tensor-core mode), got device={device!r}")
    return precision


def is_half(value: ort.OrtValue) -> bool:
    return value.data_type() in ("tensor(float16)", "tensor(bfloat16)")
