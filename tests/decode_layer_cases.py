"""Shared by the DecodeLayer kernel tests (CPU and CUDA): cases, an independent numpy reference composed
from the sibling tests' references (decode_linear_cases' norms and products, rope_attention_cases' rope,
cache writes and attention; not the package's), one-node models with the op's three outputs, and an
in-place run."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import rope_attention_cases as rc
from onnx import helper

EPS = 1e-5
OUTPUTS = ("y", "k_cache_out", "v_cache_out")
FLOAT_INPUTS = ("x", "attn_norm", "w_q", "w_k", "w_v", "w_o", "mlp_norm", "w_gate", "w_up", "w_down", "k_cache", "v_cache")


def make_case(rng, max_seq: int, s: int, d: int, h: int, kvh: int, hd: int, inter: int, positions, trans_b: bool) -> dict:
    """float32 inputs (kv_pos int64) of one layer step: one sequence of s rows for an int position (2-D
    caches), else len(positions) sequences of s rows each (3-D caches). Weights are scaled by
    1/sqrt(fan-in): every intermediate is of order one."""
    batch = [] if isinstance(positions, int) else [len(positions)]
    pos = [positions] if isinstance(positions, int) else list(positions)
    rows = len(pos) * s

    def weight(n_in: int, n_out: int) -> np.ndarray:
        w = rng.standard_normal((n_out, n_in) if trans_b else (n_in, n_out)) / np.sqrt(n_in)
        return w.astype(np.float32)

    return {
        "x": rng.standard_normal((rows, d)).astype(np.float32),
        "attn_norm": rng.uniform(0.5, 1.5, d).astype(np.float32),
        "w_q": weight(d, h * hd),
        "w_k": weight(d, kvh * hd),
        "w_v": weight(d, kvh * hd),
        "w_o": weight(h * hd, d),
        "mlp_norm": rng.uniform(0.5, 1.5, d).astype(np.float32),
        "w_gate": weight(d, inter),
        "w_up": weight(d, inter),
        "w_down": weight(inter, d),
        "k_cache": rng.standard_normal([*batch, max_seq, kvh * hd]).astype(np.float32),
        "v_cache": rng.standard_normal([*batch, max_seq, kvh * hd]).astype(np.float32),
        "kv_pos": np.array(pos, np.int64),
    }


def _norm(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + EPS) * gamma.astype(np.float64)


def _mm(a: np.ndarray, w: np.ndarray, trans_b: bool) -> np.ndarray:
    return a.astype(np.float64) @ (w.astype(np.float64).T if trans_b else w.astype(np.float64))


def reference(inputs: dict, h: int, kvh: int, hd: int, trans_b: bool, rounding=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, k_cache', v_cache') in float64 products, float32 storage between the ops; ``rounding``: a
    half type's rounding applied where the unfused ops store their outputs in the element type (q, k,
    v, the rotated rows, the attention output, x1, h, y)."""
    rnd = rounding or (lambda a: a.astype(np.float32))
    x = inputs["x"]
    xn = _norm(x, inputs["attn_norm"])
    q, k, v = (rnd(_mm(xn, inputs[w], trans_b)) for w in ("w_q", "w_k", "w_v"))
    caches = {"k_cache": inputs["k_cache"], "v_cache": inputs["v_cache"], "kv_pos": inputs["kv_pos"]}
    if inputs["k_cache"].ndim == 3:  # B sequences: the rows as [B, S, width]
        q, k, v = (t.reshape(inputs["k_cache"].shape[0], -1, t.shape[-1]) for t in (q, k, v))
    a, k_all, v_all = rc.reference({"q": q, "k_new": k, "v_new": v, **caches}, h, kvh, hd, rounding=rounding)
    x1 = rnd(x.astype(np.float64) + _mm(rnd(a).reshape(x.shape[0], -1), inputs["w_o"], trans_b))
    xn1 = _norm(x1, inputs["mlp_norm"])
    gate, up = _mm(xn1, inputs["w_gate"], trans_b), _mm(xn1, inputs["w_up"], trans_b)
    hidden = rnd(gate / (1.0 + np.exp(-gate)) * up)
    return rnd(x1.astype(np.float64) + _mm(hidden, inputs["w_down"], trans_b)), k_all, v_all


def attrs(h: int, kvh: int, hd: int, trans_b: bool) -> dict:
    return {"num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "theta": rc.THETA, "epsilon": EPS, "trans_b": int(trans_b)}


def make_model(inputs: dict, node_attrs: dict, *, dtype=np.float32, with_function: bool = True, unknown_shapes: bool = False) -> bytes:
    """A DecodeLayer model with float32 inputs and outputs named as the op's; for a half ``dtype`` the
    float inputs are cast to it in front of the node and its outputs back to float32."""
    half = np.dtype(dtype) != np.float32
    vis = [helper.make_tensor_value_info(n, kc._NP2ONNX[a.dtype], None if unknown_shapes else list(a.shape)) for n, a in inputs.items()]
    shapes = [None if unknown_shapes else list(inputs[k].shape) for k in ("x", "k_cache", "v_cache")]
    outs = [helper.make_tensor_value_info(n, kc._NP2ONNX[np.dtype(np.float32)], s) for n, s in zip(OUTPUTS, shapes, strict=True)]
    nodes, ins = [], []
    for name in inputs:
        if half and name != "kv_pos":
            nodes.append(helper.make_node("Cast", [name], [f"{name}_h"], to=kc._NP2ONNX[np.dtype(dtype)]))
        ins.append(f"{name}_h" if half and name != "kv_pos" else name)
    node_outs = [f"{n}_h" for n in OUTPUTS] if half else list(OUTPUTS)
    nodes.append(helper.make_node("DecodeLayer", ins, node_outs, domain=kc.DOMAIN, name="layer", **node_attrs))
    if half:
        nodes += [helper.make_node("Cast", [f"{n}_h"], [n], to=kc._NP2ONNX[np.dtype(np.float32)]) for n in OUTPUTS]
    graph = helper.make_graph(nodes, "test_decode_layer", vis, outs)
    functions = [kc.function_proto("DecodeLayer")] if with_function else []
    opsets = [helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 10
    return model.SerializeToString()


def run_in_place(sess, inputs: dict, device: str = "cpu") -> tuple[np.ndarray, ...]:
    """One float32 run through IOBinding with each cache's buffer bound as its output too (the
    session's state binding); returns (y, k_cache', v_cache') read back from the buffers."""
    import onnxruntime as ort

    binding = sess.io_binding()
    arrays = {n: np.array(a, order="C", copy=True) for n, a in inputs.items()}  # held here: the OrtValues wrap them
    arrays["y"] = np.zeros_like(inputs["x"])
    values = {n: ort.OrtValue.ortvalue_from_numpy(a, device, 0) for n, a in arrays.items()}
    y = values.pop("y")
    for name, v in values.items():
        binding.bind_ortvalue_input(name, v)
    for name, v in zip(OUTPUTS, (y, values["k_cache"], values["v_cache"]), strict=True):
        binding.bind_ortvalue_output(name, v)
    sess.run_with_iobinding(binding)
    return tuple(np.array(v.numpy(), copy=True) for v in (y, values["k_cache"], values["v_cache"]))
