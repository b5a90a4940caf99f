"""transforms.add_rms_norm_fusion: a prefill's residual ``gemm`` and the RMSNorm reading it become a plain
product and one ``add_rms_norm``.

The tiny LLaMA's logits (every row, and a prefill's last row through its KV caches) are those of the
unfused graph, in float64 and through ONNX Runtime with the CPU kernels; every norm after a residual add
is fused (the first layer's input norm reads the embedding and stays); decode steps and prefills of up
to 16 rows are left to the decode fusions; a bias-row ``gemm`` is not a residual; a product read by more
than the norm hands the sum to its other readers; in fp16 the fused node reads a ``Gemm`` without C and
has no ``Cast`` around it."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import pytest
from conftest import live_nodes
from meganeura_onnx.models import llama
from prefill_fusion_checks import assert_fused_logits_run_on_cpu_kernels, assert_runner_switch_keeps_the_prefill, feeds

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.export.precision import half_storage_inputs, lower_precision
from meganeura_onnx.reference import evaluate
from meganeura_onnx.transforms.rewrite import optimize

CFG = llama.PRESETS["tiny"]  # 2 layers, hidden 64
LAYERS = CFG.num_hidden_layers
LIB = kc.kernel_library("cpu")


def fused_norms(g: Graph) -> int:
    return sum(n.op == "add_rms_norm" and n.attrs["index"] == 0 for n in live_nodes(g))


def residual_gemms(g: Graph) -> int:
    return sum(n.op == "gemm" and g.node(n.inputs[2]).ty.shape == n.ty.shape for n in live_nodes(g))


@pytest.mark.parametrize("mode,rows,fused", [("logits", 24, 2 * LAYERS), ("prefill", 32, 2 * LAYERS - 1)])
def test_fused_graph_gives_the_unfused_outputs_and_fuses_every_norm_after_a_residual_add(mode, rows, fused):
    """``logits``: the final norm reads the last down_proj too; ``prefill``: it reads the last row's gather."""
    g = llama.build_graph(CFG, mode, rows, 64)
    plain, _ = optimize(g, stage="inference", add_rms_norm=False)
    out, report = optimize(g, stage="inference")  # on by default with the other inference fusions
    assert fused_norms(plain) == 0 and residual_gemms(plain) == 2 * LAYERS
    assert fused_norms(out) == fused and report.rules_fired["fuse_add_rms_norm"] == fused
    assert residual_gemms(out) == 2 * LAYERS - fused
    f = feeds(g, CFG.vocab_size, rows)
    want, got = evaluate(plain, f, np.float64), evaluate(out, f, np.float64)
    for w, r in zip(want, got, strict=True):
        np.testing.assert_allclose(r, w, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
def test_fused_logits_through_onnx_runtime_with_the_cpu_kernels_match_the_float64_reference():
    assert_fused_logits_run_on_cpu_kernels(CFG, LIB, {"AddRMSNorm": 2 * LAYERS})


def test_decode_steps_and_prefills_of_up_to_16_rows_are_left_to_the_decode_fusions():
    for mode, rows, want in (("decode", 1, 0), ("prefill", 16, 0), ("prefill", 17, 2 * LAYERS - 1)):
        out, _ = optimize(llama.build_graph(CFG, mode, rows, 64), stage="inference")
        assert fused_norms(out) == want, (mode, rows)
    symbolic, _ = optimize(llama.build_graph(CFG, "past"), stage="inference")  # rows: batch*seq, logits of every row
    assert fused_norms(symbolic) == 2 * LAYERS


def small_graph(bias_row: bool) -> tuple[Graph, dict[str, np.ndarray]]:
    """``v = gemm(a, w, c)`` read by a norm and by a second output (c a residual [32, 8], or a bias row [8])."""
    g = Graph()
    a, w = g.input("a", [32, 8]), g.parameter("w", [8, 8])
    c = g.input("c", [8] if bias_row else [32, 8])
    v = g.gemm(a, w, c, trans_b=True)
    g.set_outputs([g.rms_norm(v, g.parameter("weight", [8]), 1e-5), g.mul(v, v)])
    rng = np.random.default_rng(1)
    values = {"a": rng.standard_normal((32, 8)), "w": rng.standard_normal((8, 8)), "weight": rng.uniform(0.5, 1.5, 8)}
    values["c"] = rng.standard_normal([8] if bias_row else [32, 8])
    return g, {k: v.astype(np.float32) for k, v in values.items()}


def test_other_readers_of_the_product_read_the_sum_and_a_bias_row_is_not_a_residual():
    g, f = small_graph(bias_row=False)
    out, _ = optimize(g, stage="inference")
    assert fused_norms(out) == 1 and not any(n.op == "gemm" for n in live_nodes(out))
    assert [out.node(o).op for o in out.outputs()] == ["add_rms_norm", "mul"]
    for w, r in zip(evaluate(g, f, np.float64), evaluate(out, f, np.float64), strict=True):
        np.testing.assert_allclose(r, w, rtol=1e-12, atol=1e-12)
    biased, _ = optimize(small_graph(bias_row=True)[0], stage="inference")
    assert fused_norms(biased) == 0 and any(n.op == "gemm" for n in live_nodes(biased))


def test_fp16_lowering_runs_the_fused_node_in_half_on_a_gemm_without_c_and_no_cast_around_it():
    out, _ = optimize(llama.build_graph(CFG, "prefill", 32, 64), stage="inference")
    model, spec = to_model(out, params_as_inputs=True, with_state=True)
    stored = half_storage_inputs(model, "fp16", "cuda", spec.parameters, custom_kernels=True)
    assert {f"model.layers.{k}.post_attention_layernorm.weight" for k in range(LAYERS)} <= stored
    lowered, report = lower_precision(model, "fp16", device="cuda", half_inputs=stored, custom_kernels=True)
    nodes = list(lowered.graph.node)
    made = {o: n for n in nodes for o in n.output}
    fused = [n for n in nodes if n.op_type == "AddRMSNorm"]
    assert len(fused) == 2 * LAYERS - 1
    for n in fused:
        product = made[n.input[0]]
        assert product.op_type == "Gemm" and len(product.input) == 2, product
        assert all(made[i].op_type != "Cast" for i in n.input if i in made), n
        readers = [u.op_type for u in nodes if set(n.output) & set(u.input)]
        assert "Cast" not in readers, readers
    assert report.by_precision()["float16"]["com.meganeura.AddRMSNorm"] == 2 * LAYERS - 1


@pytest.mark.skipif(LIB is None, reason="the CPU kernel library is not built (make kernels)")
def test_llama_runner_add_rms_norm_option_fuses_the_prefill_and_keeps_its_tokens():
    """``LlamaRunner(add_rms_norm=...)`` reaches the session builder: on the CPU (off by default) True fuses
    the prefill's norms, and the prefill's logits and the greedy tokens after it match the unfused runner."""
    assert_runner_switch_keeps_the_prefill(CFG, "add_rms_norm", "fuse_add_rms_norm", 2 * LAYERS - 1)
