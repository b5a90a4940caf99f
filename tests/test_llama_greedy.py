"""Greedy decoding with the argmax on the device (``decode_argmax``: the decode step's chosen token and
next position fed back into its inputs) against the host argmax of ``decode``'s logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from meganeura_onnx.cli.model_file import load_module

ROOT = Path(__file__).resolve().parent.parent
llama = load_module(ROOT / "models" / "llama.py")
CFG = llama.PRESETS["tiny"]
PROMPT = [3, 17, 42, 7, 99, 5]


def _host_greedy(runner, first: int, n: int) -> list[int]:
    out, token = [], first
    for _ in range(n):
        token = int(np.argmax(runner.decode(token)))
        out.append(token)
    return out


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels-if-built", "function-bodies"])
def test_decode_argmax_chooses_the_tokens_the_host_argmax_of_the_logits_chooses(kernels):
    a = llama.LlamaRunner(CFG, max_seq=40, prefill_chunk=4, seed=3, use_custom_ops=kernels)
    b = llama.LlamaRunner(CFG, max_seq=40, prefill_chunk=4, seed=3, use_custom_ops=kernels)
    first = int(np.argmax(a.prefill(PROMPT)))
    assert first == int(np.argmax(b.prefill(PROMPT)))
    ours, token = [], first
    for _ in range(24):
        token = a.decode_argmax(token)
        ours.append(token)
    assert ours == _host_greedy(b, first, 24)
    assert a.position == b.position == len(PROMPT) + 24


def test_decode_argmax_uploads_a_token_it_did_not_choose_and_mixes_with_decode():
    a = llama.LlamaRunner(CFG, max_seq=40, prefill_chunk=4, seed=4)
    b = llama.LlamaRunner(CFG, max_seq=40, prefill_chunk=4, seed=4)
    a.prefill(PROMPT)
    b.prefill(PROMPT)
    # a forced token (not the one chosen), then decode's logits path, then greedy again
    assert a.decode_argmax(11) == int(np.argmax(b.decode(11)))
    np.testing.assert_array_equal(a.decode(12), b.decode(12))
    chosen = a.decode_argmax(13)
    assert chosen == int(np.argmax(b.decode(13)))
    assert a.decode_argmax(chosen) == int(np.argmax(b.decode(chosen)))
    assert a.decode_argmax(chosen + 1) == int(np.argmax(b.decode(chosen + 1)))  # not the chosen one: uploaded


def test_decode_argmax_after_a_new_prefill_starts_from_the_new_prompt():
    a = llama.LlamaRunner(CFG, max_seq=40, prefill_chunk=4, seed=6)
    b = llama.LlamaRunner(CFG, max_seq=40, prefill_chunk=4, seed=6)
    token = int(np.argmax(a.prefill(PROMPT)))
    for _ in range(3):
        token = a.decode_argmax(token)
    first = int(np.argmax(a.prefill([9, 8, 7])))  # the device still holds the old token and position
    assert first == int(np.argmax(b.prefill([9, 8, 7])))
    assert [a.decode_argmax(first)] == _host_greedy(b, first, 1)
    assert a.position == 4


def test_batch_decode_argmax_equals_the_host_argmax_per_sequence():
    prompts = [[5, 17, 99, 3, 64], [7, 7], [42, 9, 13]]
    a = llama.LlamaBatchRunner(CFG, batch=4, max_seq=40, prefill_chunk=4, seed=2)  # one spare row
    b = llama.LlamaBatchRunner(CFG, batch=4, max_seq=40, prefill_chunk=4, seed=2)
    tokens = np.argmax(a.prefill(prompts), axis=-1).tolist()
    assert tokens == np.argmax(b.prefill(prompts), axis=-1).tolist()
    ref = list(tokens)
    for _ in range(12):
        tokens = a.decode_argmax(tokens)
        ref = np.argmax(b.decode(ref), axis=-1).tolist()
        assert tokens == ref
    assert a.positions == b.positions


def test_decode_argmax_refuses_a_full_cache_and_a_bad_token():
    r = llama.LlamaRunner(CFG, max_seq=8, prefill_chunk=4, seed=1)
    token = int(np.argmax(r.prefill(PROMPT)))
    with pytest.raises(ValueError, match="out of range|vocab"):
        r.decode_argmax(CFG.vocab_size)
    token = r.decode_argmax(token)
    token = r.decode_argmax(token)
    with pytest.raises(ValueError, match=r"the KV cache is full \(8 positions\)"):
        r.decode_argmax(token)


class _LogitsOnly:
    """The runner seen through the logits interface alone (no decode_greedy): host sampling."""

    def __init__(self, runner):
        self.max_seq, self.prefill, self.decode = runner.max_seq, runner.prefill, runner.decode


def test_decode_greedy_runs_count_steps_and_continues_where_they_ended():
    a = llama.LlamaRunner(CFG, max_seq=64, prefill_chunk=4, seed=8)
    b = llama.LlamaRunner(CFG, max_seq=64, prefill_chunk=4, seed=8)
    first = int(np.argmax(a.prefill(PROMPT)))
    b.prefill(PROMPT)
    chunk = a.decode_greedy(first, 17)
    assert chunk == _host_greedy(b, first, 17)
    assert a.position == len(PROMPT) + 17
    assert a.decode_argmax(chunk[-1]) == _host_greedy(b, chunk[-1], 1)[0]  # fed back: nothing uploaded
    assert a.decode_greedy(5, 3) == _host_greedy(b, 5, 3)  # a token it did not choose: uploaded


@pytest.mark.parametrize("stop_after", [1, 5, 20])
def test_generate_in_greedy_chunks_stops_at_a_stop_id_like_host_sampling(stop_after):
    from meganeura_onnx.generation import generate

    a = llama.LlamaRunner(CFG, max_seq=64, prefill_chunk=4, seed=9)
    b = llama.LlamaRunner(CFG, max_seq=64, prefill_chunk=4, seed=9)
    full = list(generate(_LogitsOnly(b), PROMPT, 40))
    assert list(generate(a, PROMPT, 40)) == full
    stop = full[stop_after]  # its first occurrence may come earlier; both sides stop there
    assert list(generate(a, PROMPT, 40, stop_ids=[stop])) == list(generate(_LogitsOnly(b), PROMPT, 40, stop_ids=[stop]))


def test_batch_decode_greedy_with_a_spare_row_equals_host_argmax():
    prompts = [[5, 17, 99, 3, 64], [7, 7]]
    a = llama.LlamaBatchRunner(CFG, batch=3, max_seq=40, prefill_chunk=4, seed=2)
    b = llama.LlamaBatchRunner(CFG, batch=3, max_seq=40, prefill_chunk=4, seed=2)
    tokens = np.argmax(a.prefill(prompts), axis=-1).tolist()
    b.prefill(prompts)
    chosen = a.decode_greedy(tokens, 9)
    ref, last = [[], []], tokens
    for _ in range(9):
        last = np.argmax(b.decode(last), axis=-1).tolist()
        for row, t in zip(ref, last, strict=True):
            row.append(t)
    assert chosen == ref
    with pytest.raises(ValueError, match="count must be a positive int"):
        a.decode_greedy([c[-1] for c in chosen], 0)
    with pytest.raises(ValueError, match=r"the KV cache is full \(40 positions\)"):
        a.decode_greedy([c[-1] for c in chosen], 40)
