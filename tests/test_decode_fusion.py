"""The fused decode layer: how many ONNX nodes (kernels) one LLaMA decoder layer costs after the e-graph
optimizer and ORT's own fusions, and that the optimized decode step computes what the plain one does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from meganeura_onnx.models import llama

from meganeura_onnx import build_inference_session, custom_op_library
from meganeura_onnx.init import default_parameters

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("decode_kernels_benchmark", ROOT / "benchmarks" / "decode_kernels.py")
decode_kernels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(decode_kernels)
decode_layer_nodes = decode_kernels.decode_layer_nodes

LAYER_NODES = 14
"""Kernels per SmolLM2 decode layer after both optimizers: RMSNorm x2, Gemm x7 (o_proj and down_proj
take the residual as Gemm's C), Rope (q), RopeCacheWrite (k), CacheWrite (v), CachedAttention, SwiGLU."""


@pytest.mark.skipif(custom_op_library("cpu") is None, reason="custom-op library not built (make -C custom_ops cpu)")
def test_smollm2_decode_layer_runs_in_at_most_14_kernels_after_both_optimizers():
    cfg = llama.PRESETS["smollm2-135m"]
    plain = decode_layer_nodes(cfg, optimize=False)["ort"]
    fused = decode_layer_nodes(cfg, optimize=True)["ort"]
    assert fused["total"] <= LAYER_NODES, fused
    assert fused["total"] <= plain["total"] - 3, (plain, fused)
    ops = fused["by_op"]
    assert "Add" not in ops and ops.get("RopeCacheWrite") == 1 and ops.get("Rope") == 1 and ops.get("SwiGLU") == 1, ops


def decode_sessions(*specs: tuple[str, bool, bool], preset: str = "tiny", max_seq: int = 32):
    """Tiny-LLaMA decode-step sessions with the same parameters, one per (device, optimize, cuda_graph)."""
    g = llama.build_graph(llama.PRESETS[preset], "decode", 1, max_seq)
    params = default_parameters(g, 3)
    return [build_inference_session(g, device, parameters=params, optimize=opt, cuda_graph=cg) for device, opt, cg in specs]


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


def test_optimized_decode_step_gives_the_logits_and_caches_of_the_plain_one():
    fused, plain = decode_sessions(("cpu", True, False), ("cpu", False, False))
    kernels = fused.plan().kernels()
    if custom_op_library("cpu") is not None:
        assert {"RopeCacheWrite", "SwiGLU"} <= set(kernels), kernels
    assert fused.report.rules_fired.get("rope_then_cache_write") == 2, fused.report.summary()
    for step, (got, want) in enumerate(feed_steps(fused, plain, steps=8)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"step {step}")
    for name in plain.inplace_state | fused.inplace_state:
        np.testing.assert_allclose(fused.read_state(name), plain.read_state(name), rtol=1e-5, atol=1e-5, err_msg=name)


def test_optimized_decode_step_running_function_bodies_matches_the_plain_one():
    """Without our kernels the fused nodes run their ONNX function bodies: same logits."""
    g = llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 16)
    params = default_parameters(g, 5)
    bodies = build_inference_session(g, parameters=params, use_custom_ops=False)
    plain = build_inference_session(g, parameters=params, optimize=False, use_custom_ops=False)
    assert set(bodies.plan().kernels()) >= {"RopeCacheWrite", "SwiGLU"}
    assert set(bodies.plan().kernels().values()) == {"function"}
    for step, (got, want) in enumerate(feed_steps(bodies, plain, steps=4, seed=1)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"step {step}")
