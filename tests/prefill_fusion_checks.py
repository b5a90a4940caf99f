"""Checks shared by the tests of the prefill fusions (``add_rms_norm``, ``qkv_rope_cache``, ``swiglu_packed``):
the feeds of a tiny LLaMA graph, the fused logits graph through ONNX Runtime with the CPU kernels against the
unfused graph in float64, a ``LlamaRunner`` switch that reaches the session builder and keeps the prefill's
logits and the next greedy token, and a prefill replayed as a CUDA graph that gives the CPU session's logits."""

from __future__ import annotations

from collections import Counter

import numpy as np
from conftest import run_model
from meganeura_onnx.models import llama

from meganeura_onnx import Graph, Session
from meganeura_onnx.export import to_model
from meganeura_onnx.init import default_parameters
from meganeura_onnx.reference import evaluate
from meganeura_onnx.transforms.rewrite import optimize


def feeds(g: Graph, vocab: int, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters (norm weights away from ones), tokens, and for a prefill its position 5 and random caches."""
    rng = np.random.default_rng(seed)
    out = default_parameters(g, seed)
    for k in out:
        if "norm" in k:
            out[k] = rng.uniform(0.5, 1.5, out[k].shape).astype(np.float32)
    out["input_ids"] = rng.integers(0, vocab, rows).astype(np.uint32)
    for n in g.nodes():
        name = n.attrs.get("name", "")
        if n.op == "input" and name.endswith("_cache"):
            out[name] = rng.standard_normal(n.ty.shape).astype(np.float32)
    if any(n.attrs.get("name") == "kv_pos" for n in g.nodes()):
        out["kv_pos"], out["last_row"] = np.array([5], np.uint32), np.array([rows - 1], np.uint32)
    return out


def assert_fused_logits_run_on_cpu_kernels(cfg, library: str, ops: dict[str, int]) -> None:
    """The inference-optimized 40-row logits graph through ONNX Runtime with the CPU kernel ``library``: its
    model has ``ops`` (op type -> count) and its logits are the unfused graph's in float64."""
    g = llama.build_graph(cfg, "logits", 40, 64)
    out, _ = optimize(g, stage="inference")
    f = feeds(g, cfg.vocab_size, 40, seed=3)
    params = {k: v for k, v in f.items() if k != "input_ids"}
    model, _ = to_model(out, parameters=params)
    counts = Counter(n.op_type for n in model.graph.node)
    assert {op: counts[op] for op in ops} == ops, counts
    got = run_model(model, {"input_ids": f["input_ids"]}, library=library)[0]
    np.testing.assert_allclose(got, evaluate(g, f, np.float64)[0], rtol=1e-4, atol=1e-4)


def assert_runner_switch_keeps_the_prefill(cfg, switch: str, rule: str, fired: int, seed: int = 3) -> None:
    """``LlamaRunner(switch=False / True)``: the pass's rule fires 0 / ``fired`` times in the prefill session,
    and the prefill's logits and the greedy token after it match. The projections are merged (the passes
    read the merged products; CPU runners keep them separate by default)."""
    prompt = [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab_size, 24)]
    kw = dict(max_seq=48, prefill_chunk=24, merge_projections=True)
    runners = {flag: llama.LlamaRunner(cfg, None, **kw, **{switch: flag}) for flag in (False, True)}
    counts = {flag: r.prefiller.report.rules_fired.get(rule, 0) for flag, r in runners.items()}
    assert counts == {False: 0, True: fired}
    logits = {flag: r.prefill(prompt) for flag, r in runners.items()}
    np.testing.assert_allclose(logits[True], logits[False], rtol=1e-5, atol=1e-5)
    tokens = {flag: [int(np.argmax(r.decode(int(np.argmax(logits[flag])))))] for flag, r in runners.items()}
    assert tokens[True] == tokens[False]


def assert_prefill_replays_like_cpu(gpu: Session, cpu: Session, cfg, rows: int) -> None:
    """Two prefills at different positions through both sessions (``gpu`` replays its captured graph)."""
    rng = np.random.default_rng(9)
    for start in (0, 20):
        ids = rng.integers(0, cfg.vocab_size, rows).tolist()
        for s in (gpu, cpu):
            s.set_input_u32("input_ids", ids)
            s.set_input_u32("kv_pos", [start])
            s.set_input_u32("last_row", [rows - 1])
            s.step()
        np.testing.assert_allclose(gpu.read_output_by_index(0), cpu.read_output_by_index(0), rtol=1e-4, atol=1e-4, err_msg=f"at {start}")
