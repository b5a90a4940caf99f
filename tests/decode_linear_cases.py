"""Cases, float64 references and one-node models of RMSNormLinear / RMSNormSwiGLU / LinearResidual / AddRMSNorm,
shared by the CPU and the CUDA kernel tests (``test_decode_linear_kernels.py``, ``test_decode_linear_gpu.py``,
``test_add_rms_norm_kernels.py``, ``test_add_rms_norm_gpu.py``)."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
from onnx import TensorProto, helper

from meganeura_onnx.ops.decode_linear import (
    add_rms_norm_function,
    linear_residual_function,
    overload,
    rms_norm_linear_function,
    rms_norm_swiglu_function,
)

EPS = 1e-5
ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16, kc.BFLOAT16: TensorProto.BFLOAT16}
# (M, K, output widths, trans_b): decode rows (1) and a batch (8), odd K and N, both weight layouts
LINEAR = [
    (1, 64, (64, 16, 16), True),  # q, k, v of a small GQA layer
    (8, 33, (7, 5), False),
    (8, 40, (24,), True),
    (3, 17, (9, 9, 3), True),
    (16, 48, (130,), False),  # several column chunks
    (1, 576, (576, 192, 192), True),  # SmolLM2-135M's q/k/v
    (1, 576, (576, 192, 192), False),  # the same [in, out] (the CPU runner's layout): weights in row blocks
    (2, 70, (4100, 9), False),  # several column slices of a wide weight, K in blocks of a ragged last one
]
SWIGLU = [(1, 64, 96, True), (8, 33, 17, False), (5, 40, 130, True), (8, 576, 1536, True), (1, 576, 1536, False), (3, 90, 2100, False)]
# (M, K, N, trans_b) of LinearResidual: SmolLM2-135M's o_proj and down_proj at one row and 16, odd sizes
RESIDUAL = [
    (1, 576, 576, True),
    (16, 1536, 576, True),
    (8, 33, 7, False),
    (3, 17, 130, True),
    (16, 48, 1030, False),
    (1, 1536, 576, False),
    (4, 150, 2090, False),
]

# (M, K) of AddRMSNorm: one row, odd widths, a prefill of SmolLM2-135M (128 rows of 576), a wide row
ADD_NORM = [(1, 8), (3, 17), (7, 33), (128, 576), (5, 1000), (2, 4099)]


def weights(rng, m: int, k: int, widths, trans_b: bool) -> dict[str, np.ndarray]:
    """x [M, K], gamma [K] and the weights (scaled by 1/sqrt(K): outputs of order one), float32."""
    out = {"x": rng.standard_normal((m, k)).astype(np.float32), "gamma": rng.uniform(0.5, 1.5, k).astype(np.float32)}
    for j, n in enumerate(widths):
        out[f"w{j}"] = (rng.standard_normal((n, k) if trans_b else (k, n)) / np.sqrt(k)).astype(np.float32)
    return out


def linear_ref(inputs: dict[str, np.ndarray], trans_b: bool) -> list[np.ndarray]:
    """float64: x / sqrt(mean(x^2) + eps) * gamma, times each weight."""
    x, g = inputs["x"].astype(np.float64), inputs["gamma"].astype(np.float64)
    xn = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + EPS) * g
    ws = [v.astype(np.float64) for k, v in inputs.items() if k.startswith("w")]
    return [xn @ (w.T if trans_b else w) for w in ws]


def residual_inputs(rng, m: int, k: int, n: int, trans_b: bool) -> dict[str, np.ndarray]:
    """x [M, K], w ([N, K] with trans_b, else [K, N]; scaled by 1/sqrt(K)) and residual [M, N], float32."""
    x, w = rng.standard_normal((m, k)), rng.standard_normal((n, k) if trans_b else (k, n)) / np.sqrt(k)
    return {"x": x.astype(np.float32), "w": w.astype(np.float32), "residual": rng.standard_normal((m, n)).astype(np.float32)}


def residual_ref(inputs: dict[str, np.ndarray], trans_b: bool) -> np.ndarray:
    """float64: residual + x @ w^T (x @ w without trans_b)."""
    x, w, r = (inputs[k].astype(np.float64) for k in ("x", "w", "residual"))
    return r + x @ (w.T if trans_b else w)


def add_norm_inputs(rng, m: int, k: int) -> dict[str, np.ndarray]:
    """x and residual [M, K] (the residual an order larger, as a residual stream is), gamma [K], float32."""
    return {
        "x": rng.standard_normal((m, k)).astype(np.float32),
        "residual": (4 * rng.standard_normal((m, k))).astype(np.float32),
        "gamma": rng.uniform(0.5, 1.5, k).astype(np.float32),
    }


def add_norm_ref(inputs: dict[str, np.ndarray], dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """(y, sum) of AddRMSNorm on the inputs rounded to ``dtype``: the sum added in float32 and rounded once to
    ``dtype`` (exact: compared bit for bit), the norm in float64 on that rounded sum."""
    x, r, g = (inputs[k].astype(dtype).astype(np.float32) for k in ("x", "residual", "gamma"))
    s = (x + r).astype(dtype).astype(np.float64)
    y = s / np.sqrt(np.mean(s * s, axis=1, keepdims=True) + EPS) * g.astype(np.float64)
    return y, s.astype(np.float32)


def add_norm_model(inputs: dict[str, np.ndarray], *, dtype=np.float32, with_function: bool = True) -> bytes:
    """A one-node AddRMSNorm model (inputs x, residual, gamma; outputs y, sum) in ``dtype``."""
    elem = ONNX_TYPE[np.dtype(dtype)]
    node = helper.make_node("AddRMSNorm", ["x", "residual", "gamma"], ["y", "sum"], domain=kc.DOMAIN, epsilon=EPS)
    vis = [helper.make_tensor_value_info(k, elem, list(inputs[k].shape)) for k in ("x", "residual", "gamma")]
    graph = helper.make_graph([node], "test_AddRMSNorm", vis, [helper.make_tensor_value_info(o, elem, None) for o in ("y", "sum")])
    fns = [add_rms_norm_function(kc.OPSET)] if with_function else []
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)], functions=fns)
    m.ir_version = 10
    return m.SerializeToString()


def swiglu_ref(inputs: dict[str, np.ndarray], trans_b: bool) -> np.ndarray:
    gate, up = linear_ref(inputs, trans_b)
    return gate / (1.0 + np.exp(-gate)) * up


def model(op: str, inputs: dict[str, np.ndarray], trans_b: bool, *, dtype=np.float32, with_function: bool = True) -> bytes:
    """A one-node model of ``op`` (outputs y0.. for RMSNormLinear, else y) in ``dtype``."""
    elem = ONNX_TYPE[np.dtype(dtype)]
    n_w = sum(k.startswith("w") for k in inputs)
    outs = [f"y{j}" for j in range(n_w)] if op == "RMSNormLinear" else ["y"]
    attrs = {"trans_b": int(trans_b)} if op == "LinearResidual" else {"epsilon": EPS, "trans_b": int(trans_b)}
    node = helper.make_node(op, list(inputs), outs, domain=kc.DOMAIN, **attrs)
    if op == "RMSNormLinear":
        node.overload = overload(n_w)
    vis = [helper.make_tensor_value_info(k, elem, list(v.shape)) for k, v in inputs.items()]
    graph = helper.make_graph([node], f"test_{op}", vis, [helper.make_tensor_value_info(o, elem, None) for o in outs])
    fns = []
    if with_function:
        functions = {
            "RMSNormSwiGLU": lambda: rms_norm_swiglu_function(kc.OPSET),
            "LinearResidual": lambda: linear_residual_function(kc.OPSET),
        }
        fns = [functions.get(op, lambda: rms_norm_linear_function(kc.OPSET, n_w))()]
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)], functions=fns)
    m.ir_version = 10
    return m.SerializeToString()


def run_half(sess, inputs: dict[str, np.ndarray], dtype, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """One run with every input and output in ``dtype`` (bfloat16 through IOBinding), outputs as float32."""
    import onnxruntime as ort

    binding, keep = sess.io_binding(), []
    for name, arr in inputs.items():
        keep.append(ort.OrtValue.ortvalue_from_numpy_with_onnx_type(arr.astype(dtype).view(np.uint16), ONNX_TYPE[np.dtype(dtype)]))
        binding.bind_ortvalue_input(name, keep[-1])
    outs = [np.zeros(s, np.uint16) for s in shapes]
    for o, arr in zip(sess.get_outputs(), outs, strict=True):
        binding.bind_ortvalue_output(o.name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(arr, ONNX_TYPE[np.dtype(dtype)]))
    sess.run_with_iobinding(binding)
    return [a.view(dtype).astype(np.float32) for a in outs]


def rounded(inputs: dict[str, np.ndarray], dtype) -> dict[str, np.ndarray]:
    """The inputs as the half kernel sees them (rounded to ``dtype``), back in float32 for the reference."""
    return {k: v.astype(dtype).astype(np.float32) for k, v in inputs.items()}


def half_tolerance(dtype, ref: np.ndarray) -> dict:
    """One rounding of the output (2^-10 float16, 2^-7 bfloat16 relative; absolute at the outputs' scale)."""
    ulp = 2.0**-10 if np.dtype(dtype) == np.float16 else 2.0**-7
    return {"rtol": ulp, "atol": ulp * float(np.max(np.abs(ref)))}
