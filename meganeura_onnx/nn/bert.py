"""BERT encoder blocks with Hugging Face ``BertModel`` names (``embeddings.*``, ``encoder.layer.N.*``).

Rows are tokens: ``batch`` sentences (an int or a symbolic dim) of ``seq`` tokens each, one after
the other. Without an ``attention_mask`` every token attends to every token of its sentence
(``full_attention``: sentences of one true length); with one (U32 ``[batch, seq]``, 0 = padding, as
a tokenizer pads) padding keys are hidden (``masked_full_attention``), so sentences of different
lengths share one padded batch. Dropout is the identity at inference and is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..graph import Graph
from ..ir import Dim, NodeId
from .layers import Embedding, LayerNorm, Linear, join, read_config_json


@dataclass(frozen=True)
class BertConfig:
    """The fields of a Hugging Face ``BertConfig`` this implementation uses."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig: hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        """From a parsed HF ``config.json``; rejects other architectures and activations."""
        if d.get("model_type") not in (None, "bert"):
            raise ValueError(f"BertConfig: config.json describes model_type {d.get('model_type')!r}, not 'bert'")
        if d.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"BertConfig: hidden_act {d['hidden_act']!r} is not supported (only the exact erf 'gelu')")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"BertConfig: position_embedding_type {d['position_embedding_type']!r} is not supported")
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    @classmethod
    def from_json(cls, path: str | Path) -> BertConfig:
        return cls.from_dict(read_config_json(path))


@dataclass
class BertEmbeddings:
    """``embeddings``: word + position + token-type embeddings, then LayerNorm."""

    word_embeddings: Embedding
    position_embeddings: Embedding
    token_type_embeddings: Embedding
    layer_norm: LayerNorm

    @classmethod
    def new(cls, g: Graph, name: str, cfg: BertConfig) -> BertEmbeddings:
        d = cfg.hidden_size
        return cls(
            Embedding.new(g, join(name, "word_embeddings"), cfg.vocab_size, d),
            Embedding.new(g, join(name, "position_embeddings"), cfg.max_position_embeddings, d),
            Embedding.new(g, join(name, "token_type_embeddings"), cfg.type_vocab_size, d),
            LayerNorm.new(g, join(name, "LayerNorm"), d, cfg.layer_norm_eps),
        )

    def forward(self, g: Graph, input_ids: NodeId, position_ids: NodeId, token_type_ids: NodeId) -> NodeId:
        x = g.add(self.word_embeddings.forward(g, input_ids), self.token_type_embeddings.forward(g, token_type_ids))
        return self.layer_norm.forward(g, g.add(x, self.position_embeddings.forward(g, position_ids)))


@dataclass
class BertSelfAttention:
    """``attention.self``: query/key/value projections (with bias) and attention (masked when padded)."""

    query: Linear
    key: Linear
    value: Linear
    num_heads: int
    head_dim: int

    @classmethod
    def new(cls, g: Graph, name: str, cfg: BertConfig) -> BertSelfAttention:
        d = cfg.hidden_size
        q, k, v = (Linear.new(g, join(name, n), d, d) for n in ("query", "key", "value"))
        return cls(q, k, v, cfg.num_attention_heads, cfg.head_dim)

    def forward(self, g: Graph, x: NodeId, batch: Dim = 1, attention_mask: NodeId | None = None) -> NodeId:
        """``batch`` sequences of equal length stacked in the rows of x (an int or a symbolic dim);
        ``attention_mask`` (U32 ``[batch, seq]``) hides padding keys and sets the batch itself."""
        q, k, v = (p.forward(g, x) for p in (self.query, self.key, self.value))
        if attention_mask is not None:
            return g.masked_full_attention(q, k, v, attention_mask, self.num_heads, self.num_heads, self.head_dim)
        if batch == 1:
            return g.full_attention(q, k, v, self.num_heads, self.num_heads, self.head_dim)
        return g.apply(
            "full_attention", q, k, v, num_heads=self.num_heads, num_kv_heads=self.num_heads, head_dim=self.head_dim, batch=batch
        )


@dataclass
class BertResidualOutput:
    """``attention.output`` and ``output``: ``LayerNorm(dense(x) + residual)``."""

    dense: Linear
    layer_norm: LayerNorm

    @classmethod
    def new(cls, g: Graph, name: str, in_features: int, cfg: BertConfig) -> BertResidualOutput:
        return cls(
            Linear.new(g, join(name, "dense"), in_features, cfg.hidden_size),
            LayerNorm.new(g, join(name, "LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps),
        )

    def forward(self, g: Graph, x: NodeId, residual: NodeId) -> NodeId:
        return self.layer_norm.forward(g, g.add(self.dense.forward(g, x), residual))


@dataclass
class BertAttention:
    """``attention``: self-attention plus its output projection and residual LayerNorm."""

    self_attn: BertSelfAttention
    output: BertResidualOutput

    @classmethod
    def new(cls, g: Graph, name: str, cfg: BertConfig) -> BertAttention:
        return cls(BertSelfAttention.new(g, join(name, "self"), cfg), BertResidualOutput.new(g, join(name, "output"), cfg.hidden_size, cfg))

    def forward(self, g: Graph, x: NodeId, batch: Dim = 1, attention_mask: NodeId | None = None) -> NodeId:
        return self.output.forward(g, self.self_attn.forward(g, x, batch, attention_mask), x)


@dataclass
class BertIntermediate:
    """``intermediate``: ``gelu(dense(x))``."""

    dense: Linear

    @classmethod
    def new(cls, g: Graph, name: str, cfg: BertConfig) -> BertIntermediate:
        return cls(Linear.new(g, join(name, "dense"), cfg.hidden_size, cfg.intermediate_size))

    def forward(self, g: Graph, x: NodeId) -> NodeId:
        return g.gelu(self.dense.forward(g, x))


BertOutput = BertResidualOutput
"""``output`` of a layer has the same structure as ``attention.output`` (dense + residual LayerNorm)."""


@dataclass
class BertLayer:
    """``encoder.layer.N``."""

    attention: BertAttention
    intermediate: BertIntermediate
    output: BertResidualOutput

    @classmethod
    def new(cls, g: Graph, name: str, cfg: BertConfig) -> BertLayer:
        return cls(
            BertAttention.new(g, join(name, "attention"), cfg),
            BertIntermediate.new(g, join(name, "intermediate"), cfg),
            BertResidualOutput.new(g, join(name, "output"), cfg.intermediate_size, cfg),
        )

    def forward(self, g: Graph, x: NodeId, batch: Dim = 1, attention_mask: NodeId | None = None) -> NodeId:
        """x: the rows of ``batch`` sequences of equal length, one after the other (padded ones with
        an ``attention_mask``)."""
        h = self.attention.forward(g, x, batch, attention_mask)
        return self.output.forward(g, self.intermediate.forward(g, h), h)
