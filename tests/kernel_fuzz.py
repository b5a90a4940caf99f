"""Hostile models for the com.meganeura kernels, run through plain ONNX Runtime with our library.

Each model is one ``com.meganeura`` node (no function body, so only our kernel can run it) with
random ranks, dims (0 included), dtypes, index values (int64 extremes such as 2**63 - 1 and -2**63,
positions just past the cache) and attributes (missing, of the wrong type, extreme). Every model
must be refused with an error (at load or at run) or run; the process must never crash. Run it as
a script so that a crash is seen by the caller instead of killing it::

    python tests/kernel_fuzz.py --device cpu --count 400 --seed 0
    compute-sanitizer --tool memcheck python tests/kernel_fuzz.py --device cuda --count 300

It prints each case to stderr before running it (the last one names the culprit of a crash) and
one JSON summary line to stdout: models tried, ran, refused at load, refused at run.
"""

from __future__ import annotations

import argparse
import json
import sys

import kernel_cases as kc
import numpy as np
from onnx import TensorProto, helper

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
EXTREME_INTS = [0, 1, -1, 2, 3, 7, 64, 2**31 - 1, 2**31, 2**32 - 1, 2**40, 2**40 + 1, 2**62, I64_MAX, I64_MIN, I64_MAX - 3]
DIMS = [0, 0, 1, 1, 2, 3, 4, 5, 8, 16, 64]
DTYPES = [np.float32] * 6 + [np.float64, np.int64, np.int32, np.uint32, np.float16, np.bool_, np.int8]
ONNX_TYPE = {
    np.float32: TensorProto.FLOAT,
    np.float64: TensorProto.DOUBLE,
    np.int64: TensorProto.INT64,
    np.int32: TensorProto.INT32,
    np.uint32: TensorProto.UINT32,
    np.float16: TensorProto.FLOAT16,
    np.bool_: TensorProto.BOOL,
    np.int8: TensorProto.INT8,
}
OPS = {  # op -> (input names, attributes with a plausible value)
    "Rope": (["X", "offset_dyn"], {"theta": 10000.0, "head_dim": 8, "offset": 0}),
    "CacheWrite": (["new", "cache", "kv_pos"], {}),
    "CachedAttention": (["Q", "K_cache", "V_cache", "kv_pos"], {"num_heads": 2, "num_kv_heads": 1, "head_dim": 8}),
    "ScatterAdd": (["indices", "src"], {"num_rows": 4}),
    "SwiGLU": (["gate", "up"], {}),
    "RopeCacheWrite": (["new_kv", "cache", "kv_pos"], {"theta": 10000.0, "head_dim": 8}),
    "RMSNormLinear": (["x", "gamma", "w0"], {"epsilon": 1e-5, "trans_b": 1}),  # one weight: one output
    "RMSNormSwiGLU": (["x", "gamma", "w_gate", "w_up"], {"epsilon": 1e-5, "trans_b": 0}),
    "LinearResidual": (["x", "w", "residual"], {"trans_b": 1}),
    "DecodeLayer": (
        ["x", "attn_norm", "w_q", "w_k", "w_v", "w_o", "mlp_norm", "w_gate", "w_up", "w_down", "k_cache", "v_cache", "kv_pos"],
        {"num_heads": 2, "num_kv_heads": 1, "head_dim": 4, "theta": 10000.0, "epsilon": 1e-5, "trans_b": 1},
    ),
    "GreedyStep": (["logits", "kv_pos", "token_log"], {}),
    # The fused optimizer: 6 [1] hyper-parameters, then (p, g, m, v) per parameter; 3 outputs each.
    "AdamUpdate": (["lr", "beta1", "beta2", "eps", "step", "weight_decay", "p0", "g0", "m0", "v0", "p1", "g1", "m1", "v1"], {}),
}
HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 1.0, "weight_decay": 0.01}
BAD_FLOATS = [0.0, -1.0, 1.0, float("nan"), float("inf"), -float("inf"), 1e38, 0.5]
INDEX_INPUTS = {"offset_dyn", "kv_pos", "indices"}
UINT32_OPS = {"GreedyStep"}  # their index inputs (and token_log) are uint32 only: plausible models use it


def _array(rng: np.random.Generator, dtype, shape: list[int], index: bool) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    if index and np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        pool = [v for v in EXTREME_INTS if info.min <= v <= info.max]
        return np.array([pool[int(rng.integers(len(pool)))] for _ in range(n)], dtype=dtype).reshape(shape)
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-3, 9, size=shape).astype(dtype)
    return rng.standard_normal(size=shape).astype(dtype)


