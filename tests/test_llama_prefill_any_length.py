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


@pytest.mark.parametrize("chunk", [None, 16], ids=["one-step", "chunks16"])
def test_append_continues_a_conversation_as_one_prefill_of_the_whole_history_does(chunk):
    runner = llama.LlamaRunner(CFG, max_seq=256, seed=4, prefill_chunk=chunk)
    reference = llama.LlamaRunner(CFG, max_seq=256, seed=4)
    first_turn, second_turn = PROMPTS[2], PROMPTS[0][:40]
    first = int(np.argmax(runner.prefill(first_turn)))
    chosen = runner.decode_greedy(first, 5)  # feeds first and the first 4 chosen; the 5th is not in the cache
    history = first_turn + [first] + chosen[:4] + second_turn
    got = runner.append(second_turn)
    assert runner.position == len(history)
    np.testing.assert_allclose(got, reference.prefill(history), rtol=1e-5, atol=1e-5)
    token = int(np.argmax(got))
    assert runner.decode_greedy(token, 6) == reference.decode_greedy(token, 6)


def test_append_near_the_end_of_the_cache_runs_exactly_its_rows_and_refuses_what_does_not_fit():
    runner = llama.LlamaRunner(CFG, max_seq=96, seed=4, prefill_chunk=16)  # 85 + 16 rows would pass the end
    reference = llama.LlamaRunner(CFG, max_seq=96, seed=4)
    prompt, more = PROMPTS[0][:85], PROMPTS[0][85:95]
    runner.prefill(prompt)
    np.testing.assert_allclose(runner.append(more), reference.prefill(prompt + more), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="2 tokens after position 95 do not fit the KV cache"):
        runner.append([1, 2])
    with pytest.raises(ValueError, match="no tokens"):
        runner.append([])


def test_batch_append_feeds_each_sequence_its_own_tokens_at_its_own_position():
    runner = llama.LlamaBatchRunner(CFG, max_seq=192, seed=4, batch=3)
    single = llama.LlamaRunner(CFG, max_seq=192, seed=4)
    prompts, turns = [PROMPTS[2], PROMPTS[1]], [PROMPTS[0][:10], PROMPTS[0][10:13]]
    runner.prefill(prompts)
    got = runner.append(turns)
    assert runner.positions[:2] == [len(p) + len(t) for p, t in zip(prompts, turns, strict=True)]
    for b, (p, t) in enumerate(zip(prompts, turns, strict=True)):
        np.testing.assert_allclose(got[b], single.prefill(p + t), rtol=1e-5, atol=1e-5, err_msg=f"sequence {b}")
    with pytest.raises(ValueError, match="expected 2 token lists"):
        runner.append(turns[:1])
