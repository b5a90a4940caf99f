"""Checks shared by the tests of the prefill fusions (``add_rms_norm``, ``qkv_rope_cache``, ``swiglu_packed``):
a ``LlamaRunner`` switch reaches the session builder and keeps the prefill's logits and the next greedy token,
and a prefill replayed as a CUDA graph gives the CPU session's logits."""

from __future__ import annotations

import numpy as np
from meganeura_onnx.models import llama

from meganeura_onnx import Session


def assert_runner_switch_keeps_the_prefill(cfg, switch: str, rule: str, fired: int, seed: int = 3) -> None:
    """``LlamaRunner(switch=False / True)``: the pass's rule fires 0 / ``fired`` times in the prefill session,
    and the prefill's logits and the greedy token after it match."""
    prompt = [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab_size, 24)]
    runners = {flag: llama.LlamaRunner(cfg, None, max_seq=48, prefill_chunk=24, **{switch: flag}) for flag in (False, True)}
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
