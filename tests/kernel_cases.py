"""Shared helpers for the com.meganeura kernel tests: test models, numpy references, sessions.

Models are built with ``onnx.helper`` (IR 10, opset 21, ``com.meganeura`` v1). When the
package's op table provides the model-local function bodies (``*_function(opset)``), they are
attached, so the same model runs the kernel (library registered) or the function body (not).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

try:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
except ImportError:  # pragma: no cover - the tests skip
    onnx = ort = None

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from meganeura_onnx.runtime.custom_ops import custom_op_library  # noqa: E402

DOMAIN = "com.meganeura"
OPSET = 21


def kernel_library(device: str = "cpu") -> str | None:
    """The library under test. ``make -C custom_ops asan-test`` points the tests at the
    AddressSanitizer build through MEGANEURA_TEST_KERNEL_LIB (a test-only switch)."""
    override = os.environ.get("MEGANEURA_TEST_KERNEL_LIB")
    if override and device == "cpu":
        return override
    return custom_op_library(device)


# ----------------------------------------------------------------- function bodies
def function_proto(op: str):
    """The op table's FunctionProto for ``op``, or None while it is not importable."""
    try:
        if op == "Rope":
            from meganeura_onnx.ops.rope import rope_function as f
        elif op == "CacheWrite":
            from meganeura_onnx.ops.kv_cache import cache_write_function as f
        elif op == "CachedAttention":
            from meganeura_onnx.ops.kv_cache import cached_attention_function as f
        elif op == "ScatterAdd":
            from meganeura_onnx.ops.embedding import scatter_add_function as f
        else:
            return None
        return f(OPSET)
    except Exception:  # noqa: BLE001 - not there yet (or broken): only the function comparison skips
        return None


# ----------------------------------------------------------------- models
_NP2ONNX = (
    {
        np.dtype(np.float32): TensorProto.FLOAT,
        np.dtype(np.int64): TensorProto.INT64,
        np.dtype(np.uint32): TensorProto.UINT32,
        np.dtype(np.int32): TensorProto.INT32,
    }
    if onnx
    else {}
)


def make_model(
    op: str,
    inputs: dict[str, np.ndarray],
    attrs: dict,
    *,
    out_shape=None,
    with_function: bool = True,
    input_names: list[str] | None = None,
    unknown_shapes: bool = False,
) -> bytes:
    """A one-node model ``op(inputs...) -> Y``; ``input_names`` may use '' for an absent optional input.

    ``unknown_shapes`` declares inputs without shapes, so invalid shapes reach the kernel.
    """
    names = input_names if input_names is not None else list(inputs)
    vis = [helper.make_tensor_value_info(n, _NP2ONNX[a.dtype], None if unknown_shapes else list(a.shape)) for n, a in inputs.items()]
    node = helper.make_node(op, names, ["Y"], domain=DOMAIN, name=f"{op}_0", **attrs)
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, out_shape)
    graph = helper.make_graph([node], f"test_{op}", vis, [out])
    functions = []
    if with_function:
        fn = function_proto(op)
        if fn is not None:
            functions.append(fn)
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