def _plausible_shapes(op: str, rng: np.random.Generator) -> dict[str, list[int]]:
    """Shapes near the valid ones (so the kernels' own checks are reached, not only ORT's)."""
    T, max_seq, hd = int(rng.choice([0, 1, 2, 5])), int(rng.choice([0, 1, 4, 8])), 8
    if op == "Rope":
        return {"X": [T, 2 * hd], "offset_dyn": [1]}
    if op == "CacheWrite":
        return {"new": [T, 16], "cache": [max_seq, 16], "kv_pos": [1]}
    if op == "RopeCacheWrite":
        return {"new_kv": [T, 2 * hd], "cache": [max_seq, 2 * hd], "kv_pos": [1]}
    if op == "SwiGLU":
        return {"gate": [T, 3], "up": [T, 3]}
    if op == "RMSNormLinear":
        return {"x": [T, 8], "gamma": [8], "w0": [4, 8]}
    if op == "RMSNormSwiGLU":
        return {"x": [T, 8], "gamma": [8], "w_gate": [8, 3], "w_up": [8, 3]}
    if op == "LinearResidual":
        return {"x": [T, 8], "w": [4, 8], "residual": [T, 4]}
    if op == "CachedAttention":
        return {"Q": [T, 2 * hd], "K_cache": [max_seq, hd], "V_cache": [max_seq, hd], "kv_pos": [1]}
    if op == "DecodeLayer":  # D 8, 2 heads and 1 KV head of 4, intermediate 6
        weights = {"w_q": [8, 8], "w_k": [4, 8], "w_v": [4, 8], "w_o": [8, 8], "w_gate": [6, 8], "w_up": [6, 8], "w_down": [8, 6]}
        return {"x": [T, 8], "attn_norm": [8], "mlp_norm": [8], **weights, "k_cache": [max_seq, 4], "v_cache": [max_seq, 4], "kv_pos": [1]}
    if op == "GreedyStep":
        rows = int(rng.choice([0, 1, 3]))
        return {"logits": [rows, int(rng.choice([1, 5, 40]))], "kv_pos": [rows], "token_log": [rows, int(rng.choice([1, 6]))]}
    if op == "AdamUpdate":
        shapes = {h: [1] for h in HYPER}
        for k, shape in enumerate(([T, 3], [max_seq])):
            shapes.update({f"{t}{k}": list(shape) for t in "pgmv"})
        return shapes
    return {"indices": [T], "src": [T, 4]}


def _bad_attr(rng: np.random.Generator, good):
    roll = rng.random()
    if roll < 0.25:
        return None  # missing
    if roll < 0.55:  # the wrong type
        return [float(good) + 0.5, int(good), "abc", [1, 2], [1.5]][int(rng.integers(5))]
    if isinstance(good, float):
        return [0.0, -1.0, float("nan"), float("inf"), 1e38, -0.0][int(rng.integers(6))]
    return EXTREME_INTS[int(rng.integers(len(EXTREME_INTS)))]


def random_case(rng: np.random.Generator) -> tuple[str, dict[str, np.ndarray], dict, list[str], bool]:
    """A plausible model of a random op, then 0-3 hostile mutations (a dim, a rank, a dtype, an
    index value, an attribute, an input left out)."""
    op = list(OPS)[int(rng.integers(len(OPS)))]
    names, good_attrs = OPS[op]
    if op == "AdamUpdate":  # one or two parameters, or a count that is not a multiple of four
        names = names[: int(rng.choice([10, 10, 14, 14, 12, 6]))]
    shapes = _plausible_shapes(op, rng)
    dtypes = {n: (np.int64 if rng.random() < 0.6 else np.uint32) if n in INDEX_INPUTS else np.float32 for n in names}
    if op in UINT32_OPS:
        dtypes.update({"kv_pos": np.uint32, "token_log": np.uint32})
    attrs: dict = dict(good_attrs)
    input_names = list(names)
    extreme_index = False
    for _ in range(int(rng.choice([0, 1, 1, 1, 2, 2, 3]))):
        kind, name = int(rng.integers(6)), names[int(rng.integers(len(names)))]
        if kind == 0 and shapes[name]:
            shapes[name][int(rng.integers(len(shapes[name])))] = int(rng.choice(DIMS))
        elif kind == 1:
            shapes[name] = [int(rng.choice(DIMS)) for _ in range(int(rng.integers(0, 4)))]
        elif kind == 2:
            dtypes[name] = DTYPES[int(rng.integers(len(DTYPES)))]
        elif kind == 3:
            extreme_index = True
        elif kind == 4 and good_attrs:
            key = list(good_attrs)[int(rng.integers(len(good_attrs)))]
            value = _bad_attr(rng, good_attrs[key])
            if value is None:
                attrs.pop(key, None)
            else:
                attrs[key] = value
        elif kind == 5:
            input_names[int(rng.integers(len(input_names)))] = ""
    inputs = {}
    for n in names:
        index = n in INDEX_INPUTS
        if n in HYPER and dtypes[n] is np.float32:  # a plausible value, or a hostile one
            inputs[n] = np.array([HYPER[n] if rng.random() < 0.8 else BAD_FLOATS[int(rng.integers(len(BAD_FLOATS)))]], np.float32)
        elif index and not extreme_index and np.issubdtype(dtypes[n], np.integer):
            limit = 4 if n != "indices" else int(good_attrs.get("num_rows", 4))
            inputs[n] = rng.integers(0, limit + 2, size=shapes[n]).astype(dtypes[n])  # valid, or just past the end
        else:
            inputs[n] = _array(rng, dtypes[n], shapes[n], index)
    unknown_shapes = rng.random() < 0.5  # undeclared shapes: bad shapes reach the kernel
    rows = attrs.get("num_rows") if op == "ScatterAdd" else None
    if isinstance(rows, int) and 2**24 < rows <= 2**40:
        # Within the kernel's size bound, such a count only asks ONNX Runtime's allocator for up to
        # terabytes (which fails cleanly, except under AddressSanitizer, whose operator new aborts):
        # test the kernel's refusal just past the bound instead.
        attrs["num_rows"] = 2**40 + 1
    return op, inputs, attrs, input_names, unknown_shapes


