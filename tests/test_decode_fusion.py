"""The fused decode layer: how many ONNX nodes (kernels) one LLaMA decoder layer costs after the e-graph
optimizer, the decode-step fusions and ORT's own fusions, and that the optimized decode step computes what
the plain one does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from meganeura_onnx.models import llama

from meganeura_onnx import build_inference_session, custom_op_library
from meganeura_onnx.init import default_parameters
from meganeura_onnx.transforms.rewrite import optimize

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("decode_kernels_benchmark", ROOT / "benchmarks" / "decode_kernels.py")
decode_kernels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(decode_kernels)
decode_layer_nodes = decode_kernels.decode_layer_nodes

LAYER_KERNELS = {
    "RMSNormLinear": 1,  # input norm + q/k/v
    "RopeCachedAttention": 1,  # rope of q and k, the k/v cache writes, attention
    "LinearResidual": 2,  # o_proj + residual, down_proj + residual
    "RMSNormSwiGLU": 1,  # post-attention norm + gate/up + SwiGLU
}
"""Kernels per SmolLM2 decode layer of the graph a CUDA session runs (the decode-step fusions on)."""


@pytest.mark.skipif(custom_op_library("cpu") is None, reason="custom-op library not built (make -C custom_ops cpu)")
def test_smollm2_cuda_decode_layer_runs_its_kernels_with_the_residual_adds_in_the_products():
    """The CUDA decode graph counted on the CPU provider (ORT's graph fusions are the same): one kernel per
    node, no Gemm with a residual C (on CUDA a copy plus a product) and no Add left."""
    cfg = llama.PRESETS["smollm2-135m"]
    plain = decode_layer_nodes(cfg, optimize=False)["ort"]
    fused = decode_layer_nodes(cfg, optimize=True, decode_layer=False)["ort"]  # each layer's five kernels, before DecodeLayer
    cpu = decode_layer_nodes(cfg, optimize=True, decode_fusion=False)["ort"]  # what CPU sessions run: Gemm with C
    assert fused["by_op"] == LAYER_KERNELS, fused["by_op"]
    assert fused["cuda_kernels"] == fused["total"] == sum(LAYER_KERNELS.values()), fused
    assert cpu["cuda_kernels"] == cpu["total"] + 2, cpu  # o_proj and down_proj: Gemm with the residual as C
    assert fused["cuda_kernels"] <= cpu["cuda_kernels"] - 4 and fused["total"] <= plain["total"] - 9, (plain, cpu, fused)


def decode_sessions(*specs: tuple[str, bool, bool], preset: str = "tiny", max_seq: int = 32, decode_layer: bool | None = None):
    """Tiny-LLaMA decode-step sessions with the same parameters, one per (device, optimize, cuda_graph)."""
    g = llama.build_graph(llama.PRESETS[preset], "decode", 1, max_seq)
    params = default_parameters(g, 3)
    return [
        build_inference_session(g, device, parameters=params, optimize=opt, cuda_graph=cg, decode_layer=decode_layer)
        for device, opt, cg in specs
    ]


def feed_steps(*sessions, steps: int, seed: int = 0):
    """Feeds the same tokens at positions 0, 1, ... to every session; yields their logits per step."""
    rng = np.random.default_rng(seed)
    for pos in range(steps):
        token = [int(rng.integers(0, 256))]
        for s in sessions:
            s.set_input_u32("input_ids", token)
            s.set_input_u32("kv_pos", [pos])
            s.step()
        yield tuple(s.read_output_by_index(0) for s in sessions)


def fused_cpu_session(g, params, decode_layer: bool = False, **kw):
    """A CPU session of ``g`` after the inference optimizer WITH the norm + projection fusion (CPU
    sessions leave it out; this runs the fused ops' CPU kernels or function bodies in a whole model);
    each layer's five fused ops stay apart unless ``decode_layer``."""
    compiled, report = optimize(g, stage="inference", decode_layer=decode_layer)
    s = build_inference_session(compiled, "cpu", parameters=params, optimize=False, **kw)
    s.report = report
    return s


def test_cpu_sessions_keep_the_products_and_cuda_sessions_fuse_the_norms():
    g = llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 16)
    _, on_cuda = optimize(g, stage="inference")
    _, on_cpu = optimize(g, stage="inference", decode_fusion=False)
    assert on_cuda.rules_fired.get("fuse_rms_norm_linear") == 3 and "fuse_rms_norm_linear" not in on_cpu.rules_fired
    (cpu,) = decode_sessions(("cpu", True, False))
    assert "RMSNormLinear" not in cpu.plan().kernels() and not cpu.report.rules_fired.get("fuse_rms_norm_swiglu")


def test_cpu_sessions_fuse_rope_and_attention_only_where_our_kernel_runs_it():
    g = llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 16)
    layers = llama.PRESETS["tiny"].num_hidden_layers
    bodies = build_inference_session(g, "cpu", use_custom_ops=False)
    assert "RopeCachedAttention" not in bodies.plan().kernels() and "fuse_rope_cached_attention" not in bodies.report.rules_fired
    if custom_op_library("cpu") is None:
        pytest.skip("custom-op library not built (make -C custom_ops cpu)")
    (cpu,) = decode_sessions(("cpu", True, False))
    assert cpu.report.rules_fired.get("fuse_rope_cached_attention") == layers, cpu.report.summary()
    assert cpu.plan().kernels().get("RopeCachedAttention") == "kernel"
    layer = decode_layer_nodes(llama.PRESETS["smollm2-135m"], optimize=True, decode_fusion=False, rope_attention=True)["ort"]
    assert layer["total"] == 11 and layer["by_op"].get("RopeCachedAttention") == 1, layer


