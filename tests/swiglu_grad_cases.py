"""Shared cases of the SwiGLUGrad kernel tests (CPU and CUDA): an independent float64 reference, a
two-output one-node model and a typed run (float16 / bfloat16 through IOBinding)."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

OUTPUTS = ("dgate", "dup")
# Half types are read and written in 16 bits and computed in float32: one rounding of the result.
HALF_TOL = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}
ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16, kc.BFLOAT16: TensorProto.BFLOAT16}


def reference(gate: np.ndarray, up: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dgate, dup) of ``gate * sigmoid(gate) * up`` in float64, written from the product rule."""
    g, u, d = (a.astype(np.float64) for a in (gate, up, dy))
    sig = 1.0 / (1.0 + np.exp(-g))
    silu = g * sig
    dsilu = sig + g * sig * (1.0 - sig)  # d/dg of g * sigmoid(g)
    return d * u * dsilu, d * silu


def inputs(shape, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    gate = (rng.standard_normal(shape) * 4).astype(np.float32)
    gate.reshape(-1)[:4] = [-90.0, 90.0, 0.0, -20.0][: gate.size]  # saturated sigmoid on both sides, and 0
    return {"gate": gate, "up": rng.standard_normal(shape).astype(np.float32), "dy": rng.standard_normal(shape).astype(np.float32)}


def model(shape, dtype=np.float32, with_function: bool = True) -> bytes:
    """One ``SwiGLUGrad(gate, up, dy) -> dgate, dup`` node of element type ``dtype``."""
    t = ONNX_TYPE[np.dtype(dtype)]
    ins = [helper.make_tensor_value_info(n, t, list(shape)) for n in ("gate", "up", "dy")]
    outs = [helper.make_tensor_value_info(n, t, list(shape)) for n in OUTPUTS]
    node = helper.make_node("SwiGLUGrad", ["gate", "up", "dy"], list(OUTPUTS), domain=kc.DOMAIN, name="SwiGLUGrad_0")
    graph = helper.make_graph([node], "test_SwiGLUGrad", ins, outs)
    functions = [kc.function_proto("SwiGLUGrad")] if with_function else []
    opsets = [helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)]
    m = helper.make_model(graph, opset_imports=opsets, functions=functions)
    m.ir_version = 10
    return m.SerializeToString()


def run_typed(sess, feeds: dict[str, np.ndarray], dtype) -> list[np.ndarray]:
    """Both outputs of one run in ``dtype``; bfloat16 goes in and out as 16-bit patterns (ORT's numpy
    bridge does not convert it)."""
    dtype = np.dtype(dtype)
    raw = np.uint16 if dtype == kc.BFLOAT16 else dtype
    binding, keep = sess.io_binding(), []
    for name, arr in feeds.items():
        keep.append(ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(arr.view(raw)), ONNX_TYPE[dtype]))
        binding.bind_ortvalue_input(name, keep[-1])
    outs = [np.zeros(feeds["gate"].shape, raw) for _ in OUTPUTS]
    for name, out in zip(OUTPUTS, outs, strict=True):
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(out, ONNX_TYPE[dtype]))
    sess.run_with_iobinding(binding)
    return [o.view(dtype) for o in outs]


def check_half(sess_of, shape, dtype) -> None:
    """A ``dtype`` run of the kernel (``sess_of(model bytes)``) against the float32 math of the rounded
    inputs, within one rounding of the result."""
    feeds = {k: v.astype(dtype) for k, v in inputs(shape, seed=3).items()}
    want = reference(*(feeds[n].astype(np.float32) for n in ("gate", "up", "dy")))
    got = run_typed(sess_of(model(shape, dtype, with_function=False)), feeds, dtype)
    tol = HALF_TOL[np.dtype(dtype)]
    for name, g, w in zip(OUTPUTS, got, want, strict=True):
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=tol, atol=tol, err_msg=name)
