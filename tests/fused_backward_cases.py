"""Shared cases of the fused backward kernel tests (SwiGLUGrad, RMSNormGrad; CPU and CUDA): float64
references, one-node models and typed runs (float16 / bfloat16 through IOBinding)."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from meganeura_onnx.ops.norm import rms_norm_grad_ref

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


RMS_EPS = 1e-5


def rms_inputs(shape, seed: int = 0) -> dict[str, np.ndarray]:
    """x with a near-zero row (eps matters) and a large one, weight around 1, dy."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0] *= 1e-3
    x[-1] *= 30.0 if shape[0] > 1 else 1.0
    w = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32)
    return {"x": x, "weight": w, "dy": rng.standard_normal(shape).astype(np.float32)}


def rms_reference(x: np.ndarray, weight: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dweight) in float64 (the op table's reference, itself checked against finite differences)."""
    return rms_norm_grad_ref(*(a.astype(np.float64) for a in (x, weight, dy)), RMS_EPS)


# op -> (input maker, float64 reference, output names, attributes)
OPS = {
    "SwiGLUGrad": (inputs, reference, OUTPUTS, {}),
    "RMSNormGrad": (rms_inputs, rms_reference, ("dx", "dweight"), {"epsilon": RMS_EPS}),
}
FLOAT32_OUTPUTS = {"dweight"}  # float32 whatever type the op runs in


def output_shapes(op: str, feeds: dict[str, np.ndarray]) -> list[list[int]]:
    """Each output's shape: the first input's (x / gate), dweight that of weight."""
    first = list(next(iter(feeds.values())).shape)
    return [list(feeds["weight"].shape) if name == "dweight" else first for name in OPS[op][2]]


def model(op: str, feeds: dict[str, np.ndarray], dtype=np.float32, with_function: bool = True) -> bytes:
    """One ``op(feeds...) -> outputs`` node of element type ``dtype`` (:func:`output_shapes`; dweight float32)."""
    _, _, outputs, attrs = OPS[op]
    t = ONNX_TYPE[np.dtype(dtype)]
    ins = [helper.make_tensor_value_info(n, t, list(a.shape)) for n, a in feeds.items()]
    outs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT if n in FLOAT32_OUTPUTS else t, shape)
        for n, shape in zip(outputs, output_shapes(op, feeds), strict=True)
    ]
    node = helper.make_node(op, list(feeds), list(outputs), domain=kc.DOMAIN, name=f"{op}_0", **attrs)
    graph = helper.make_graph([node], f"test_{op}", ins, outs)
    functions = [kc.function_proto(op)] if with_function else []
    opsets = [helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)]
    m = helper.make_model(graph, opset_imports=opsets, functions=functions)
    m.ir_version = 10
    return m.SerializeToString()


def case(op: str, shape, seed: int = 0) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, ...]]:
    make, ref, _, _ = OPS[op]
    feeds = make(shape, seed)
    return feeds, ref(*feeds.values())


def run_typed(sess, op: str, feeds: dict[str, np.ndarray], dtype) -> list[np.ndarray]:
    """The outputs of one run in ``dtype``; bfloat16 goes in and out as 16-bit patterns (ORT's numpy
    bridge does not convert it)."""
    dtype = np.dtype(dtype)
    raw = np.uint16 if dtype == kc.BFLOAT16 else dtype
    binding, keep = sess.io_binding(), []
    for name, arr in feeds.items():
        keep.append(ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(arr.view(raw)), ONNX_TYPE[dtype]))
        binding.bind_ortvalue_input(name, keep[-1])
    names = OPS[op][2]
    kinds = [np.dtype(np.float32) if n in FLOAT32_OUTPUTS else dtype for n in names]
    outs = [np.zeros(shape, np.uint16 if k == kc.BFLOAT16 else k) for shape, k in zip(output_shapes(op, feeds), kinds, strict=True)]
    for name, out, k in zip(names, outs, kinds, strict=True):
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(out, ONNX_TYPE[k]))
    sess.run_with_iobinding(binding)
    return [o.view(k) for o, k in zip(outs, kinds, strict=True)]


def dweight_terms(feeds: dict[str, np.ndarray]) -> np.ndarray:
    """Sum over the rows of |dy * x * r|: the scale of dweight's float32 rounding (a sum of rows terms)."""
    x, w, dy = (v.astype(np.float32) for v in feeds.values())
    return rms_reference(np.abs(x), w, np.abs(dy))[1]


def check_float32(sess_of, op: str, shape, rtol: float = 1e-5, atol: float = 1e-5) -> list[np.ndarray]:
    """A float32 run of ``op`` (``sess_of(model bytes)``) against the float64 reference; returns the
    outputs. dweight, a float32 sum over the rows, within 1e-6 of its terms' magnitudes (about 8 ulps
    of the sum of |terms|, far below any wrong term)."""
    feeds, want = case(op, shape)
    got = sess_of(model(op, feeds)).run(None, feeds)
    for name, g, w in zip(OPS[op][2], got, want, strict=True):
        assert g.dtype == np.float32 and g.shape == w.shape, (name, g.dtype, g.shape)
        tol = np.maximum(atol, 1e-6 * dweight_terms(feeds)) if name == "dweight" else atol
        err = np.abs(g.astype(np.float64) - w) - (tol + rtol * np.abs(w))
        worst = np.unravel_index(np.argmax(err), err.shape)
        assert err[worst] <= 0, f"{op}.{name} at {worst}: got {g[worst]}, want {w[worst]}"
    return got


def check_half(sess_of, op: str, shape, dtype) -> None:
    """A ``dtype`` run of ``op`` (``sess_of(model bytes)``) against the float64 math of the rounded
    inputs, within one rounding of the result (relative to the output's scale for the row kernel);
    dweight (float32, from the rounded inputs) as in :func:`check_float32`."""
    make, ref, names, _ = OPS[op]
    feeds = {k: v.astype(dtype) for k, v in make(shape, 3).items()}
    want = ref(*(v.astype(np.float32) for v in feeds.values()))
    got = run_typed(sess_of(model(op, feeds, dtype, with_function=False)), op, feeds, dtype)
    tol = HALF_TOL[np.dtype(dtype)]
    for name, g, w in zip(names, got, want, strict=True):
        if name == "dweight":
            err = np.abs(g.astype(np.float64) - w) - 1e-6 * (dweight_terms(feeds) + 1.0)  # float32 sums, as check_float32
        else:
            scale = np.abs(w).max(axis=-1, keepdims=True) if op == "RMSNormGrad" else 1.0  # dx = r * gx - x * c: a difference
            err = np.abs(g.astype(np.float64) - w) - tol * (np.abs(w) + scale)
        worst = np.unravel_index(np.argmax(err), err.shape)
        assert err[worst] <= 0, f"{op}.{name} [{dtype}] at {worst}: got {g[worst]}, want {w[worst]} (tol {tol})"
