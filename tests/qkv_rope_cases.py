"""Shared by the QKVRopeCacheWrite tests (CPU and GPU): cases, an independent numpy reference built from
kernel_cases' float32 references (not the package's), and one-node models with the op's three outputs."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
from onnx import helper
from rope_attention_cases import case_inputs, one_node_model

THETA = 10000.0
OUTPUTS = ("q_rot", "k_cache_out", "v_cache_out")
INPUTS = ("qkv", "k_cache", "v_cache", "kv_pos")


def make_case(rng, max_seq: int, t: int, h: int, kvh: int, hd: int, positions: int | list[int], scale: float = 1.0):
    """Inputs (float32; kv_pos int64) of one case: 2-D for an int position, a batch for a list."""
    widths = {"qkv": (t, (h + 2 * kvh) * hd), "k_cache": (max_seq, kvh * hd), "v_cache": (max_seq, kvh * hd)}
    return case_inputs(rng, positions, scale, widths)


def reference(inputs: dict, h: int, kvh: int, hd: int, rounding=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q_rot, k_cache', v_cache'): the pieces of qkv through Rope and CacheWrite's float32 references per
    sequence. ``rounding``: a half type's rounding of the rotated rows (Rope stores them in the element type)."""
    rnd = rounding or (lambda x: x)
    two_d = inputs["qkv"].ndim == 2
    seqs = {k: (v[None] if two_d else v) for k, v in inputs.items() if k != "kv_pos"}
    qw, kvw = h * hd, kvh * hd
    qs, ks, vs = [], [], []
    for b, p in enumerate(int(x) for x in inputs["kv_pos"]):
        x = seqs["qkv"][b]
        qs.append(rnd(kc.rope_ref(x[:, :qw], THETA, hd, p)))
        ks.append(kc.cache_write_ref(rnd(kc.rope_ref(x[:, qw : qw + kvw], THETA, hd, p)), seqs["k_cache"][b], p))
        vs.append(kc.cache_write_ref(x[:, qw + kvw :], seqs["v_cache"][b], p))
    stack = (lambda x: x[0]) if two_d else np.stack
    return stack(qs), stack(ks), stack(vs)


def out_shapes(inputs: dict, h: int, hd: int) -> list[list[int]]:
    return [[*inputs["qkv"].shape[:-1], h * hd], list(inputs["k_cache"].shape), list(inputs["v_cache"].shape)]


def make_model(
    inputs: dict, h: int, kvh: int, hd: int, *, dtype=np.float32, with_function: bool = True, unknown_shapes: bool = False
) -> bytes:
    """A QKVRopeCacheWrite model with float32 inputs and outputs named as the op's; for a half ``dtype`` the
    float inputs are cast to it in front of the node and its outputs back to float32."""
    attrs = {"num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "theta": THETA}
    return one_node_model("QKVRopeCacheWrite", inputs, OUTPUTS, out_shapes(inputs, h, hd), attrs, dtype, with_function, unknown_shapes)


def make_rope_model(x: np.ndarray, hd: int, dtype) -> bytes:
    """One ``Rope`` node (offset_dyn = kv_pos) in ``dtype``, float32 in and out: the unfused op q_rot must equal."""
    elem, f32 = kc._NP2ONNX[np.dtype(dtype)], kc._NP2ONNX[np.dtype(np.float32)]
    vis = [
        helper.make_tensor_value_info("x", f32, list(x.shape)),
        helper.make_tensor_value_info("kv_pos", kc._NP2ONNX[np.dtype(np.int64)], None),
    ]
    nodes = [
        helper.make_node("Cast", ["x"], ["xh"], to=elem),
        helper.make_node("Rope", ["xh", "kv_pos"], ["yh"], domain=kc.DOMAIN, theta=THETA, head_dim=hd, offset=0),
        helper.make_node("Cast", ["yh"], ["y"], to=f32),
    ]
    graph = helper.make_graph(nodes, "rope", vis, [helper.make_tensor_value_info("y", f32, list(x.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)])
    model.ir_version = 10
    return model.SerializeToString()


def run_in_place(sess, inputs: dict, h: int, hd: int, device: str = "cpu") -> tuple[np.ndarray, ...]:
    """One float32 run through IOBinding with each cache's buffer bound as its output too (the session's
    state binding); returns (q_rot, k_cache', v_cache') read back from the buffers."""
    import onnxruntime as ort

    binding = sess.io_binding()
    arrays = {n: np.array(a, order="C", copy=True) for n, a in inputs.items()}  # held here: the OrtValues wrap them on the CPU
    arrays["q_rot"] = np.zeros(out_shapes(inputs, h, hd)[0], np.float32)
    values = {n: ort.OrtValue.ortvalue_from_numpy(a, device, 0) for n, a in arrays.items()}
    q_rot = values.pop("q_rot")
    for name, v in values.items():
        binding.bind_ortvalue_input(name, v)
    for name, v in zip(OUTPUTS, (q_rot, values["k_cache"], values["v_cache"]), strict=True):
        binding.bind_ortvalue_output(name, v)
    sess.run_with_iobinding(binding)
    return tuple(np.array(v.numpy(), copy=True) for v in (q_rot, values["k_cache"], values["v_cache"]))
