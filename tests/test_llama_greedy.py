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
