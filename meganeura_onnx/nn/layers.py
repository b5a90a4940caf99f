"""Basic layers: Linear, Embedding, RmsNorm, LayerNorm.

A layer is a plain object holding the NodeIds of its parameters and their Hugging Face names
(``<prefix>.weight``, ``<prefix>.bias``). Creating one adds the parameter leaves to the graph;
``forward(g, x)`` appends the computation. Weights keep HF's storage layout, so a checkpoint loads
by name without any transposition: a Linear weight is ``[out, in]`` and is applied with
``matmul_bt``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..graph import Graph
from ..ir import NodeId


def read_config_json(path: str | Path) -> dict[str, Any]:
    """A HF ``config.json`` as a dict; ``ValueError`` naming the file if it is not a JSON object."""
    try:
        d = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a JSON config file: {e}") from e
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a JSON object (a HF config.json), got {type(d).__name__}")
    return d


def join(prefix: str, name: str) -> str:
    """``join("model", "norm") == "model.norm"``; an empty prefix gives ``name``."""
    return f"{prefix}.{name}" if prefix else name


@dataclass
class Linear:
    """``y = x @ weight.T + bias`` with ``weight [out, in]`` (``torch.nn.Linear``'s layout)."""

    name: str
    in_features: int
    out_features: int
    weight: NodeId
    bias: NodeId | None

    @classmethod
    def new(cls, g: Graph, name: str, in_features: int, out_features: int, bias: bool = True) -> Linear:
        w = g.parameter(join(name, "weight"), [out_features, in_features])
        b = g.parameter(join(name, "bias"), [out_features]) if bias else None
        return cls(name, in_features, out_features, w, b)

    @classmethod
    def tied(cls, name: str, table: Embedding) -> Linear:
        """A bias-free Linear whose weight IS an embedding table (tied input/output embeddings)."""
        return cls(name, table.embedding_dim, table.num_embeddings, table.weight, None)

    def forward(self, g: Graph, x: NodeId) -> NodeId:
        y = g.matmul_bt(x, self.weight)
        return g.bias_add(y, self.bias) if self.bias is not None else y


@dataclass
class Embedding:
    """Row lookup in ``weight [num_embeddings, embedding_dim]`` by U32 indices ``[S]``."""

    name: str
    num_embeddings: int
    embedding_dim: int
    weight: NodeId

    @classmethod
    def new(cls, g: Graph, name: str, num_embeddings: int, embedding_dim: int) -> Embedding:
        return cls(name, num_embeddings, embedding_dim, g.parameter(join(name, "weight"), [num_embeddings, embedding_dim]))

    def forward(self, g: Graph, indices: NodeId) -> NodeId:
        return g.embedding(indices, self.weight)


@dataclass
class RmsNorm:
    """``x / sqrt(mean(x^2) + eps) * weight`` per row (LLaMA's ``LlamaRMSNorm``)."""

    name: str
    weight: NodeId
    eps: float

    @classmethod
    def new(cls, g: Graph, name: str, dim: int, eps: float = 1e-6) -> RmsNorm:
        return cls(name, g.parameter(join(name, "weight"), [dim]), float(eps))

    def forward(self, g: Graph, x: NodeId) -> NodeId:
        return g.rms_norm(x, self.weight, self.eps)


@dataclass
class LayerNorm:
    """``torch.nn.LayerNorm`` over the last dimension (``<name>.weight``, ``<name>.bias``)."""

    name: str
    weight: NodeId
    bias: NodeId
    eps: float

    @classmethod
    def new(cls, g: Graph, name: str, dim: int, eps: float = 1e-5) -> LayerNorm:
        return cls(name, g.parameter(join(name, "weight"), [dim]), g.parameter(join(name, "bias"), [dim]), float(eps))

    def forward(self, g: Graph, x: NodeId) -> NodeId:
        return g.layer_norm(x, self.weight, self.bias, self.eps)
