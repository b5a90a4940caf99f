"""transforms.merge_projections: products sharing their left operand run as one product and a split.

A LLaMA train step's q/k/v and gate/up become one product each (forward, dX and dW), with the same
loss, gradients and AdamW updates as the separate products; a prefill's logits are unchanged, and a
decode step keeps its separate products for the decode-step fusions."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import live_nodes
from meganeura_onnx.models import llama

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.export import to_model
from meganeura_onnx.export.precision import half_storage_inputs, lower_precision
from meganeura_onnx.init import default_parameters
from meganeura_onnx.reference import evaluate
from meganeura_onnx.runtime.inference import _optimized
from meganeura_onnx.runtime.training import build_session
from meganeura_onnx.transforms.autodiff import gradients
from meganeura_onnx.transforms.merge_projections import merge_projections
from meganeura_onnx.transforms.rewrite import optimize

CFG = llama.PRESETS["tiny"]  # 2 layers, hidden 64, 4 heads / 2 KV heads of 16, intermediate 128
SEQ = 24
PRODUCTS = ("matmul", "matmul_bt", "matmul_at", "gemm")
GROUPED = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def train_graph(in_out: bool) -> Graph:
    """The tiny LLaMA's next-token loss over ``SEQ`` tokens, fused attention as in training; projection
    weights ``[out, in]`` (``matmul_bt``) or ``[in, out]`` (``in_out``: ``matmul``)."""
    if not in_out:
        return llama.build_graph(CFG, "train", SEQ)
    g = Graph()
    logits = llama.LlamaForCausalLM(g, CFG, in_out=True).forward(g, g.input_u32("input_ids", [SEQ]), fused_attention=True)
    g.set_outputs([g.sparse_cross_entropy_loss(logits, g.input_u32("labels", [SEQ]))])
    return g


def tokens(seed: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(0, CFG.vocab_size, SEQ + 1).astype(np.uint32)
    return {"input_ids": ids[:-1], "labels": ids[1:]}


def varied_parameters(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    params = default_parameters(g, seed)
    rng = np.random.default_rng(seed)
    for k in params:
        if "norm" in k:  # away from the all-ones init, so the norm weights' gradients matter
            params[k] = rng.uniform(0.5, 1.5, params[k].shape).astype(np.float32)
    return params


def live_ops(g: Graph) -> Counter:
    return Counter(n.op for n in live_nodes(g))


def gradient_graph(g: Graph, merge: bool) -> tuple[Graph, list[str]]:
    """The forward stage as training runs it (optionally merged), then autodiff: outputs the loss and
    every parameter's gradient (no train-step optimizer, so products are counted as autodiff made them)."""
    fwd, report = optimize(g, stage="forward", merge_projections=merge)
    assert report.rules_fired.get("merge_projections", 0) == (2 * CFG.num_hidden_layers if merge else 0)
    fwd = fwd.toposort()
    params = dict(fwd.leaves("parameter"))
    res = gradients(fwd, fwd.outputs()[0], list(params.values()))
    fwd.set_outputs({"loss": fwd.outputs()[0], **{f"grad.{n}": res.grads[p] for n, p in params.items()}})
    return fwd, list(params)


@pytest.mark.parametrize("in_out", [False, True], ids=["out_in", "in_out"])
def test_train_graph_merges_qkv_and_gate_up_and_its_float64_loss_and_gradients_are_unchanged(in_out):
    g = train_graph(in_out)
    separate, names = gradient_graph(g, merge=False)
    merged, names_merged = gradient_graph(g, merge=True)
    assert names == names_merged
    layers = CFG.num_hidden_layers
    ops_separate, ops_merged = live_ops(separate), live_ops(merged)
    # Per layer: forward q, k, v, o, gate, up, down and a dX and a dW product each (21); merged, the
    # q|k|v and gate|up groups are one product each (12). The LM head: forward, dX, dW.
    assert sum(ops_separate[p] for p in PRODUCTS) == 21 * layers + 3, ops_separate
    assert sum(ops_merged[p] for p in PRODUCTS) == 12 * layers + 3, ops_merged
    # Weights joined in the forward, pieces' gradients joined for the backward: 4 cats per layer;
    # the forward split into 3 + 2 pieces and the weight gradient's split into 3 + 2.
    assert ops_merged["cat"] == 4 * layers and ops_merged["split"] == 10 * layers, ops_merged
    assert ops_separate["cat"] == ops_separate["split"] == 0
    # No Adds summing dX parts: the rest of the backward has the same Adds (residual stream).
    assert ops_merged["add"] == ops_separate["add"] - 3 * layers, (ops_separate["add"], ops_merged["add"])
    feeds = {**varied_parameters(g), **tokens(1)}
    want = evaluate(separate, feeds, np.float64)
    got = evaluate(merged, feeds, np.float64)
    for name, w, x in zip(["loss", *names], want, got, strict=True):
        np.testing.assert_allclose(x, w, rtol=1e-12, atol=1e-14 * max(1.0, np.abs(w).max()), err_msg=name)


