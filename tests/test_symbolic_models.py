"""The real models with symbolic dimensions: a LLaMA prefill graph of any chunk length (one session,
caches carried across chunks of different lengths) and BERT layers over a symbolic batch of
sentences of a symbolic length, each equal to the numpy reference interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from meganeura_onnx.cli.model_file import load_module

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.init import default_parameters
from meganeura_onnx.nn import BertConfig, BertEmbeddings, BertLayer
from meganeura_onnx.reference import evaluate

llama = load_module(Path(__file__).resolve().parent.parent / "models" / "llama.py")


DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            "CUDAExecutionProvider" not in ort.get_available_providers(), reason="no CUDAExecutionProvider (onnxruntime-gpu) here"
        ),
    ),
]


@pytest.mark.parametrize("device", DEVICES)
def test_llama_prefill_with_symbolic_chunk_length_continues_the_cache_across_lengths(device):
    cfg = llama.load_config(preset="tiny")
    prefill = llama.build_graph(cfg, "prefill", seq="seq", max_seq=16)
    assert prefill.node(prefill.leaves("input_u32")[0][1]).ty.shape == ("seq",)
    params = default_parameters(prefill, seed=3)
    s = build_inference_session(prefill, device, parameters=params)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, 9).astype(np.uint32)
    pos = 0
    for chunk in (tokens[:5], tokens[5:8], tokens[8:]):  # lengths 5, 3, 1: one session, one file
        s.set_input_u32("input_ids", chunk)
        s.set_input_u32("kv_pos", [pos])
        s.set_input_u32("last_row", [len(chunk) - 1])
        s.step()
        pos += len(chunk)
        full = llama.build_graph(cfg, "logits", seq=pos)  # every token so far, no cache
        want = evaluate(full, {"input_ids": tokens[:pos], **params}, np.float64)[0][-1:]
        np.testing.assert_allclose(s.read_output_by_index(0), want, rtol=1e-4, atol=1e-4)


def test_bert_layers_over_a_symbolic_batch_of_sentences_match_numpy_at_two_shapes():
    cfg = BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=4, intermediate_size=24, max_position_embeddings=12
    )
    g = Graph()
    ids = {k: g.input_u32(k, ["batch", "seq"]) for k in ("input_ids", "position_ids", "token_type_ids")}
    h = BertEmbeddings.new(g, "embeddings", cfg).forward(g, ids["input_ids"], ids["position_ids"], ids["token_type_ids"])
    h = BertLayer.new(g, "encoder.layer.0", cfg).forward(g, h, batch="batch")
    g.set_outputs([h])
    assert g.node(h).ty.shape == ("batch*seq", 16)
    params = default_parameters(g, seed=1)
    s = build_inference_session(g, parameters=params)
    for batch, seq in ((2, 5), (3, 2)):
        rng = np.random.default_rng(seq)
        feeds = {
            "input_ids": rng.integers(0, cfg.vocab_size, (batch, seq)),
            "position_ids": np.tile(np.arange(seq), (batch, 1)),
            "token_type_ids": np.zeros((batch, seq)),
        }
        feeds = {k: v.astype(np.uint32) for k, v in feeds.items()}
        for k, v in feeds.items():
            s.set_input_u32(k, v)
        s.step()
        want = evaluate(g, {**feeds, **params}, np.float64)[0]
        np.testing.assert_allclose(s.read_output_by_index(0), want, rtol=1e-4, atol=1e-4)
        # each sentence on its own (batch 1, static) gives its rows: sentences do not mix
        one = evaluate(g, {**{k: v[:1] for k, v in feeds.items()}, **params}, np.float64)[0]
        np.testing.assert_allclose(want[:seq], one, rtol=1e-9, atol=1e-9)
