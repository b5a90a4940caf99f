"""Shared by the RopeCachedAttention tests (CPU and GPU): cases, an independent numpy reference built
from kernel_cases' float32 references (not the package's), and one-node models with the op's three
outputs."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
from onnx import helper

THETA = 10000.0
OUTPUTS = ("out", "k_cache_out", "v_cache_out")


def case_inputs(rng, positions: int | list[int], scale: float, widths: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    """Random float32 inputs of ``widths`` (name -> (rows, width)) and kv_pos (int64): 2-D for an int
    position, with a leading batch dimension for a list of positions."""
    batch = [] if isinstance(positions, int) else [len(positions)]
    pos = [positions] if isinstance(positions, int) else list(positions)
    out = {name: (rng.standard_normal([*batch, *shape]) * scale).astype(np.float32) for name, shape in widths.items()}
    return {**out, "kv_pos": np.array(pos, np.int64)}


def make_case(rng, max_seq: int, t: int, h: int, kvh: int, hd: int, positions: int | list[int], scale: float = 1.0):
    """Inputs (float32; kv_pos int64) of one case: 2-D for an int position, a batch for a list."""
    widths = {
        "q": (t, h * hd),
        "k_new": (t, kvh * hd),
        "v_new": (t, kvh * hd),
        "k_cache": (max_seq, kvh * hd),
        "v_cache": (max_seq, kvh * hd),
    }
    return case_inputs(rng, positions, scale, widths)


def reference(inputs: dict, h: int, kvh: int, hd: int, rounding=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, k_cache', v_cache'): Rope, CacheWrite and CachedAttention's float32/float64 references per
    sequence. ``rounding``: a function applied to the rotated rows (a half type's rounding: the
    unfused Rope's output is stored in the element type before attention reads it)."""
    rnd = rounding or (lambda x: x)
    two_d = inputs["q"].ndim == 2
    seqs = {k: (v[None] if two_d else v) for k, v in inputs.items() if k != "kv_pos"}
    outs, ks, vs = [], [], []
    for b, p in enumerate(int(x) for x in inputs["kv_pos"]):
        k_all = kc.cache_write_ref(rnd(kc.rope_ref(seqs["k_new"][b], THETA, hd, p)), seqs["k_cache"][b], p)
        v_all = kc.cache_write_ref(seqs["v_new"][b], seqs["v_cache"][b], p)
        q_rot = rnd(kc.rope_ref(seqs["q"][b], THETA, hd, p))
        outs.append(kc.cached_attention_ref(q_rot, k_all, v_all, p, h, kvh, hd))
        ks.append(k_all)
        vs.append(v_all)
    stack = (lambda x: x[0]) if two_d else np.stack
    return stack(outs), stack(ks), stack(vs)


def make_model(
    inputs: dict, h: int, kvh: int, hd: int, *, dtype=np.float32, with_function: bool = True, unknown_shapes: bool = False
) -> bytes:
    """A RopeCachedAttention model with float32 inputs and outputs named as the op's; for a half
    ``dtype`` the float inputs are cast to it in front of the node and its outputs back to float32."""
    shapes = [list(inputs[k].shape) for k in ("q", "k_cache", "v_cache")]
    attrs = {"num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "theta": THETA}
    return one_node_model("RopeCachedAttention", inputs, OUTPUTS, shapes, attrs, dtype, with_function, unknown_shapes)


def one_node_model(op: str, inputs: dict, outputs, shapes, attrs: dict, dtype, with_function: bool, unknown_shapes: bool) -> bytes:
    """A model of one ``op`` node with float32 inputs and outputs (``shapes``; none with ``unknown_shapes``, so
    the values reach the kernel unchecked); for a half ``dtype`` the float inputs are cast to it in front of
    the node and its outputs back to float32; ``with_function``: the op's function body in the model."""
    half = np.dtype(dtype) != np.float32
    vis = [helper.make_tensor_value_info(n, kc._NP2ONNX[a.dtype], None if unknown_shapes else list(a.shape)) for n, a in inputs.items()]
    shapes = [None] * len(outputs) if unknown_shapes else shapes
    outs = [helper.make_tensor_value_info(n, kc._NP2ONNX[np.dtype(np.float32)], s) for n, s in zip(outputs, shapes, strict=True)]
    elem = kc._NP2ONNX[np.dtype(dtype)]
    nodes, ins = [], []
    for name in inputs:
        if half and name != "kv_pos":
            nodes.append(helper.make_node("Cast", [name], [f"{name}_h"], to=elem))
            ins.append(f"{name}_h")
        else:
            ins.append(name)
    node_outs = [f"{n}_h" for n in outputs] if half else list(outputs)
    nodes.append(helper.make_node(op, ins, node_outs, domain=kc.DOMAIN, name=op, **attrs))
    if half:
        nodes += [helper.make_node("Cast", [f"{n}_h"], [n], to=kc._NP2ONNX[np.dtype(np.float32)]) for n in outputs]
    graph = helper.make_graph(nodes, f"test_{op}", vis, outs)
    functions = [kc.function_proto(op)] if with_function else []
    opsets = [helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 10
    return model.SerializeToString()


def rounded(inputs: dict, dtype) -> dict:
    """The float inputs rounded to ``dtype`` and back to float32 (what a half model computes on)."""
    return {k: v.astype(dtype).astype(np.float32) if v.dtype == np.float32 else v for k, v in inputs.items()}


def run_in_place(sess, inputs: dict, device: str = "cpu") -> tuple[np.ndarray, ...]:
    """One float32 run through IOBinding with each cache's buffer bound as its output too (the
    session's state binding); returns (out, k_cache', v_cache') read back from the buffers."""
    import onnxruntime as ort

    binding = sess.io_binding()
    # Host arrays held here: a CPU OrtValue made from numpy wraps the array's memory.
    arrays = {n: np.array(a, order="C", copy=True) for n, a in inputs.items()}
    arrays["out"] = np.zeros_like(inputs["q"])
    values = {n: ort.OrtValue.ortvalue_from_numpy(a, device, 0) for n, a in arrays.items()}
    out = values.pop("out")
    for name, v in values.items():
        binding.bind_ortvalue_input(name, v)
    for name, v in zip(OUTPUTS, (out, values["k_cache"], values["v_cache"]), strict=True):
        binding.bind_ortvalue_output(name, v)
    sess.run_with_iobinding(binding)
    return tuple(np.array(v.numpy(), copy=True) for v in (out, values["k_cache"], values["v_cache"]))


def decode_in_lockstep(fused, plain, starts: np.ndarray, steps: int, vocab: int) -> None:
    """Run two decode sessions on the same random tokens at positions ``starts + step`` and require
    the same logits after every step."""
    rng = np.random.default_rng(3)
    for step in range(steps):
        tokens = rng.integers(0, vocab, len(starts)).tolist()
        for s in (fused, plain):
            s.set_input_u32("input_ids", tokens)
            s.set_input_u32("kv_pos", (starts + step).tolist())
            s.step()
        np.testing.assert_allclose(
            fused.read_output_by_index(0), plain.read_output_by_index(0), rtol=1e-5, atol=1e-5, err_msg=f"step {step}"
        )
