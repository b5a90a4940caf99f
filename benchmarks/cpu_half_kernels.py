"""CPU kernels in float16 / bfloat16 against float32: what the 16-bit load/store conversion costs.

    python benchmarks/cpu_half_kernels.py                       # prints a table
    python benchmarks/cpu_half_kernels.py --json out.json       # and writes JSON (load average included)

Each com.meganeura CPU kernel (Rope, SwiGLU, CachedAttention, RopeCacheWrite) runs alone in a
one-node ONNX Runtime session, inputs and output bound once through IOBinding, at the SmolLM2-135M
decode shape (9 query / 3 KV heads of 64). The half-precision kernels read and write 16 bits and
compute in float32, so with cheap conversion they should run about as fast as float32 (or faster:
half the bytes). ``--threads`` (default 1) pins ORT's intra-op pool: the numbers are per core,
steadier on a shared machine. The median of ``--iters`` runs is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import onnxruntime as ort
import run_info
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from meganeura_onnx.runtime.custom_ops import custom_op_library  # noqa: E402

ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
NP_TYPE = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
HEADS, KV_HEADS, HEAD_DIM, FFN = 9, 3, 64, 1536


def cases(cached: int, rows: int) -> list[tuple[str, dict, dict, list]]:
    """(op, float32 inputs, attributes, output shape) at the SmolLM2-135M shape."""
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    kvw, qw = KV_HEADS * HEAD_DIM, HEADS * HEAD_DIM
    pos = np.array([cached - 1], np.int64)
    return [
        (
            "Rope",
            {"X": f(rows, qw), "offset_dyn": np.array([cached], np.int64)},
            {"head_dim": HEAD_DIM, "theta": 10000.0, "offset": 0},
            [rows, qw],
        ),
        ("SwiGLU", {"gate": f(rows, FFN), "up": f(rows, FFN)}, {}, [rows, FFN]),
        (
            "CachedAttention",
            {"Q": f(1, qw), "K": f(cached, kvw), "V": f(cached, kvw), "kv_pos": pos},
            {"num_heads": HEADS, "num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM},
            [1, qw],
        ),
        (
            "RopeCacheWrite",
            # A cache of 2 * rows: ORT hands the kernel a fresh output here, so the kernel copies the
            # cache first; a short one keeps that copy from hiding the rotation.
            {"new_kv": f(rows, kvw), "cache": f(2 * rows, kvw), "kv_pos": np.array([rows], np.int64)},
            {"head_dim": HEAD_DIM, "theta": 10000.0},
            [2 * rows, kvw],
        ),
    ]


def one_node_model(op: str, inputs: dict, attrs: dict, dtype: str) -> bytes:
    def elem(a: np.ndarray) -> int:
        return ONNX_TYPE[dtype] if a.dtype == np.float32 else TensorProto.INT64

    vis = [helper.make_tensor_value_info(n, elem(a), list(a.shape)) for n, a in inputs.items()]
    node = helper.make_node(op, list(inputs), ["Y"], domain="com.meganeura", **attrs)
    graph = helper.make_graph([node], op, vis, [helper.make_tensor_value_info("Y", ONNX_TYPE[dtype], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.meganeura", 1)])
    model.ir_version = 10
    return model.SerializeToString()


def ort_value(a: np.ndarray, dtype: str) -> ort.OrtValue:
    """``a`` as an OrtValue of ``dtype`` (bfloat16 through its 16-bit pattern: numpy has no such type)."""
    if a.dtype != np.float32:
        return ort.OrtValue.ortvalue_from_numpy(a)
    typed = a.astype(NP_TYPE[dtype])
    raw = typed.view(np.uint16) if dtype == "bfloat16" else typed
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(raw), ONNX_TYPE[dtype])


def time_case(op, inputs, attrs, out_shape, dtype, library, threads, iters) -> float:
    """Median seconds of one run of the kernel."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.register_custom_ops_library(library)
    sess = ort.InferenceSession(one_node_model(op, inputs, attrs, dtype), so, providers=["CPUExecutionProvider"])
    binding = sess.io_binding()
    values = {n: ort_value(a, dtype) for n, a in inputs.items()}
    for n, v in values.items():
        binding.bind_ortvalue_input(n, v)
    out = np.zeros(out_shape, np.float32 if dtype == "float32" else np.uint16)
    binding.bind_ortvalue_output("Y", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(out, ONNX_TYPE[dtype]))
    for _ in range(3):
        sess.run_with_iobinding(binding)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--cached", type=int, default=2048, help="cached positions (CachedAttention; Rope's offset)")
    ap.add_argument("--rows", type=int, default=128, help="token rows of Rope, SwiGLU and RopeCacheWrite (a prefill)")
    ap.add_argument("--library", default=None, help="the kernel library to time (default: this checkout's build)")
    a = ap.parse_args()
    library = a.library or custom_op_library("cpu")
    if library is None:
        sys.exit("the CPU custom-op library is not built: make -C custom_ops cpu")
    load_before = os.getloadavg()
    results = []
    for op, inputs, attrs, out_shape in cases(a.cached, a.rows):
        base = None
        for dtype in ("float32", "float16", "bfloat16"):
            t = time_case(op, inputs, attrs, out_shape, dtype, library, a.threads, a.iters)
            base = base or t
            results.append({"op": op, "dtype": dtype, "median_us": t * 1e6, "vs_float32": t / base})
            print(f"{op:16} {dtype:9} {t * 1e6:10.1f} us  {t / base:5.2f}x float32")
    record = {
        "machine": {**run_info.host(), "cpu": run_info.cpu_model()},
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "threads": a.threads,
        "shape": {"heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "ffn": FFN, "cached": a.cached, "rows": a.rows},
        "commit": run_info.git_commit(),
        "dirty": run_info.git_dirty(),
        "onnxruntime": ort.__version__,
        "library": library,
        "results": results,
    }
    print(f"load average {load_before} -> {record['loadavg_after']}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
