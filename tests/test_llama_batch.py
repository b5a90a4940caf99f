"""Batch > 1 LLaMA decode: B prompts of different lengths, each sequence at its own positions, against
B single-sequence runs of ours and against transformers (torch CPU) on a tiny GQA model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from meganeura_onnx.cli.model_file import load_module  # noqa: E402
from tiny_hf import save_tiny_llama  # noqa: E402

from meganeura_onnx.generation import generate, generate_batch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
llama = load_module(ROOT / "models" / "llama.py")

# Lengths 10, 3, 7, 1: with prefill_chunk 4 the longest takes chunks and a remainder, the short ones
# are padded and re-run their last chunk while the longest is still prefilling.
PROMPTS = [[5, 17, 99, 3, 64, 12, 8, 127, 40, 1], [7, 7, 100], [42, 9, 13, 88, 2, 61, 30], [11]]
STEPS = 24


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_llama_batch")
    model, weights = save_tiny_llama(folder)
    return model, weights, llama.LlamaConfig.from_json(folder / "config.json")


def _hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels-if-built", "function-bodies"])
def test_batched_greedy_generation_equals_single_sequence_runs_and_transformers(tiny, kernels):
    model, path, cfg = tiny
    batched = llama.LlamaBatchRunner(cfg, path, batch=len(PROMPTS), max_seq=48, prefill_chunk=4, use_custom_ops=kernels)
    ours = generate_batch(batched, PROMPTS, STEPS)
    single = llama.LlamaRunner(cfg, path, max_seq=48, prefill_chunk=4, use_custom_ops=kernels)
    assert ours == [list(generate(single, p, STEPS)) for p in PROMPTS]
    assert ours == [_hf_greedy(model, p, STEPS) for p in PROMPTS]


def test_batched_prefill_logits_equal_transformers_per_prompt(tiny):
    model, path, cfg = tiny
    runner = llama.LlamaBatchRunner(cfg, path, batch=len(PROMPTS), max_seq=32, prefill_chunk=8)
    ours = runner.prefill(PROMPTS)
    assert ours.shape == (len(PROMPTS), cfg.vocab_size)
    for row, prompt in zip(ours, PROMPTS, strict=True):
        with torch.no_grad():
            ref = model(torch.tensor([prompt])).logits[0, -1].numpy()
        assert np.abs(row - ref).max() <= 1e-4


def test_fewer_prompts_than_the_batch_and_a_second_round_reuse_the_runner(tiny):
    model, path, cfg = tiny
    runner = llama.LlamaBatchRunner(cfg, path, batch=4, max_seq=48, prefill_chunk=4)
    first = generate_batch(runner, PROMPTS[:2], 8)
    assert first == [_hf_greedy(model, p, 8) for p in PROMPTS[:2]]
    again = generate_batch(runner, PROMPTS[2:][::-1], 8)  # the caches of the first round must not leak in
    assert again == [_hf_greedy(model, p, 8) for p in PROMPTS[2:][::-1]]


def test_each_sequence_stops_at_its_own_stop_id(tiny):
    model, path, cfg = tiny
    runner = llama.LlamaBatchRunner(cfg, path, batch=2, max_seq=48, prefill_chunk=4)
    full = [_hf_greedy(model, p, 12) for p in PROMPTS[:2]]
    stop = full[0][3]  # sequence 0 stops at its 4th token; sequence 1 at that id if it produces it
    out = generate_batch(runner, PROMPTS[:2], 12, stop_ids=[stop])
    for got, ref in zip(out, full, strict=True):
        cut = ref.index(stop) + 1 if stop in ref else len(ref)
        assert got == ref[:cut]


def test_batch_errors_name_the_argument_and_the_values(tiny):
    _, path, cfg = tiny
    runner = llama.LlamaBatchRunner(cfg, path, batch=2, max_seq=16, prefill_chunk=4)
    with pytest.raises(ValueError, match="expected 1 to 2 prompts"):
        runner.prefill(PROMPTS[:3])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        runner.prefill([[1], []])
    with pytest.raises(ValueError, match="prompt 0 has 17 tokens"):
        runner.prefill([[1] * 17])
    runner.prefill(PROMPTS[:2])
    with pytest.raises(ValueError, match="expected 2 tokens"):
        runner.decode([1])
    with pytest.raises(ValueError, match="need 19 cache positions"):
        generate_batch(runner, [[1] * 10, [2]], 10)
    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        llama.LlamaBatchRunner(cfg, path, batch=0)
    with pytest.raises(ValueError, match="batch must be a positive int"):
        llama.build_graph(cfg, "logits", 4, 16, batch=2)


@pytest.mark.parametrize("spinning", [False, True])
def test_the_runner_passes_its_thread_spinning_choice_to_both_sessions(tiny, spinning):
    _, path, cfg = tiny
    runner = llama.LlamaRunner(cfg, path, max_seq=16, prefill_chunk=4, thread_spinning=spinning)
    for session in runner.sessions:
        options = session._ort.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == ("1" if spinning else "0")


@pytest.mark.parametrize("threads", [None, 1])
def test_the_runner_sets_its_threads_explicitly_on_the_cpu(tiny, threads):
    """None: one intra-op thread per CPU the process may use, set explicitly (ORT's own default, 0,
    pins its threads to cores); spinning off by default."""
    import os

    _, path, cfg = tiny
    runner = llama.LlamaRunner(cfg, path, max_seq=16, prefill_chunk=4, threads=threads)
    want = len(os.sched_getaffinity(0)) if threads is None else threads
    for session in runner.sessions:
        options = session._ort.get_session_options()
        assert options.intra_op_num_threads == want
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_the_runner_passes_session_options_to_every_session_and_profiles_on_request(tiny, tmp_path):
    import json

    _, path, cfg = tiny
    opts = {"enable_profiling": True, "profile_file_prefix": str(tmp_path / "prof"), "intra_op_num_threads": 1}
    runner = llama.LlamaRunner(cfg, path, max_seq=16, prefill_chunk=8, session_options=opts)
    for session in runner.sessions:  # session_options override the runner's own thread count
        assert session._ort.get_session_options().intra_op_num_threads == 1
    runner.prefill([1, 2, 3, 4, 5])
    trace = json.loads(Path(runner.prefiller.end_profiling()).read_text())
    assert sum(e.get("name") == "model_run" for e in trace) == 1
    ops = {e["args"]["op_name"] for e in trace if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")}
    assert "MatMul" in ops and any(op.endswith("CachedAttention") for op in ops), ops  # the products and attention
    assert Path(runner.decoder.end_profiling()).is_file()


def test_end_profiling_without_profiling_and_an_unknown_session_option_are_errors(tiny):
    _, path, cfg = tiny
    runner = llama.LlamaRunner(cfg, path, max_seq=16, prefill_chunk=4)
    with pytest.raises(RuntimeError, match="built without session_options"):
        runner.prefiller.end_profiling()
    with pytest.raises(ValueError, match="has no attribute 'no_such_option'"):
        llama.LlamaRunner(cfg, path, max_seq=16, prefill_chunk=4, session_options={"no_such_option": 1})


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_the_runner_refuses_a_thread_count_that_is_not_a_positive_int(tiny, threads):
    _, path, cfg = tiny
    with pytest.raises(ValueError, match=f"threads must be a positive int or None, got {threads!r}"):
        llama.LlamaRunner(cfg, path, max_seq=16, prefill_chunk=4, threads=threads)