def _train(g: Graph, params: dict, merge: bool, steps: int) -> tuple[list[float], dict[str, np.ndarray]]:
    s = build_session(g, optimizer="adamw", parameters=params, merge_projections=merge)
    s.set_adamw(3e-3, weight_decay=0.1)
    losses = []
    for k in range(steps):
        for name, ids in tokens(k % 3).items():
            s.set_input_u32(name, ids)
        s.step()
        losses.append(s.read_loss())
    return losses, {n: s.read_param(n) for n in params}


@pytest.mark.parametrize("in_out", [False, True], ids=["out_in", "in_out"])
def test_adamw_steps_with_merged_projections_match_the_separate_products(in_out):
    g = train_graph(in_out)
    params = varied_parameters(g, 2)
    losses_separate, params_separate = _train(g, params, merge=False, steps=6)
    losses_merged, params_merged = _train(g, params, merge=True, steps=6)
    assert losses_merged[-1] < losses_merged[0]  # it trains
    np.testing.assert_allclose(losses_merged, losses_separate, rtol=1e-5)
    for name, want in params_separate.items():  # tighter than the PyTorch parity tests' rtol 1e-3, atol 1e-5
        np.testing.assert_allclose(params_merged[name], want, rtol=1e-4, atol=1e-6, err_msg=name)


def test_gradients_only_session_with_merged_projections_reports_every_parameter_gradient():
    g = train_graph(False)
    params = varied_parameters(g, 3)
    sessions = [build_session(g, parameters=params, merge_projections=m) for m in (False, True)]
    for s in sessions:
        for name, ids in tokens(4).items():
            s.set_input_u32(name, ids)
        s.step()
    separate, merged = sessions
    assert merged.read_loss() == pytest.approx(separate.read_loss(), rel=1e-6)
    for name in params:
        want = separate.read_grad(name)
        err = np.abs(merged.read_grad(name) - want).max()
        assert err <= 1e-5 * np.abs(want).max(), f"gradient of {name} differs by {err:.3g}"
    nodes = Counter(n.op_type for n in merged.onnx_model().graph.node)
    # Per group: the forward and the weight gradient's Split, the weights' and the pieces' gradients' Concat.
    assert nodes["Split"] == nodes["Concat"] == 4 * CFG.num_hidden_layers, nodes


def test_split_outputs_feed_what_the_separate_products_fed():
    """In the exported train step the forward Split's outputs go where the q/k/v and gate/up products'
    outputs went (the Reshapes in front of Rope and attention, SwiGLU and its gradient): no copies
    or transposes besides the one Split."""
    g = train_graph(False)
    models = [build_session(g, optimizer="adamw", merge_projections=m).onnx_model() for m in (False, True)]

    def readers(model, produced: set[str]) -> Counter:
        return Counter(n.op_type for n in model.graph.node for t in n.input if t in produced)

    separate, merged = models
    forward = [n for n in separate.graph.node if n.op_type == "Gemm" and any(a.name == "transB" and a.i for a in n.attribute)]
    products = {n.output[0] for n in forward if any(w in n.input[1] for w in GROUPED)}
    splits = [n for n in merged.graph.node if n.op_type == "Split" and n.attribute[0].i == 1]  # axis 1: the forward splits
    assert len(products) == 5 * CFG.num_hidden_layers and len(splits) == 2 * CFG.num_hidden_layers
    assert readers(merged, {o for n in splits for o in n.output}) == readers(separate, products)


def prefill_sessions(rows: int, in_out: bool, **kw):
    g = llama.build_graph(CFG, "prefill", rows, 64, in_out_weights=in_out)
    params = default_parameters(g, 5)
    return [build_inference_session(g, parameters=params, merge_projections=m, **kw) for m in (False, True)]


