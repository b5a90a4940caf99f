"""transforms.qkv_rope_fusion: a prefill's split of its merged q/k/v product, the ropes and the cache writes
become one ``qkv_rope_cache_write``.

The tiny LLaMA's prefill (one sequence and a batch) gives the unfused graph's logits and caches, in float64
and through ONNX Runtime with the CPU kernels; every layer is fused; decode steps and prefills of up to 16
rows are left to the decode fusions; a piece read by another node stays unfused; ``LlamaRunner`` takes the
option and keeps its tokens."""

from __future__ import annotations

from collections import Counter

import kernel_cases as kc
import numpy as np
import pytest
from conftest import live_nodes
from meganeura_onnx.models import llama
from prefill_fusion_checks import assert_runner_switch_keeps_the_prefill

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.init import default_parameters
from meganeura_onnx.ops import OPS
from meganeura_onnx.reference import evaluate
from meganeura_onnx.transforms.rewrite import optimize

CFG = llama.PRESETS["tiny"]  # 2 layers
LAYERS = CFG.num_hidden_layers
LIB = kc.kernel_library("cpu")
FUSED = "qkv_rope_cache_write"


def fused(g: Graph) -> int:
    return sum(n.op == FUSED and n.attrs["index"] == 0 for n in live_nodes(g))


def cache_writers(g: Graph) -> dict[str, int]:
    """Cache input name -> the live node that writes it (its next value)."""
    out = {}
    for n in live_nodes(g):
        written = OPS[n.op].written_input(n.attrs)
        if written is not None:
            out[g.node(n.inputs[OPS[n.op].inputs.index(written)]).attrs["name"]] = n.id
    return out


