"""LLaMA blocks with Hugging Face names: attention with GQA + rope, the SwiGLU MLP, the decoder layer.

Every block runs in one of three modes, chosen by what ``forward`` is given:

- ``cache=None``: plain causal self-attention over the graph's rows (row i at position i). Used for
  full-sequence logits and for training.
- ``cache=KvCache(...)``: the rows are the tokens at positions ``kv_pos[0] + t``; their keys and
  values are written into per-layer cache inputs with ``cache_write`` and the queries attend to the
  cache with ``cached_attention``. Those cache inputs become Session state, so they
  persist on the device between ``step()`` calls.
- ``cache=PastKv(...)``: the layout of the ONNX ecosystem's decoder files: the rows are batch
  sequences of new tokens at ``position_ids``; past keys/values come in as inputs and leave, with this
  step's appended, as ``present`` outputs; an ``attention_mask`` hides (left) padding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..graph import Graph
from ..ir import NodeId, dim_div, dim_mul
from .layers import Linear, RmsNorm, join, read_config_json


@dataclass(frozen=True)
class LlamaConfig:
    """The fields of a Hugging Face ``LlamaConfig`` this implementation uses."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"LlamaConfig: num_attention_heads ({self.num_attention_heads}) must be a multiple of num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"LlamaConfig: head_dim must be even for rope, got {self.head_dim}")

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def eos_ids(self) -> set[int]:
        e = self.eos_token_id
        return set() if e is None else {e} if isinstance(e, int) else set(e)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LlamaConfig:
        """From a parsed HF ``config.json``; rejects other architectures and unsupported rope scaling."""
        model_type = d.get("model_type")
        if model_type not in (None, "llama", "mistral", "qwen2") and not any("Llama" in a for a in d.get("architectures") or []):
            raise ValueError(f"LlamaConfig: config.json describes model_type {model_type!r}, not a LLaMA-family model")
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"LlamaConfig: hidden_act {d['hidden_act']!r} is not supported (LLaMA uses silu)")
        for flag in ("attention_bias", "mlp_bias"):
            if d.get(flag):
                raise ValueError(f"LlamaConfig: {flag}=true is not supported")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(f"LlamaConfig: rope scaling {rope_type!r} is not supported (only the default rope)")
        theta = rope.get("rope_theta", d.get("rope_theta", 10000.0))
        heads = d["num_attention_heads"]
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d and d[f.name] is not None}
        kw.setdefault("num_key_value_heads", heads)
        kw.setdefault("head_dim", d["hidden_size"] // heads)
        kw["rope_theta"] = float(theta)
        return cls(**kw)

    @classmethod
    def from_json(cls, path: str | Path) -> LlamaConfig:
        return cls.from_dict(read_config_json(path))

    def to_dict(self) -> dict[str, Any]:
        """A HF-style config dict (``model_type`` llama), loadable by ``transformers.LlamaConfig``."""
        return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", **asdict(self)}


@dataclass
class KvCache:
    """The cache inputs of one layer and the shared U32 ``kv_pos`` node.

    One sequence (``batch=None``): caches ``[max_seq, kv_dim]``, ``kv_pos [1]`` the position of row 0.
    ``batch=B`` sequences: caches ``[B, max_seq, kv_dim]``, ``kv_pos [B]`` the position of each
    sequence's first row; the layer's rows are ``B`` sequences of ``rows`` tokens each (sequence-major).
    """

    k: NodeId
    v: NodeId
    kv_pos: NodeId
    batch: int | None = None

    @classmethod
    def new(cls, g: Graph, name: str, max_seq: int, kv_dim: int, kv_pos: NodeId, batch: int | None = None) -> KvCache:
        shape = [max_seq, kv_dim] if batch is None else [batch, max_seq, kv_dim]
        return cls(g.input(join(name, "k_cache"), shape), g.input(join(name, "v_cache"), shape), kv_pos, batch)


@dataclass
class PastKv:
    """One layer's past keys/values in the ONNX ecosystem's decoder layout (Optimum, onnxruntime-genai):
    inputs ``[batch, kv_heads, past, head_dim]``, the step's ``attention_mask [batch, past + seq]``
    and ``position_ids [batch, seq]``. ``forward`` fills in the ``present`` keys/values
    ``[batch, kv_heads, past + seq, head_dim]`` (past followed by this step's)."""

    k: NodeId
    v: NodeId
    attention_mask: NodeId
    position_ids: NodeId
    present_k: NodeId | None = None
    present_v: NodeId | None = None


@dataclass
class InOutLinear(Linear):
    """A bias-free ``Linear`` whose weight is stored ``[in, out]`` (the transpose of torch's layout,
    under the same name) and applied with a plain ``matmul``. For inference on the CPU: ONNX
    Runtime's one-row product is ~40% faster on ``[in, out]`` weights than ``Gemm(transB=1)`` on
    ``[out, in]`` ones (SmolLM2-135M's projections: 6.7 vs 9.4 ms per 30 products of 576x1536)."""

    @classmethod
    def new(cls, g: Graph, name: str, in_features: int, out_features: int, bias: bool = False) -> InOutLinear:
        if bias:
            raise ValueError(f"InOutLinear {name!r}: bias is not supported")
        return cls(name, in_features, out_features, g.parameter(join(name, "weight"), [in_features, out_features]), None)

    def forward(self, g: Graph, x: NodeId) -> NodeId:
        return g.matmul(x, self.weight)


def linear_class(in_out: bool) -> type[Linear]:
    return InOutLinear if in_out else Linear


@dataclass
class LlamaAttention:
    """``self_attn``: q/k/v/o projections (no bias), rotate-half rope, causal GQA attention."""

    name: str
    q_proj: Linear
    k_proj: Linear
    v_proj: Linear
    o_proj: Linear
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float

    @classmethod
    def new(cls, g: Graph, name: str, cfg: LlamaConfig, in_out: bool = False) -> LlamaAttention:
        """``in_out``: the projections as :class:`InOutLinear` (weights stored ``[in, out]``)."""
        h, kv, hd, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        lin = linear_class(in_out)
        return cls(
            name,
            lin.new(g, join(name, "q_proj"), d, h * hd, bias=False),
            lin.new(g, join(name, "k_proj"), d, kv * hd, bias=False),
            lin.new(g, join(name, "v_proj"), d, kv * hd, bias=False),
            lin.new(g, join(name, "o_proj"), h * hd, d, bias=False),
            h,
            kv,
            hd,
            cfg.rope_theta,
        )

    def forward(self, g: Graph, x: NodeId, cache: KvCache | PastKv | None = None, fused_attention: bool = False) -> NodeId:
        """``fused_attention`` (no cache only): :meth:`Graph.flash_attention`, for training graphs."""
        q, k, v = (p.forward(g, x) for p in (self.q_proj, self.k_proj, self.v_proj))
        heads = (self.num_heads, self.num_kv_heads, self.head_dim)
        if isinstance(cache, PastKv):  # rows = batch sequences of new tokens; keys/values grow by concat
            q = g.rope_positions(q, cache.position_ids, self.rope_theta, self.head_dim)
            k = g.rope_positions(k, cache.position_ids, self.rope_theta, self.head_dim)
            cache.present_k, cache.present_v = g.kv_concat(cache.k, k), g.kv_concat(cache.v, v)
            out = g.masked_causal_attention(q, cache.present_k, cache.present_v, cache.attention_mask, *heads)
        elif cache is None:
            q, k = g.rope(q, self.rope_theta, self.head_dim), g.rope(k, self.rope_theta, self.head_dim)
            out = g.causal_attention(q, k, v, *heads, fused=fused_attention)
        else:
            out = self._cached(g, q, k, v, cache)
        return self.o_proj.forward(g, out)

    def _cached(self, g: Graph, q: NodeId, k: NodeId, v: NodeId, cache: KvCache) -> NodeId:
        """Rope at the cache positions, the rows written into the cache, attention over it. With a
        batch the projections' ``[B*rows, width]`` rows go to the cache ops as ``[B, rows, width]``."""
        rows = None
        if cache.batch is not None:
            rows = dim_div(g.node(q).ty.shape[0], cache.batch)
            q, k, v = (g.reshape(x, [cache.batch, rows, g.node(x).ty.shape[1]]) for x in (q, k, v))
        q = g.rope_dynamic_offset(q, self.rope_theta, cache.kv_pos, self.head_dim)
        k = g.rope_dynamic_offset(k, self.rope_theta, cache.kv_pos, self.head_dim)
        k_all = g.cache_write(k, cache.k, cache.kv_pos)
        v_all = g.cache_write(v, cache.v, cache.kv_pos)
        out = g.cached_attention(q, k_all, v_all, cache.kv_pos, self.num_heads, self.num_kv_heads, self.head_dim)
        return out if rows is None else g.reshape(out, [dim_mul(cache.batch, rows), self.num_heads * self.head_dim])


@dataclass
class LlamaMLP:
    """``mlp``: ``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    gate_proj: Linear
    up_proj: Linear
    down_proj: Linear

    @classmethod
    def new(cls, g: Graph, name: str, hidden: int, intermediate: int, in_out: bool = False) -> LlamaMLP:
        lin = linear_class(in_out)
        return cls(
            lin.new(g, join(name, "gate_proj"), hidden, intermediate, bias=False),
            lin.new(g, join(name, "up_proj"), hidden, intermediate, bias=False),
            lin.new(g, join(name, "down_proj"), intermediate, hidden, bias=False),
        )

    def forward(self, g: Graph, x: NodeId) -> NodeId:
        return self.down_proj.forward(g, g.swiglu(self.gate_proj.forward(g, x), self.up_proj.forward(g, x)))


@dataclass
class LlamaDecoderLayer:
    """``model.layers.N``: pre-norm attention and MLP blocks with residual connections."""

    input_layernorm: RmsNorm
    self_attn: LlamaAttention
    post_attention_layernorm: RmsNorm
    mlp: LlamaMLP

    @classmethod
    def new(cls, g: Graph, name: str, cfg: LlamaConfig, in_out: bool = False) -> LlamaDecoderLayer:
        d = cfg.hidden_size
        return cls(
            RmsNorm.new(g, join(name, "input_layernorm"), d, cfg.rms_norm_eps),
            LlamaAttention.new(g, join(name, "self_attn"), cfg, in_out),
            RmsNorm.new(g, join(name, "post_attention_layernorm"), d, cfg.rms_norm_eps),
            LlamaMLP.new(g, join(name, "mlp"), d, cfg.intermediate_size, in_out),
        )

    def forward(self, g: Graph, x: NodeId, cache: KvCache | PastKv | None = None, fused_attention: bool = False) -> NodeId:
        h = g.add(x, self.self_attn.forward(g, self.input_layernorm.forward(g, x), cache, fused_attention))
        return g.add(h, self.mlp.forward(g, self.post_attention_layernorm.forward(g, h)))