def test_optimized_decode_step_gives_the_logits_and_caches_of_the_plain_one():
    g = llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 32)
    params = default_parameters(g, 3)
    fused, plain = fused_cpu_session(g, params), build_inference_session(g, "cpu", parameters=params, optimize=False)
    kernels = fused.plan().kernels()
    if custom_op_library("cpu") is not None:
        assert {"RopeCachedAttention", "RMSNormLinear", "RMSNormSwiGLU", "LinearResidual"} <= set(kernels), kernels
    fired = fused.report.rules_fired
    assert fired.get("rope_then_cache_write") == 2 and fired.get("fuse_rope_cached_attention") == 2, fused.report.summary()
    # per layer: q/k/v and gate/up; the final norm with the LM head is a group of one; o_proj and down_proj
    assert fired.get("fuse_rms_norm_swiglu") == 2 and fired.get("fuse_rms_norm_linear") == 3, fused.report.summary()
    assert fired.get("fuse_linear_residual") == 4, fused.report.summary()
    for step, (got, want) in enumerate(feed_steps(fused, plain, steps=8)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"step {step}")
    for name in plain.inplace_state | fused.inplace_state:
        np.testing.assert_allclose(fused.read_state(name), plain.read_state(name), rtol=1e-5, atol=1e-5, err_msg=name)


def test_optimized_decode_step_running_function_bodies_matches_the_plain_one():
    """Without our kernels the fused nodes run their ONNX function bodies: same logits."""
    g = llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 16)
    params = default_parameters(g, 5)
    bodies = fused_cpu_session(g, params, use_custom_ops=False)
    plain = build_inference_session(g, parameters=params, optimize=False, use_custom_ops=False)
    assert set(bodies.plan().kernels()) >= {"RopeCachedAttention", "RMSNormLinear", "RMSNormSwiGLU", "LinearResidual"}
    assert set(bodies.plan().kernels().values()) == {"function"}
    for step, (got, want) in enumerate(feed_steps(bodies, plain, steps=4, seed=1)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"step {step}")