def feeds(g: Graph, rows: int, batch: int | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters, tokens, random caches, and each sequence's position (5, 0, 9, ...)."""
    rng = np.random.default_rng(seed)
    out = default_parameters(g, seed)
    out["input_ids"] = rng.integers(0, CFG.vocab_size, rows * (batch or 1)).astype(np.uint32)
    for n in g.nodes():
        name = n.attrs.get("name", "")
        if n.op == "input" and name.endswith("_cache"):
            out[name] = rng.standard_normal(n.ty.shape).astype(np.float32)
    out["kv_pos"] = np.array([5, 0, 9][: batch or 1], np.uint32)
    out["last_row"] = np.array([b * rows + rows - 1 for b in range(batch or 1)], np.uint32)  # flat row indexes
    return out


def outputs_and_caches(g: Graph, f: dict) -> dict[str, np.ndarray]:
    writers = cache_writers(g)
    values = evaluate(g, f, np.float64, nodes=[*g.outputs(), *writers.values()])
    return dict(zip([*g.output_names(), *writers], values, strict=True))


@pytest.mark.parametrize("batch", [None, 3], ids=["one-sequence", "batch"])
def test_fused_prefill_gives_the_unfused_logits_and_caches(batch):
    g = llama.build_graph(CFG, "prefill", 24, 64, batch)
    plain, _ = optimize(g, stage="inference", qkv_rope_cache=False)
    out, report = optimize(g, stage="inference")  # on by default with the other inference fusions
    assert fused(plain) == 0 and fused(out) == LAYERS and report.rules_fired["fuse_qkv_rope_cache_write"] == LAYERS
    ops = Counter(n.op for n in live_nodes(out))
    assert ops["rope"] == ops["rope_cache_write"] == ops["cache_write"] == 0
    assert ops["split"] == 0 and ops["swiglu_packed"] == LAYERS  # the MLP's gate/up split goes into swiglu_packed
    assert len(cache_writers(out)) == 2 * LAYERS and all(out.node(i).op == FUSED for i in cache_writers(out).values())
    f = feeds(g, 24, batch)
    want, got = outputs_and_caches(plain, f), outputs_and_caches(out, f)
    assert want.keys() == got.keys() and len(want) == 1 + 2 * LAYERS
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
@pytest.mark.parametrize("batch", [None, 3], ids=["one-sequence", "batch"])
def test_fused_prefill_session_with_the_cpu_kernels_matches_the_unfused_session(batch):
    g = llama.build_graph(CFG, "prefill", 24, 64, batch)
    f = feeds(g, 24, batch, seed=2)
    params = default_parameters(g, 2)
    # merge_projections: the fusion reads the merged q/k/v product, which CPU sessions do not make by default
    sessions = {
        flag: build_inference_session(g, "cpu", parameters=params, qkv_rope_cache=flag, merge_projections=True) for flag in (False, True)
    }
    assert sessions[True].report.rules_fired.get("fuse_qkv_rope_cache_write") == LAYERS
    assert "fuse_qkv_rope_cache_write" not in sessions[False].report.rules_fired
    assert sessions[True].plan().kernels().get("QKVRopeCacheWrite") == "kernel"
    for s in sessions.values():
        for name in s.inplace_state:
            s.set_input(name, f[name])
        s.set_input_u32("input_ids", f["input_ids"].tolist())
        s.set_input_u32("kv_pos", f["kv_pos"].tolist())
        s.set_input_u32("last_row", f["last_row"].tolist())
        s.step()
    np.testing.assert_allclose(sessions[True].read_output_by_index(0), sessions[False].read_output_by_index(0), rtol=1e-5, atol=1e-5)
    assert sorted(sessions[True].inplace_state) == sorted(sessions[False].inplace_state)
    for name in sessions[True].inplace_state:
        np.testing.assert_allclose(sessions[True].read_state(name), sessions[False].read_state(name), rtol=1e-5, atol=1e-5, err_msg=name)


def test_decode_steps_and_prefills_of_up_to_16_rows_are_left_to_the_decode_fusions():
    for mode, rows, batch, want in (("decode", 1, None, 0), ("decode", 1, 4, 0), ("prefill", 16, None, 0), ("prefill", 17, None, LAYERS)):
        out, report = optimize(llama.build_graph(CFG, mode, rows, 64, batch), stage="inference")
        assert fused(out) == report.rules_fired.get("fuse_qkv_rope_cache_write", 0) == want, (mode, rows, batch)
    decode, report = optimize(llama.build_graph(CFG, "decode", 1, 64), stage="inference", decode_layer=False)
    assert report.rules_fired["fuse_rope_cached_attention"] == LAYERS and fused(decode) == 0


def small_graph(k_also_an_output: bool = False, v_rows: int = 32) -> Graph:
    """One layer's merged q/k/v product (24 rows, 4 heads of 4, 2 KV heads) placed by the four plain ops, the
    rotated q and both caches the outputs."""
    g = Graph()
    x, w = g.input("x", [24, 16]), g.parameter("w", [16 + 2 * 8, 16])
    k_cache, v_cache = g.input("k_cache", [32, 8]), g.input("v_cache", [v_rows, 8])
    pos = g.input_u32("kv_pos", [1])
    q, k, v = g.split(g.matmul_bt(x, w), [16, 8, 8], axis=1)
    q_rot = g.rope_dynamic_offset(q, 10000.0, pos, 4)
    k_all = g.rope_cache_write(k, k_cache, pos, 10000.0, 4)
    v_all = g.cache_write(v, v_cache, pos)
    g.set_outputs([q_rot, k_all, v_all, g.mul(k, k)] if k_also_an_output else [q_rot, k_all, v_all])
    return g


@pytest.mark.parametrize(
    "kw,want", [({}, 1), ({"k_also_an_output": True}, 0), ({"v_rows": 40}, 0)], ids=["plain", "k-read-elsewhere", "caches-differ"]
)
def test_only_pieces_read_by_the_four_ops_alone_and_caches_of_one_shape_are_fused(kw, want):
    g = small_graph(**kw)
    out, report = optimize(g, stage="inference")
    assert fused(out) == report.rules_fired.get("fuse_qkv_rope_cache_write", 0) == want
    rng = np.random.default_rng(4)
    f = {n.attrs["name"]: rng.standard_normal(n.ty.shape) for n in g.nodes() if n.op in ("input", "parameter")}
    f["kv_pos"] = np.array([6], np.uint32)
    for w, r in zip(evaluate(g, f, np.float64), evaluate(out, f, np.float64), strict=True):
        np.testing.assert_allclose(r, w, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(LIB is None, reason="the CPU kernel library is not built (make kernels)")
def test_llama_runner_qkv_rope_cache_option_fuses_the_prefill_and_keeps_its_tokens():
    """``LlamaRunner(qkv_rope_cache=...)`` reaches the session builder: True fuses each prefill layer, and the
    prefill's logits and the greedy token after it match the unfused runner."""
    assert_runner_switch_keeps_the_prefill(CFG, "qkv_rope_cache", "fuse_qkv_rope_cache_write", LAYERS)


def test_a_session_of_the_fused_graph_checks_positions_by_the_fused_op():
    out, _ = optimize(llama.build_graph(CFG, "prefill", 24, 64, 3), stage="inference")
    s = build_inference_session(out, "cpu", optimize=False)
    assert s.position_limits["kv_pos"] == 64 - 24
    with pytest.raises(ValueError, match=r"qkv_rope_cache_write uses rows \[kv_pos, kv_pos \+ 24\) of k_cache \(64 rows\)"):
        s.set_input_u32("kv_pos", [0, 41, 3])
    s.set_input_u32("kv_pos", [0, 40, 3])
