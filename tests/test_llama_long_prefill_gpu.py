"""A long prompt prefilled chunk by chunk on CUDA, the prefill replayed as a CUDA graph: chunks of 32
rows in a 512-row cache take the FlashAttention forward with each row block's keys split over blocks
(the split count is fixed when the graph is captured; how many splits hold keys follows the position on
the device). Float32 against the same runner on the CPU; float16 against one 320-row prefill step on
CUDA, whose attention runs on the split-K kernel instead. And the default runners on CUDA (one
sequence, and a batch of two by its longest prompt): prompts of up to 128 tokens in steps of the fixed
64-row prefill (a CUDA graph), longer ones in one step of exactly their rows through the symbolic-rows
prefill; float32 against the CPU, float16 against 16-row chunks on CUDA.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import pytest
from meganeura_onnx.models import llama

pytestmark = kc.CUDA_SKIPS
CFG = llama.PRESETS["tiny"]
PROMPT = np.random.default_rng(5).integers(0, CFG.vocab_size, 300).tolist()
TOL = {"fp32": 1e-4, "fp16": 3e-2}


def _runner(device: str, precision: str, chunk: int | None) -> llama.LlamaRunner:
    return llama.LlamaRunner(CFG, max_seq=512, prefill_chunk=chunk, device=device, seed=3, precision=precision)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_long_prompt_in_chunks_on_cuda_matches_a_reference_through_prefill_and_decode(precision):
    chunked = _runner("cuda", precision, 32)  # 10 chunks, the later ones up to 288 rows into the cache
    reference = _runner("cpu", "fp32", 32) if precision == "fp32" else _runner("cuda", precision, 320)
    tol = TOL[precision]
    got, want = chunked.prefill(PROMPT), reference.prefill(PROMPT)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    token = int(np.argmax(want))
    for step in range(8):  # decode continues from the caches the chunks wrote
        got, want = chunked.decode(token), reference.decode(token)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"decode step {step}")
        token = int(np.argmax(want))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_default_cuda_runner_prefills_short_prompts_in_graph_chunks_and_long_ones_in_one_step(precision):
    runner = _runner("cuda", precision, None)
    reference = _runner("cpu", "fp32", None) if precision == "fp32" else _runner("cuda", precision, 16)
    tol = TOL[precision]
    for prompt in (PROMPT, PROMPT[:40], PROMPT[:65]):
        n = len(prompt)
        assert runner.prefill_plan(n) == ((-(-n // 64), 64) if n <= 128 else (1, n))
        got, want = runner.prefill(prompt), reference.prefill(prompt)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"prompt of {n} tokens")
        token = int(np.argmax(want))
        for step in range(4):
            got, want = runner.decode(token), reference.decode(token)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"prompt of {n}, decode step {step}")
            token = int(np.argmax(want))


def test_default_cuda_batch_runner_prefills_in_graph_chunks_or_one_step_as_the_longest_prompt_needs():
    runner = llama.LlamaBatchRunner(CFG, max_seq=512, device="cuda", seed=3, batch=2)
    reference = llama.LlamaBatchRunner(CFG, max_seq=512, device="cpu", seed=3, batch=2)
    for prompts in ([PROMPT, PROMPT[:40]], [PROMPT[:100], PROMPT[:40]]):  # one step of 300 rows; two graph steps of 64
        longest = max(map(len, prompts))
        assert runner.prefill_plan(longest) == ((1, 300) if longest > 128 else (2, 64))
        got, want = runner.prefill(prompts), reference.prefill(prompts)
        np.testing.assert_allclose(got, want, rtol=TOL["fp32"], atol=TOL["fp32"], err_msg=f"prompts of {longest} tokens at most")
        tokens = [int(t) for t in np.argmax(want, axis=-1)]
        for step in range(4):
            got, want = runner.decode(tokens), reference.decode(tokens)
            np.testing.assert_allclose(got, want, rtol=TOL["fp32"], atol=TOL["fp32"], err_msg=f"decode step {step}")
            tokens = [int(t) for t in np.argmax(want, axis=-1)]


@pytest.mark.parametrize("second_turn", [20, 200], ids=["graph-steps", "one-symbolic-step"])
def test_append_on_cuda_continues_a_conversation_as_the_cpu_does(second_turn):
    runner, reference = _runner("cuda", "fp32", None), _runner("cpu", "fp32", None)
    tol = TOL["fp32"]
    np.testing.assert_allclose(runner.prefill(PROMPT[:40]), want := reference.prefill(PROMPT[:40]), rtol=tol, atol=tol)
    for phase in ("decode", "append", "decode"):
        if phase == "append":  # a second turn after 3 decoded tokens (the last one chosen, not yet fed)
            got, want = runner.append(PROMPT[40 : 40 + second_turn]), reference.append(PROMPT[40 : 40 + second_turn])
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg="append")
            continue
        for step in range(3):
            token = int(np.argmax(want))
            got, want = runner.decode(token), reference.decode(token)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"decode step {step}")
    assert runner.position == reference.position == 40 + 3 + second_turn + 3
