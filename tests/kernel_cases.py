"""Shared helpers for the com.meganeura kernel tests: test models, numpy references, sessions.

Models are built with ``onnx.helper`` (IR 10, opset 21, ``com.meganeura`` v1) with the op table's
model-local function body attached, so the same model runs the kernel (library registered) or the
function body (not). A function body that fails to build fails the tests that use it: nothing here
turns a broken module of ours into a skip.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from meganeura_onnx.ops import OPS  # noqa: E402
from meganeura_onnx.runtime.custom_ops import custom_op_library  # noqa: E402

DOMAIN = "com.meganeura"
OPSET = 21


def kernel_library(device: str = "cpu") -> str | None:
    """The library under test, or None when it is not built (its tests then skip).

    ``make -C custom_ops asan-test`` points the tests at the AddressSanitizer build through
    MEGANEURA_TEST_KERNEL_LIB (a test-only switch). ``make test`` builds the CPU library first and
    sets MEGANEURA_REQUIRE_KERNELS=1: a CPU library that is missing then fails instead of skipping.
    """
    override = os.environ.get("MEGANEURA_TEST_KERNEL_LIB")
    if override and device == "cpu":
        return override
    lib = custom_op_library(device)
    if lib is None and device == "cpu" and os.environ.get("MEGANEURA_REQUIRE_KERNELS") == "1":
        raise RuntimeError("MEGANEURA_REQUIRE_KERNELS=1 but the CPU custom-op library is not built (make -C custom_ops cpu)")
    return lib


# ----------------------------------------------------------------- CUDA
# The CUDA kernel tests' common ground: they skip (pytestmark = CUDA_SKIPS) without onnxruntime-gpu's
# CUDAExecutionProvider or without the CUDA library.
CUDA_LIB = custom_op_library("cuda")
HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()
CUDA_SKIPS = [
    pytest.mark.skipif(not HAS_CUDA, reason="no CUDAExecutionProvider (onnxruntime-gpu) here"),
    pytest.mark.skipif(CUDA_LIB is None, reason="CUDA custom-op library not built (make -C custom_ops cuda)"),
]
CUDA_PROVIDERS = (("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider")


def cuda_session(model: bytes, **kw):
    """A session of ``model`` on CUDA (CPU for what has no CUDA kernel) with the CUDA library."""
    return session(model, library=CUDA_LIB, providers=CUDA_PROVIDERS, **kw)


def assert_ort_error(run, op: str, match=()) -> None:
    """``run()`` raises ONNX Runtime's own error (not a crash, not a Python error of ours) whose message
    names ``op`` and contains every string of ``match``. ``run_with_iobinding`` reports a kernel's error
    status as a ``RuntimeError`` starting "Error in execution:" (ORT's Python wrapper), ``run`` as one of
    ORT's own exception types."""
    with pytest.raises(Exception) as info:  # noqa: PT011 - ORT's error type, checked below
        run()
    from_iobinding = type(info.value) is RuntimeError and str(info.value).startswith("Error in execution:")
    assert from_iobinding or type(info.value).__module__.startswith("onnxruntime"), repr(info.value)
    msg = str(info.value)
    assert op in msg and all(m in msg for m in match), msg


# ----------------------------------------------------------------- function bodies
# ONNX op name -> the op table entry that declares it (its schema and function body).
CUSTOM_OPS = {d.custom.name: d for d in OPS.values() if d.custom is not None}


def function_proto(op: str):
    """The op table's FunctionProto for the com.meganeura op ``op`` (``ValueError`` for an op the
    table does not declare; whatever building the body raises propagates and fails the test)."""
    if op not in CUSTOM_OPS:
        raise ValueError(f"{op!r} is not a com.meganeura op of the table (it has {sorted(CUSTOM_OPS)})")
    d = CUSTOM_OPS[op]
    if d.custom_function is None:
        raise ValueError(f"op table: {d.name} ({op}) declares no function body")
    return d.custom_function(OPSET)


# ----------------------------------------------------------------- models
_NP2ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(ml_dtypes.bfloat16): TensorProto.BFLOAT16,
}
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def make_model(
    op: str,
    inputs: dict[str, np.ndarray],
    attrs: dict,
    *,
    out_shape=None,
    with_function: bool = True,
    input_names: list[str] | None = None,
    unknown_shapes: bool = False,
    out_dtype=np.float32,
) -> bytes:
    """A one-node model ``op(inputs...) -> Y``; ``input_names`` may use '' for an absent optional input.

    ``unknown_shapes`` declares inputs without shapes, so invalid shapes reach the kernel.
    """
    names = input_names if input_names is not None else list(inputs)
    vis = [helper.make_tensor_value_info(n, _NP2ONNX[a.dtype], None if unknown_shapes else list(a.shape)) for n, a in inputs.items()]
    node = helper.make_node(op, names, ["Y"], domain=DOMAIN, name=f"{op}_0", **attrs)
    out = helper.make_tensor_value_info("Y", _NP2ONNX[np.dtype(out_dtype)], out_shape)
    graph = helper.make_graph([node], f"test_{op}", vis, [out])
    functions = [function_proto(op)] if with_function else []
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)], functions=functions)
    model.ir_version = 10
    return model.SerializeToString()