def build(op: str, inputs: dict[str, np.ndarray], attrs: dict, input_names: list[str], unknown_shapes: bool) -> bytes:
    used = [n for n in input_names if n]
    # AdamUpdate has 3 outputs per parameter (p', m', v'), counted from its (p, g, m, v) inputs
    outputs = [f"Y{i}" for i in range(3 * max(1, (len(input_names) - len(HYPER)) // 4))] if op == "AdamUpdate" else ["Y"]
    if op == "DecodeLayer":  # y and both caches
        outputs = ["Y", "Y_k_cache", "Y_v_cache"]
    out_type = TensorProto.FLOAT
    if op == "GreedyStep":  # the token, the position and the log
        outputs, out_type = ["Y_token", "Y_pos", "Y_log"], TensorProto.UINT32
    vis = [
        helper.make_tensor_value_info(n, ONNX_TYPE[inputs[n].dtype.type], None if unknown_shapes else list(inputs[n].shape)) for n in used
    ]
    node = helper.make_node(op, input_names, outputs, domain=kc.DOMAIN, name=f"{op}_0", **attrs)
    graph = helper.make_graph([node], f"fuzz_{op}", vis, [helper.make_tensor_value_info(y, out_type, None) for y in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)])
    model.ir_version = 10
    return model.SerializeToString()


def describe(op, inputs, attrs, input_names, unknown_shapes) -> str:
    ins = ", ".join(f"{n or '<absent>'}:{inputs[n].dtype}{list(inputs[n].shape)}" if n else "<absent>" for n in input_names)
    vals = {n: inputs[n].reshape(-1)[:2].tolist() for n in input_names if n in INDEX_INPUTS and n in inputs and inputs[n].size}
    return f"{op}({ins}) attrs={attrs} index values={vals} unknown_shapes={unknown_shapes}"


def run(device: str, count: int, seed: int) -> dict:
    library = kc.kernel_library(device)
    if library is None:
        raise SystemExit(f"the {device} kernel library is not built")
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    rng = np.random.default_rng(seed)
    by_op = {op: {"ran": 0, "refused_at_load": 0, "refused_at_run": 0} for op in OPS}
    summary = {"device": device, "models": 0, "ran": 0, "refused_at_load": 0, "refused_at_run": 0, "seed": seed}
    for i in range(count):
        op, inputs, attrs, input_names, unknown = random_case(rng)
        print(f"[{i}] {describe(op, inputs, attrs, input_names, unknown)}", file=sys.stderr, flush=True)
        model = build(op, inputs, attrs, input_names, unknown)
        summary["models"] += 1
        try:
            sess = kc.session(model, library=library, providers=providers)
        except Exception as e:  # noqa: BLE001 - ORT's own exception classes: any is a clean refusal
            summary["refused_at_load"] += 1
            by_op[op]["refused_at_load"] += 1
            print(f"    refused at load: {str(e)[:160]}", file=sys.stderr, flush=True)
            continue
        feeds = {n: inputs[n] for n in input_names if n}
        try:
            sess.run(None, feeds)
        except Exception as e:  # noqa: BLE001 - any Python-level error is a clean refusal; a crash kills us
            summary["refused_at_run"] += 1
            by_op[op]["refused_at_run"] += 1
            msg = str(e)
            print(f"    refused at run: {msg[:160]}", file=sys.stderr, flush=True)
            if "com.meganeura" in msg or f"{op}_0" in msg or op in msg:
                continue
            summary.setdefault("unnamed_errors", []).append(msg[:200])
            continue
        summary["ran"] += 1
        by_op[op]["ran"] += 1
    summary["by_op"] = by_op
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(json.dumps(run(args.device, args.count, args.seed)), flush=True)


if __name__ == "__main__":
    main()
