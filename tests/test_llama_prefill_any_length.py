"""LlamaRunner's and LlamaBatchRunner's default prefill: every prompt (a batch: its longest) in one step
of exactly its rows, through one session whose row count is symbolic, against the same weights prefilled
in fixed 16-row chunks."""

from __future__ import annotations

import numpy as np
import pytest
from meganeura_onnx.models import llama

CFG = llama.PRESETS["tiny"]
RNG = np.random.default_rng(11)
PROMPTS = [RNG.integers(0, CFG.vocab_size, n).tolist() for n in (150, 5, 70)]


def _count_steps(session) -> list[int]:
    calls: list[int] = []
    step = session.step
    session.step = lambda *a, **k: (calls.append(1), step(*a, **k))[1]
    return calls


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels-if-built", "function-bodies"])
def test_default_runner_prefills_each_prompt_in_one_step_and_matches_fixed_chunks(kernels):
    one = llama.LlamaRunner(CFG, max_seq=192, seed=4, use_custom_ops=kernels)
    chunked = llama.LlamaRunner(CFG, max_seq=192, seed=4, use_custom_ops=kernels, prefill_chunk=16)
    assert one.chunk is None and chunked.chunk == 16
    steps = _count_steps(one.prefiller)
    for prompt in PROMPTS:  # 150, then a shorter and a middling prompt through the same session
        n = len(prompt)
        assert one.prefill_plan(n) == (1, n)
        assert chunked.prefill_plan(n) == (-(-n // 16), 16)
        before = len(steps)
        got, want = one.prefill(prompt), chunked.prefill(prompt)
        assert len(steps) - before == 1
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"prompt of {n} tokens")
        token = int(np.argmax(want))
        assert one.decode_greedy(token, 8) == chunked.decode_greedy(token, 8)
        assert one.position == chunked.position == n + 8


def test_prompts_of_different_lengths_give_their_own_logits_through_the_one_session():
    runner = llama.LlamaRunner(CFG, max_seq=192, seed=4)
    a, b = runner.prefill(PROMPTS[0]), runner.prefill(PROMPTS[0][:149])
    assert not np.allclose(a, b)  # a different last token: different logits, not a stale buffer
    np.testing.assert_allclose(runner.prefill(PROMPTS[0]), a, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels-if-built", "function-bodies"])
def test_batch_runner_prefills_prompts_of_different_lengths_in_one_step_and_matches_fixed_chunks(kernels):
    one = llama.LlamaBatchRunner(CFG, max_seq=192, seed=4, batch=3, use_custom_ops=kernels)
    chunked = llama.LlamaBatchRunner(CFG, max_seq=192, seed=4, batch=3, use_custom_ops=kernels, prefill_chunk=16)
    steps = _count_steps(one.prefiller)
    for prompts in (PROMPTS, PROMPTS[1:]):  # three prompts, then two (the spare row repeats the first)
        longest = max(map(len, prompts))
        assert one.prefill_plan(longest) == (1, longest)
        before = len(steps)
        got, want = one.prefill(prompts), chunked.prefill(prompts)
        assert len(steps) - before == 1 and got.shape == (len(prompts), CFG.vocab_size)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        tokens = [int(t) for t in np.argmax(want, axis=-1)]
        assert one.decode_greedy(tokens, 6) == chunked.decode_greedy(tokens, 6)
        assert one.positions == chunked.positions