@pytest.mark.parametrize("in_out", [False, True], ids=["out_in", "in_out"])
def test_prefill_merges_its_projections_and_its_logits_are_unchanged(in_out):
    # The q/k/v and gate/up pieces as their own nodes (QKVRopeCacheWrite and SwiGLUPacked, on by default with our CPU
    # kernels, would read the merged products themselves: tests/test_qkv_rope_fusion.py, tests/test_swiglu_packed_fusion.py).
    sessions = prefill_sessions(32, in_out, qkv_rope_cache=False, swiglu_packed=False)
    ids = np.random.default_rng(6).integers(0, CFG.vocab_size, 32).astype(np.uint32)
    for s in sessions:
        s.set_input_u32("input_ids", ids)
        s.set_input_u32("kv_pos", [0])
        s.set_input_u32("last_row", [31])
        s.step()
    separate, merged = sessions
    np.testing.assert_allclose(merged.read_output_by_index(0), separate.read_output_by_index(0), rtol=1e-5, atol=1e-6)
    for name in ("model.layers.1.self_attn.k_cache", "model.layers.1.self_attn.v_cache"):  # the cache writes too
        np.testing.assert_allclose(merged.read_state(name), separate.read_state(name), rtol=1e-5, atol=1e-6)
    layers = CFG.num_hidden_layers
    assert merged.report.rules_fired["merge_projections"] == 2 * layers
    counts = [Counter(n.op_type for n in s.onnx_model().graph.node) for s in sessions]
    products = [c["Gemm"] + c["MatMul"] for c in counts]
    assert products[1] == products[0] - 3 * layers and counts[1]["Split"] == counts[1]["Concat"] == 2 * layers, counts
    # The Split's pieces go straight to the kernels that read the separate products' outputs.
    nodes = list(merged.onnx_model().graph.node)
    readers = Counter(u.op_type for n in nodes if n.op_type == "Split" for u in nodes if set(n.output) & set(u.input))
    assert readers == Counter({"Rope": layers, "RopeCacheWrite": layers, "CacheWrite": layers, "SwiGLU": layers}), readers


def test_decode_steps_and_prefills_of_up_to_16_rows_keep_separate_products_for_the_decode_fusions():
    for rows, merged in ((1, False), (16, False), (17, True)):
        g = llama.build_graph(CFG, "prefill" if rows > 1 else "decode", rows, 64)
        # the five fused ops per layer; the gate/up split kept (SwiGLUPacked would read the merged product itself)
        out, _ = optimize(g, stage="inference", decode_fusion=True, decode_layer=False, swiglu_packed=False)
        ops = live_ops(out)
        assert (ops["split"] > 0) == merged, (rows, ops)
        if rows <= 16:  # norm + q/k/v and norm + gate/up + SwiGLU fused, as without the merge pass
            layers = CFG.num_hidden_layers  # rms_norm_linear: one node per projection; the final norm + LM head too
            assert ops["rms_norm_linear"] == 3 * layers + 1 and ops["rms_norm_swiglu"] == layers and ops["cat"] == 0, ops
    symbolic, _ = optimize(llama.build_graph(CFG, "past"), stage="inference", decode_fusion=True, swiglu_packed=False)  # rows: batch*seq
    assert live_ops(symbolic)["split"] == 5 * CFG.num_hidden_layers


def test_bf16_lowering_keeps_the_grouped_weights_in_half_and_joins_them_in_half():
    """The precision pass sees the weights read by Concat (a layout op): stored in bf16, joined in bf16,
    multiplied in bf16; the train step lowers and trains with the merge as without it."""
    g = llama.build_graph(CFG, "prefill", 32, 64)
    compiled, _ = optimize(g, stage="inference", decode_fusion=False)
    model, spec = to_model(compiled, params_as_inputs=True, with_state=True)
    stored = half_storage_inputs(model, "bf16", "cuda", spec.parameters)
    assert {f"model.layers.0.self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj")} <= stored
    _, report = lower_precision(model, "bf16", device="cuda", half_inputs=stored)
    assert report.by_precision()["bfloat16"]["Concat"] == 2 * CFG.num_hidden_layers
    tg = train_graph(False)
    params = varied_parameters(tg, 7)
    losses = []
    for merge in (False, True):
        s = build_session(tg, optimizer="adamw", parameters=params, merge_projections=merge, precision="bf16")
        for name, ids in tokens(0).items():
            s.set_input_u32(name, ids)
        s.step()
        s.step()
        losses.append(s.read_loss())
    assert losses[1] == pytest.approx(losses[0], rel=2e-2)


def _pair(g: Graph, k: int = 8, rows: int = 20) -> tuple:
    return g.input("x", [rows, k]), g.parameter("w1", [6, k]), g.parameter("w2", [4, k])


