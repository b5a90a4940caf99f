"""Greedy decoding with the argmax on the GPU (``decode_argmax``, and ``decode_greedy``: steps queued
back to back without a wait, ``Session.steps``), the decode step replayed as CUDA graphs (one per
buffer parity: the fed-back token, position and token log alternate between two buffers), against the
host argmax of ``decode``'s logits from a runner without CUDA graphs, in float32 and float16, one
sequence and a batch.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import pytest
from meganeura_onnx.models import llama

pytestmark = kc.CUDA_SKIPS
CFG = llama.PRESETS["tiny"]


def _runners(batch: int | None, precision: str, max_seq: int, seed: int):
    """Tiny-LLaMA runners on CUDA with the same random weights: with CUDA graphs, and without."""
    kw = {"max_seq": max_seq, "prefill_chunk": 8, "device": "cuda", "seed": seed, "precision": precision}
    if batch is not None:
        kw["batch"] = batch
    cls = llama.LlamaRunner if batch is None else llama.LlamaBatchRunner
    return cls(CFG, cuda_graph=True, **kw), cls(CFG, cuda_graph=False, **kw)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("batch", [None, 3], ids=["one-sequence", "batch-3"])
def test_decode_argmax_in_cuda_graphs_chooses_what_the_host_argmax_chooses(batch, precision):
    graphed, plain = _runners(batch, precision, max_seq=64, seed=7)
    prompts = [[3, 17, 42, 7, 99], [5, 6], [200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
    if batch is None:
        first = int(np.argmax(graphed.prefill(prompts[0])))
        assert first == int(np.argmax(plain.prefill(prompts[0])))
        tokens, ref = first, first
        for step in range(30):
            tokens = graphed.decode_argmax(tokens)
            ref = int(np.argmax(plain.decode(ref)))
            assert tokens == ref, f"step {step}"
    else:
        tokens = np.argmax(graphed.prefill(prompts), axis=-1).tolist()
        ref = np.argmax(plain.prefill(prompts), axis=-1).tolist()
        for step in range(30):
            tokens = graphed.decode_argmax(tokens)
            ref = np.argmax(plain.decode(ref), axis=-1).tolist()
            assert tokens == ref, f"step {step}"
    # the logits path on the same graphed runner still agrees after the greedy steps
    last = tokens if batch else [tokens]
    a = graphed.decode(last if batch else last[0])
    b = plain.decode(last if batch else last[0])
    np.testing.assert_allclose(a, b, rtol=1e-4 if precision == "fp32" else 3e-2, atol=1e-4 if precision == "fp32" else 3e-2)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("batch", [None, 3], ids=["one-sequence", "batch-3"])
def test_decode_greedy_queued_in_cuda_graphs_chooses_what_the_host_argmax_chooses(batch, precision):
    graphed, plain = _runners(batch, precision, max_seq=96, seed=11)
    prompts = [[3, 17, 42, 7, 99], [5, 6], [200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]][: batch or 1]
    first = np.argmax(graphed.prefill(prompts if batch else prompts[0]), axis=-1).reshape(-1).tolist()
    assert first == np.argmax(plain.prefill(prompts if batch else prompts[0]), axis=-1).reshape(-1).tolist()
    ours, ref, last, ref_last = [[] for _ in first], [[] for _ in first], first, first
    for count in (1, 2, 16, 7, 16):  # captures both graphs, then queued chunks
        chunk = graphed.decode_greedy(last if batch else last[0], count)
        rows = chunk if batch else [chunk]
        for row, got in zip(ours, rows, strict=True):
            row += got
        last = [r[-1] for r in rows]
        for _ in range(count):
            ref_last = np.argmax(plain.decode(ref_last if batch else ref_last[0]), axis=-1).reshape(-1).tolist()
            for row, t in zip(ref, ref_last, strict=True):
                row.append(t)
        assert ours == ref, f"after a chunk of {count}"


def test_a_batch_lm_head_wider_than_16384_columns_runs_as_gemm_and_matches_the_cpu():
    """At batch > 1 a vocabulary over 16384 leaves the final norm and LM head unfused (cuBLAS's GEMM, not
    the multi-row GEMV): the CUDA-graph runner's logits and greedy tokens equal the CPU runner's."""
    import dataclasses

    cfg = dataclasses.replace(CFG, vocab_size=20000)
    kw = {"max_seq": 64, "prefill_chunk": 8, "seed": 5, "batch": 3}
    gpu = llama.LlamaBatchRunner(cfg, device="cuda", cuda_graph=True, **kw)
    cpu = llama.LlamaBatchRunner(cfg, device="cpu", **kw)
    assert "RMSNormLinear" not in gpu.sessions[1].plan().kernels()
    prompts = [[3, 17, 42, 7, 99], [5, 6], [19999, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
    a, b = gpu.prefill(prompts), cpu.prefill(prompts)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    tokens = np.argmax(b, axis=-1).tolist()
    for step in range(6):
        a, b = gpu.decode(tokens), cpu.decode(tokens)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
        tokens = np.argmax(b, axis=-1).tolist()
    assert gpu.decode_greedy(tokens, 4) == cpu.decode_greedy(tokens, 4)
