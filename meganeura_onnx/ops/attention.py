"""Self/cross attention over row-major ``[seq, heads * head_dim]`` tensors, with GQA.

``causal_attention``, ``full_attention``, ``cross_attention`` and ``multi_head_attn`` compute the
same function family; they are separate ops so a Netron view and error messages use the name the
program used. ``multi_head_attn`` is Meganeura's differentiable form: here every attention op is
differentiable, and the backward pass recomputes the softmax instead of storing the log-sum-exp.
"""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .onnx_util import arange, attend
from .table import examples, op, positive_int, rank, require


def check_heads(name: str, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
    positive_int(name, num_heads, "num_heads")
    positive_int(name, num_kv_heads, "num_kv_heads")
    positive_int(name, head_dim, "head_dim")
    require(num_heads % num_kv_heads == 0, name, f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")


def attention_ref(q, k, v, num_heads: int, num_kv_heads: int, head_dim: int, q_positions=None):
    """Numpy attention. ``q_positions[t]``: the position of query t; keys at j > q_positions[t] are
    masked. None means no mask."""
    T, S, rep = q.shape[0], k.shape[0], num_heads // num_kv_heads
    qh = q.reshape(T, num_heads, head_dim).transpose(1, 0, 2)
    kh = np.repeat(k.reshape(S, num_kv_heads, head_dim).transpose(1, 0, 2), rep, axis=0)
    vh = np.repeat(v.reshape(S, num_kv_heads, head_dim).transpose(1, 0, 2), rep, axis=0)
    scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(head_dim).astype(q.dtype)
    if q_positions is not None:
        hidden = np.arange(S)[None, :] > np.asarray(q_positions)[:, None]
        scores = np.where(hidden[None], -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return (p @ vh).transpose(1, 0, 2).reshape(T, num_heads * head_dim).astype(q.dtype)


def _declare(name: str, causal: bool, same_seq: bool) -> None:
    d = op(name, ("q", "k", "v"))

    @d.shape
    def _(q: TensorType, k: TensorType, v: TensorType, num_heads: int, num_kv_heads: int, head_dim: int, **_: object) -> TensorType:
        check_heads(name, num_heads, num_kv_heads, head_dim)
        for arg, t in (("q", q), ("k", k), ("v", v)):
            rank(name, t, 2, arg)
        require(q.shape[1] == num_heads * head_dim, name, f"q must be [seq, {num_heads}*{head_dim}], got {list(q.shape)}")
        kv = num_kv_heads * head_dim
        require(
            k.shape[1] == kv and v.shape == k.shape,
            name,
            f"k and v must both be [kv_seq, {num_kv_heads}*{head_dim}], got k {list(k.shape)} and v {list(v.shape)}",
        )
        if same_seq:
            require(
                q.shape[0] == k.shape[0],
                name,
                f"self-attention needs q and k with the same sequence length, got q {list(q.shape)} and k {list(k.shape)}",
            )
        return q

    def _is_causal(attrs) -> bool:
        return causal and not attrs.get("is_cross", False)

    @d.numpy
    def _(q, k, v, num_heads, num_kv_heads, head_dim, **attrs):
        pos = np.arange(q.shape[0]) if _is_causal(attrs) else None
        return attention_ref(q, k, v, num_heads, num_kv_heads, head_dim, pos)

    @d.onnx
    def _(ctx, node, q, k, v):
        a = node.attrs
        mask = None
        if _is_causal(a):
            seq = ctx.input_types(node)[0].shape[0]
            mask = (arange(ctx, seq), arange(ctx, seq))
        return attend(ctx, q, k, v, a["head_dim"], a["num_heads"] // a["num_kv_heads"], mask)

    def ex(g, f, s, skv, h, kvh, hd):
        q = f.param(g, "q", [s, h * hd])
        k = f.param(g, "k", [skv, kvh * hd])
        v = f.param(g, "v", [skv, kvh * hd])
        if name == "multi_head_attn":
            return g.multi_head_attn(q, k, v, h, kvh, hd, s != skv)
        return g._emit(name, q, k, v, num_heads=h, num_kv_heads=kvh, head_dim=hd)

    skv2 = 5 if same_seq else 7
    examples(
        d,
        ex,
        {"s": 5, "skv": 5, "h": 4, "kvh": 2, "hd": 8},
        {"s": 3, "skv": 3 if same_seq else 6, "h": 2, "kvh": 2, "hd": 4},
        {"s": 5, "skv": skv2, "h": 3, "kvh": 1, "hd": 16},
    )


_declare("causal_attention", causal=True, same_seq=True)
_declare("full_attention", causal=False, same_seq=True)
_declare("cross_attention", causal=False, same_seq=False)
_declare("multi_head_attn", causal=True, same_seq=False)


class AttentionBuilders:
    def causal_attention(self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int) -> NodeId:
        """Causal multi-head attention with GQA: q ``[S, H*hd]``, k/v ``[S, KVH*hd]`` -> ``[S, H*hd]``."""
        return self._emit("causal_attention", q, k, v, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim)

    def full_attention(self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int) -> NodeId:
        """Bidirectional (unmasked) self-attention; same shapes as :meth:`causal_attention`."""
        return self._emit("full_attention", q, k, v, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim)

    def cross_attention(self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int) -> NodeId:
        """Unmasked attention of q ``[Sq, H*hd]`` over k/v ``[Skv, KVH*hd]`` from another sequence."""
        return self._emit("cross_attention", q, k, v, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim)

    def multi_head_attn(self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int, is_cross: bool) -> NodeId:
        """Meganeura's differentiable attention: causal self-attention when ``is_cross`` is False
        (q and k/v of the same length), unmasked cross-attention when True."""
        if not isinstance(is_cross, bool):
            raise TypeError(f"multi_head_attn: is_cross must be a bool, got {is_cross!r}")
        if not is_cross:
            q_len, k_len = self.node(q).ty.shape[0], self.node(k).ty.shape[0]
            require(
                q_len == k_len, "multi_head_attn", f"is_cross=False needs q and k with the same sequence length, got {q_len} and {k_len}"
            )
        return self._emit("multi_head_attn", q, k, v, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, is_cross=is_cross)