def test_fp16_lowering_for_cuda_keeps_both_kv_caches_in_half_and_never_casts_them():
    """The precision pass as a CUDA session runs it: RopeCachedAttention and RMSNormSwiGLU take half, so the K
    cache is stored in half like the V cache and no Cast copies a cache (checked on the model, no GPU)."""
    from meganeura_onnx.export import to_model
    from meganeura_onnx.export.precision import half_storage_inputs, lower_precision

    g, _ = optimize(llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 32), stage="inference", decode_layer=False)
    model, spec = to_model(g, params_as_inputs=True, with_state=True)
    stored = half_storage_inputs(model, "fp16", "cuda", [*spec.parameters, *spec.state])
    assert set(spec.state) <= stored, sorted(set(spec.state) - stored)
    lowered, _ = lower_precision(model, "fp16", device="cuda", half_inputs=stored, half_outputs=[spec.state[n] for n in spec.state])
    caches = set(spec.state) | set(spec.state.values())
    casts = [n.input[0] for n in lowered.graph.node if n.op_type == "Cast" and n.input[0] in caches]
    assert not casts, casts
    fused = [n for n in lowered.graph.node if n.op_type in ("RopeCachedAttention", "RMSNormSwiGLU", "RMSNormLinear", "LinearResidual")]
    assert len(fused) == 11
    produced = {o: n for n in lowered.graph.node for o in n.output}
    for n in fused:  # every float input comes in half: a half tensor, not a Cast to float
        for name in n.input[:2]:
            src = produced.get(name)
            assert src is None or not (src.op_type == "Cast" and src.attribute[0].i == 1), (n.op_type, name)


def fused_ops(g) -> dict[str, int]:
    out, _ = optimize(g, stage="inference", decode_layer=False)
    ops = [n.op for n in out.nodes()]
    counts = {op: ops.count(op) for op in ("rms_norm_linear", "rms_norm_swiglu", "rms_norm", "linear_residual", "gemm")}
    fused_norms = sum(n.op == "add_rms_norm" and n.attrs["index"] == 0 for n in out.nodes())  # a prefill's (add_rms_norm_fusion)
    return {**counts, "add_rms_norm": fused_norms} if fused_norms else counts


def test_the_decode_fusions_take_rows_up_to_16_and_leave_prefills_to_gemm():
    cfg = llama.PRESETS["tiny"]
    layers = cfg.num_hidden_layers
    batch8 = fused_ops(llama.build_graph(cfg, "decode", 1, 32, 8))  # 8 sequences: 8 rows
    want = {"rms_norm_linear": 3 * layers + 1, "rms_norm_swiglu": layers, "rms_norm": 0, "linear_residual": 2 * layers, "gemm": 0}
    assert batch8 == want, batch8
    batch16 = fused_ops(llama.build_graph(cfg, "decode", 1, 32, 16))
    assert batch16["linear_residual"] == 2 * layers and batch16["gemm"] == 0, batch16
    prefill = fused_ops(llama.build_graph(cfg, "prefill", 32, 64))  # 32 rows: cuBLAS/MLAS products
    # ... except the final norm and LM head, which a prefill runs on its last row only; its residual adds
    # go into the norms after them (add_rms_norm_fusion), but for the last one (read by the last row's gather)
    want = {"rms_norm_linear": 1, "rms_norm_swiglu": 0, "rms_norm": 1, "linear_residual": 0, "gemm": 1, "add_rms_norm": 2 * layers - 1}
    assert prefill == want, prefill
    batch17 = fused_ops(llama.build_graph(cfg, "decode", 1, 32, 17))  # past the bound: products stay Gemm or join the norms
    assert batch17["linear_residual"] == 0 and batch17["gemm"] == 0 and batch17["add_rms_norm"] == 2 * layers, batch17