def session(model: bytes, *, library: str | None, providers=("CPUExecutionProvider",), profile_prefix: str | None = None, threads: int = 0):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if library is not None:
        so.register_custom_ops_library(library)
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model, so, providers=list(providers))


def run_typed(sess, inputs: dict[str, np.ndarray], out_shape, out_dtype) -> np.ndarray:
    """One run with output Y of ``out_dtype``; bfloat16 tensors (which ORT's numpy bridge does not
    convert) go in and out as their 16-bit patterns through IOBinding."""
    binding = sess.io_binding()
    keep = []
    for name, arr in inputs.items():
        if arr.dtype == BFLOAT16:
            keep.append(ort.OrtValue.ortvalue_from_numpy_with_onnx_type(arr.view(np.uint16), TensorProto.BFLOAT16))
            binding.bind_ortvalue_input(name, keep[-1])
        else:
            binding.bind_cpu_input(name, arr)
    out = np.zeros(out_shape, np.uint16 if np.dtype(out_dtype) == BFLOAT16 else out_dtype)
    binding.bind_ortvalue_output("Y", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(out, _NP2ONNX[np.dtype(out_dtype)]))
    sess.run_with_iobinding(binding)
    return out.view(BFLOAT16) if np.dtype(out_dtype) == BFLOAT16 else out


def profiled_nodes(sess) -> list[dict]:
    """Runs end_profiling and returns the node events: [{'name', 'op_name', 'provider'}]."""
    import json

    path = sess.end_profiling()
    try:
        events = json.load(open(path))
    finally:
        os.remove(path)
    out = []
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            a = e.get("args", {})
            out.append({"name": e["name"][: -len("_kernel_time")], "op_name": a.get("op_name"), "provider": a.get("provider")})
    return out


# ----------------------------------------------------------------- numpy references (float32, independent of the package)
def assert_kernel_matches_reference_and_body(names, got, want, body, tol: float) -> None:
    """A float32 kernel's outputs ``got`` against the numpy reference ``want`` (shape, dtype, values)
    and the function body's outputs ``body``, output by output, each within ``tol``."""
    for name, g, w in zip(names, got, want, strict=True):
        assert g.shape == w.shape and g.dtype == np.float32, name
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=name)
    for name, b, g in zip(names, body, got, strict=True):
        np.testing.assert_allclose(b, g, rtol=tol, atol=tol, err_msg=f"function body: {name}")


def inv_freq(theta: float, head_dim: int) -> np.ndarray:
    """float32 ``theta ** (-2j/hd)`` rounded correctly, as C ``powf`` (and ORT's Pow) give it.

    numpy's own float32 ``np.power`` is off by one ulp for some j; at position p that moves the
    angle by ~p * 6e-8 rad, which breaks a 1e-5 comparison beyond a few hundred positions.
    """
    j = np.arange(head_dim // 2).astype(np.float32)
    exponent = (j * np.float32(-2.0)) / np.float32(head_dim)  # float32, like the kernel
    return np.power(np.float64(np.float32(theta)), exponent.astype(np.float64)).astype(np.float32)


def rope_ref(x: np.ndarray, theta: float, head_dim: int, pos0: int) -> np.ndarray:
    s, d = x.shape
    half = head_dim // 2
    pos = np.arange(pos0, pos0 + s).astype(np.float32)
    ang = (pos[:, None] * inv_freq(theta, head_dim)[None, :]).astype(np.float32)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    xh = x.reshape(s, d // head_dim, head_dim)
    a, b = xh[..., :half], xh[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(s, d).astype(np.float32)


def cache_write_ref(new: np.ndarray, cache: np.ndarray, kv_pos: int) -> np.ndarray:
    out = cache.copy()
    out[kv_pos : kv_pos + new.shape[0]] = new
    return out


def batched(ref, per_seq_args, positions) -> np.ndarray:
    """``ref`` applied to each sequence of a batch (its arrays' leading axis) at its own position."""
    return np.stack([ref(*(a[b] for a in per_seq_args), p) for b, p in enumerate(positions)])


def cached_attention_ref(q, kc, vc, kv_pos: int, h: int, kvh: int, hd: int) -> np.ndarray:
    """float64 softmax attention of query row t over cache rows [0, kv_pos + t]."""
    t_rows = q.shape[0]
    g = h // kvh
    out = np.zeros((t_rows, h * hd), dtype=np.float64)
    for t in range(t_rows):
        n = kv_pos + t + 1
        for head in range(h):
            kh = head // g
            qv = q[t, head * hd : (head + 1) * hd].astype(np.float64)
            k = kc[:n, kh * hd : (kh + 1) * hd].astype(np.float64)
            v = vc[:n, kh * hd : (kh + 1) * hd].astype(np.float64)
            s = k @ qv / np.sqrt(hd)
            p = np.exp(s - s.max())
            out[t, head * hd : (head + 1) * hd] = (p / p.sum()) @ v
    return out.astype(np.float32)


def scatter_add_ref(idx: np.ndarray, src: np.ndarray, num_rows: int) -> np.ndarray:
    out = np.zeros((num_rows, src.shape[1]), dtype=np.float64)
    np.add.at(out, idx.astype(np.int64), src.astype(np.float64))
    return out.astype(np.float32)