def test_products_that_must_stay_separate():
    cases = {}
    g = Graph()  # different left operands
    x, w1, w2 = _pair(g)
    g.set_outputs([g.matmul_bt(x, w1), g.matmul_bt(g.input("x2", [20, 8]), w2)])
    cases["different inputs"] = g
    g = Graph()  # a computed weight
    x, w1, w2 = _pair(g)
    g.set_outputs([g.matmul_bt(x, w1), g.matmul_bt(x, g.mul_scalar(w2, g.scalar(2.0)))])
    cases["non-leaf weight"] = g
    g = Graph()  # one product of each kind
    x, w1, _ = _pair(g)
    g.set_outputs([g.matmul_bt(x, w1), g.matmul(x, g.parameter("w3", [8, 4]))])
    cases["matmul_bt and matmul"] = g
    g = Graph()  # one weight twice
    x, w1, _ = _pair(g)
    g.set_outputs([g.matmul_bt(x, w1), g.add_scalar(g.matmul_bt(x, w1), g.scalar(1.0))])
    cases["same weight"] = g
    g = Graph()  # a weight whose output size is symbolic
    x = g.input("x", [20, 8])
    g.set_outputs([g.matmul(x, g.input("wa", [8, "n"])), g.matmul(x, g.input("wb", [8, "n"]))])
    cases["symbolic width"] = g
    g = Graph()  # a static row count below min_rows
    x, w1, w2 = _pair(g, rows=16)
    g.set_outputs([g.matmul_bt(x, w1), g.matmul_bt(x, w2)])
    cases["16 rows, min_rows 17"] = g
    for what, graph in cases.items():
        out, merged = merge_projections(graph, min_rows=17)
        assert merged == 0 and out is graph, what


def test_a_merged_product_that_is_a_graph_output_keeps_its_value_and_name():
    g = Graph()
    x, w1, w2 = _pair(g)
    w3 = g.parameter("w3", [5, 8])
    g.set_outputs({"q": g.matmul_bt(x, w1), "rest": g.add_scalar(g.matmul_bt(x, w2), g.scalar(1.0)), "v": g.matmul_bt(x, w3)})
    out, merged = merge_projections(g, min_rows=17)
    assert merged == 1 and out.output_names() == ["q", "rest", "v"]
    assert live_ops(out) == Counter({"cat": 1, "matmul_bt": 1, "split": 3, "add_scalar": 1, "input": 1, "parameter": 3, "constant": 1})
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(size=(20, 8)), **{f"w{k}": rng.normal(size=s) for k, s in ((1, (6, 8)), (2, (4, 8)), (3, (5, 8)))}}
    for got, want in zip(evaluate(out, feeds, np.float64), evaluate(g, feeds, np.float64), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    model, _ = to_model(out, params_as_inputs=True)  # Split outputs as graph outputs export
    assert [v.name for v in model.graph.output] == ["q", "rest", "v"]


def test_split_gradient_is_one_cat_of_the_pieces_gradients_with_zeros_for_an_unused_piece():
    g = Graph()
    x = g.parameter("x", [3, 8])
    p0, _, p2 = g.split(x, [4, 2, 2], axis=1)
    again = g.apply("split", x, axis=1, sizes=(4, 2, 2), index=2)  # a second node of piece 2: gradients add
    loss = g.add(g.add(g.sum_all(g.mul(p0, p0)), g.sum_all(p2)), g.sum_all(g.mul_scalar(again, g.scalar(3.0))))
    res = gradients(g, loss, [x])
    g.set_outputs([res.grads[x]])
    ops = live_ops(g)
    assert ops["cat"] == 1 and ops["zeros"] == 1, ops
    xv = np.random.default_rng(1).normal(size=(3, 8))
    want = np.concatenate([2 * xv[:, :4], np.zeros((3, 2)), np.full((3, 2), 4.0)], axis=1)
    np.testing.assert_allclose(evaluate(g, {"x": xv}, np.float64)[0], want, rtol=1e-14)


def test_inference_merges_a_prefills_projections_by_default_on_cuda_only():
    # On the CPU the weights' Concat per run costs more than the merged product saves (see _optimized).
    g = llama.build_graph(CFG, "prefill", 32, 64)
    cpu = build_inference_session(g, parameters=default_parameters(g, 5))
    assert cpu.report.rules_fired.get("merge_projections", 0) == 0
    forced = build_inference_session(g, parameters=default_parameters(g, 5), merge_projections=True)
    assert forced.report.rules_fired["merge_projections"] == 2 * CFG.num_hidden_layers
    _, cuda_report = _optimized(g, "cuda", None, None, None, True)  # the graph the CUDA session would compile
    assert cuda_report.rules_fired["merge_projections"] == 2 * CFG.num_hidden_layers
    _, cuda_separate = _optimized(g, "cuda", False, None, None, True)
    assert cuda_separate.rules_fired.get("merge_projections", 0) == 0