def test_a_norm_read_by_anything_but_products_is_left_alone():
    from meganeura_onnx import Graph

    g = Graph()
    x, w = g.input("x", [1, 8]), g.parameter("norm", [8])
    n = g.rms_norm(x, w, 1e-5)
    q = g.matmul_bt(n, g.parameter("wq", [4, 8]))
    g.set_outputs({"q": q, "n2": g.mul(n, n)})  # the normalised rows are used beside the product
    assert fused_ops(g) == {"rms_norm_linear": 0, "rms_norm_swiglu": 0, "rms_norm": 1, "linear_residual": 0, "gemm": 0}
    g2 = Graph()
    x2, w2 = g2.input("x", [2, 8]), g2.parameter("norm", [8])
    n2 = g2.rms_norm(x2, w2, 1e-5)
    g2.set_outputs({"a": g2.matmul_bt(n2, g2.parameter("wa", [4, 8])), "b": g2.matmul(n2, g2.parameter("wb", [8, 3]))})
    assert fused_ops(g2)["rms_norm_linear"] == 0  # two weight layouts: no one kernel


def test_a_residual_product_fuses_only_with_a_full_size_residual_a_leaf_weight_and_a_bounded_k():
    from meganeura_onnx import Graph

    def residual_products(rows: int, k: int, *, bias_row: bool = False, leaf_weight: bool = True) -> dict[str, int]:
        g = Graph()
        x = g.input("x", [rows, k])
        w = g.parameter("w", [4, k]) if leaf_weight else g.mul(g.parameter("w", [4, k]), g.parameter("s", [4, k]))
        c = g.parameter("bias", [4]) if bias_row else g.input("residual", [rows, 4])
        g.set_outputs({"y": g.gemm(x, w, c, trans_b=True)})
        return fused_ops(g)

    assert residual_products(2, 8) == {"rms_norm_linear": 0, "rms_norm_swiglu": 0, "rms_norm": 0, "linear_residual": 1, "gemm": 0}
    assert residual_products(2, 8, bias_row=True)["linear_residual"] == 0  # a bias row: Gemm broadcasts it
    assert residual_products(2, 8, leaf_weight=False)["linear_residual"] == 0
    assert residual_products(2, 11776)["linear_residual"] == 1
    assert residual_products(2, 11777)["linear_residual"] == 0  # more than the CUDA kernel's shared-memory tile holds
    assert residual_products(17, 8)["linear_residual"] == 0


def test_a_norm_wider_than_the_cuda_kernels_tile_is_left_to_gemm():
    from meganeura_onnx import Graph

    def fused(k: int) -> dict[str, int]:
        g = Graph()
        n = g.rms_norm(g.input("x", [1, k]), g.parameter("norm", [k]), 1e-5)
        g.set_outputs({"q": g.matmul_bt(n, g.parameter("wq", [4, k]))})
        return fused_ops(g)

    assert fused(11776)["rms_norm_linear"] == 1
    assert fused(11777) == {"rms_norm_linear": 0, "rms_norm_swiglu": 0, "rms_norm": 1, "linear_residual": 0, "gemm": 0}


def test_a_wide_product_of_several_rows_is_left_to_gemm_and_of_one_row_fused():
    """An LM head at batch > 1 (several rows through a weight over 16384 columns) goes to cuBLAS's GEMM;
    at one row, and for layer-sized weights at any row count <= 16, the fused GEMV runs."""
    from meganeura_onnx import Graph

    def fused(rows: int, n: int) -> int:
        g = Graph()
        norm = g.rms_norm(g.input("x", [rows, 8]), g.parameter("norm", [8]), 1e-5)
        g.set_outputs({"logits": g.matmul_bt(norm, g.parameter("lm_head", [n, 8]))})
        return fused_ops(g)["rms_norm_linear"]

    assert fused(1, 49152) == 1
    assert fused(8, 16384) == 1
    assert fused(2, 16385) == 0
    assert fused(8, 49152) == 0
