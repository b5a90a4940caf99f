"""transforms.swiglu_packed_fusion: a prefill's split of its merged gate|up product and the SwiGLU reading it
become one ``swiglu_packed``.

The tiny LLaMA's outputs are those of the unfused graph, in float64 and through ONNX Runtime with the CPU
kernels; every layer's split + SwiGLU is fused; decode steps and prefills of up to 16 rows (no merged
product) are left as they are; a split with another reader, one that is not two equal halves of the last
axis, or halves handed to SwiGLU the other way round stays; ``LlamaRunner(swiglu_packed=...)`` keeps its
prefill's logits and tokens."""

from __future__ import annotations

from collections import Counter

import kernel_cases as kc
import numpy as np
import pytest
from conftest import live_nodes
from meganeura_onnx.models import llama
from prefill_fusion_checks import assert_fused_logits_run_on_cpu_kernels, assert_runner_switch_keeps_the_prefill, feeds

from meganeura_onnx import Graph
from meganeura_onnx.reference import evaluate
from meganeura_onnx.transforms.rewrite import optimize
from meganeura_onnx.transforms.swiglu_packed_fusion import fuse_swiglu_packed

CFG = llama.PRESETS["tiny"]  # 2 layers, hidden 64
LAYERS = CFG.num_hidden_layers
LIB = kc.kernel_library("cpu")


def counts(g: Graph) -> Counter:
    """Live ops, with the splits into two equal halves counted apart (a LLaMA's gate|up split)."""
    c = Counter(n.op for n in live_nodes(g))
    c["halves"] = sum(n.op == "split" and len(set(n.attrs["sizes"])) == 1 == len(n.attrs["sizes"]) - 1 for n in live_nodes(g))
    return c


@pytest.mark.parametrize("mode,rows", [("logits", 24), ("prefill", 32)])
def test_every_layers_split_and_swiglu_become_one_packed_node_with_the_unfused_outputs(mode, rows):
    g = llama.build_graph(CFG, mode, rows, 64)
    plain, _ = optimize(g, stage="inference", swiglu_packed=False)
    out, report = optimize(g, stage="inference")  # on by default with the other inference fusions
    before, after = counts(plain), counts(out)
    assert before["swiglu_packed"] == 0 and before["swiglu"] == LAYERS and before["halves"] == 2 * LAYERS, before
    assert after["swiglu_packed"] == LAYERS and after["swiglu"] == 0 and after["halves"] == 0, after
    assert report.rules_fired["fuse_swiglu_packed"] == LAYERS
    assert len(live_nodes(out)) == len(live_nodes(plain)) - 2 * LAYERS  # two pieces and a swiglu -> one node
    f = feeds(g, CFG.vocab_size, rows)
    for w, r in zip(evaluate(plain, f, np.float64), evaluate(out, f, np.float64), strict=True):
        np.testing.assert_allclose(r, w, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
def test_packed_logits_through_onnx_runtime_with_the_cpu_kernels_match_the_float64_reference():
    assert_fused_logits_run_on_cpu_kernels(CFG, LIB, {"SwiGLUPacked": LAYERS, "SwiGLU": 0})


def test_decode_steps_and_prefills_of_up_to_16_rows_are_left_as_they_are():
    for mode, rows in (("decode", 1), ("prefill", 16)):
        g = llama.build_graph(CFG, mode, rows, 64)
        (on, r_on), (off, _) = (optimize(g, stage="inference", swiglu_packed=flag) for flag in (True, False))
        assert "fuse_swiglu_packed" not in r_on.rules_fired and counts(on) == counts(off), (mode, rows)
        assert counts(on)["swiglu_packed"] == 0
    symbolic, _ = optimize(llama.build_graph(CFG, "past"), stage="inference")  # rows: batch*seq
    assert counts(symbolic)["swiglu_packed"] == LAYERS


def small_graph(kind: str) -> tuple[Graph, dict[str, np.ndarray]]:
    """``swiglu`` of a split of ``y = x @ w^T`` ([32, 2F], F = 6), as ``kind`` says: ``plain`` (piece 0 also read by
    a node no output depends on); ``reader`` (that node a second output); ``output`` (piece 1 an output); ``swapped`` (swiglu(up, gate)); ``three``
    (pieces (6, 6, 4)); ``rows`` (a split of the rows, axis 0)."""
    g = Graph()
    x = g.input("x", [32, 8])
    width = 16 if kind == "three" else 12
    y = g.matmul_bt(x, g.parameter("w", [width, 8]))
    if kind == "rows":
        gate, up = g.split(y, [16, 16], 0)
    else:
        gate, up, *_ = g.split(y, [6, 6, 4] if kind == "three" else [6, 6], 1)
    h = g.swiglu(up, gate) if kind == "swapped" else g.swiglu(gate, up)
    dead = g.mul(gate, gate)  # read by an output only with "reader"
    g.set_outputs([h, *{"reader": [dead], "output": [up]}.get(kind, [])])
    rng = np.random.default_rng(2)
    return g, {"x": rng.standard_normal((32, 8)).astype(np.float32), "w": rng.standard_normal((width, 8)).astype(np.float32)}


def test_a_split_read_only_by_swiglu_as_gate_then_up_is_fused():
    g, f = small_graph("plain")
    out, made = fuse_swiglu_packed(g)
    assert made == 1 and counts(out)["swiglu_packed"] == 1 and counts(out)["split"] == 0
    assert [out.node(o).op for o in out.outputs()] == ["swiglu_packed"]
    np.testing.assert_allclose(evaluate(out, f, np.float64)[0], evaluate(g, f, np.float64)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["reader", "output", "swapped", "three", "rows"])
def test_a_split_with_another_reader_or_not_two_halves_of_the_last_axis_in_order_stays(kind):
    g, _ = small_graph(kind)
    out, made = fuse_swiglu_packed(g)
    assert made == 0 and out is g
    fused, _ = optimize(g, stage="inference", swiglu_packed=True)
    assert counts(fused)["swiglu_packed"] == 0


@pytest.mark.skipif(LIB is None, reason="the CPU kernel library is not built (make kernels)")
def test_llama_runner_swiglu_packed_option_keeps_the_prefill_logits_and_tokens():
    """``LlamaRunner(swiglu_packed=...)`` reaches the session builder: True packs every layer's SwiGLU, False
    none, and the prefill's logits and the greedy token after it match."""
    assert_runner_switch_keeps_the_prefill(CFG, "swiglu_packed", "fuse_swiglu_packed", LAYERS, seed=5)
