"""Self/cross attention over row-major ``[seq, heads * head_dim]`` tensors, with GQA.

``causal_attention``, ``full_attention``, ``cross_attention`` and ``multi_head_attn`` compute the
same function family; they are separate ops so a Netron view and error messages use the name the
program used. ``multi_head_attn`` is Meganeura's differentiable form: here every attention op is
differentiable. Backward: Meganeura's multi_head_attn saves the log-sum-exp of each score row for its
backward kernel; a Graph node has one output, so here ``attention_backward`` recomputes the scores
and softmax from q and k (one extra QK^T product per step, flash-attention style) and returns dq,
dk and dv packed in one flat tensor that three ``take`` nodes unpack.
"""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .onnx_util import NEG_INF, arange, attend
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

    @d.vjp
    def _(g, node, dy):
        q, k, v = node.inputs
        a = node.attrs
        packed = g._emit(
            "attention_backward",
            q,
            k,
            v,
            dy,
            num_heads=a["num_heads"],
            num_kv_heads=a["num_kv_heads"],
            head_dim=a["head_dim"],
            causal=_is_causal(a),
        )
        shapes = [g.node(i).ty.shape for i in (q, k, v)]
        starts = np.cumsum([0] + [int(np.prod(sh)) for sh in shapes])
        return [g._emit("take", packed, start=int(st), shape=sh) for st, sh in zip(starts, shapes, strict=False)]


_declare("causal_attention", causal=True, same_seq=True)
_declare("full_attention", causal=False, same_seq=True)
_declare("cross_attention", causal=False, same_seq=False)
_declare("multi_head_attn", causal=True, same_seq=False)


# -- backward (no VJP of its own: second-order gradients through attention stop here) --------------
attention_backward = op("attention_backward", ("q", "k", "v", "dy"), differentiable=False)
take = op("take", ("x",), differentiable=False)


@attention_backward.shape
def _(
    q: TensorType, k: TensorType, v: TensorType, dy: TensorType, *, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool
) -> TensorType:
    check_heads("attention_backward", num_heads, num_kv_heads, head_dim)
    require(
        q.shape[1] == num_heads * head_dim and dy.shape == q.shape,
        "attention_backward",
        f"q and dy must be [seq, {num_heads}*{head_dim}], got {list(q.shape)} and {list(dy.shape)}",
    )
    require(
        k.shape == v.shape and k.shape[1] == num_kv_heads * head_dim,
        "attention_backward",
        f"k and v must be [kv_seq, {num_kv_heads}*{head_dim}], got {list(k.shape)} and {list(v.shape)}",
    )
    require(
        not causal or q.shape[0] == k.shape[0],
        "attention_backward",
        f"causal needs q and k of the same length, got {q.shape[0]} and {k.shape[0]}",
    )
    return TensorType((q.num_elements() + 2 * k.num_elements(),))


@attention_backward.numpy
def _(q, k, v, dy, *, num_heads, num_kv_heads, head_dim, causal):
    T, S, rep, kvh = q.shape[0], k.shape[0], num_heads // num_kv_heads, num_kv_heads

    def heads(x, n):  # [rows, n*hd] -> [n, rows, hd]
        return x.reshape(x.shape[0], n, head_dim).transpose(1, 0, 2)

    qh, doh = heads(q, num_heads), heads(dy, num_heads)
    kh, vh = np.repeat(heads(k, kvh), rep, axis=0), np.repeat(heads(v, kvh), rep, axis=0)
    scale = q.dtype.type(1.0 / np.sqrt(head_dim))
    scores = qh @ kh.transpose(0, 2, 1) * scale
    if causal:
        scores = np.where((np.arange(S)[None, :] > np.arange(T)[:, None])[None], -np.inf, scores)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    dp = doh @ vh.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dq = ds @ kh * scale
    dk = (ds.transpose(0, 2, 1) @ qh * scale).reshape(kvh, rep, S, head_dim).sum(axis=1)
    dv = (p.transpose(0, 2, 1) @ doh).reshape(kvh, rep, S, head_dim).sum(axis=1)
    return np.concatenate([x.transpose(1, 0, 2).reshape(-1) for x in (dq, dk, dv)]).astype(q.dtype)


@attention_backward.onnx
def _(ctx, node, q, k, v, dy):
    a = node.attrs
    H, KVH, hd = a["num_heads"], a["num_kv_heads"], a["head_dim"]
    rep, T, S = H // KVH, ctx.input_types(node)[0].shape[0], ctx.input_types(node)[1].shape[0]

    def heads(x, n, rows):  # -> [n, rows, hd]
        return ctx.op("Transpose", ctx.reshape(x, [rows, n, hd]), perm=[1, 0, 2])

    def expand(xh, rows):  # GQA: KV head j serves query heads j*rep .. j*rep + rep - 1
        if rep == 1:
            return xh
        return ctx.reshape(ctx.op("Expand", ctx.reshape(xh, [KVH, 1, rows, hd]), ctx.ints([KVH, rep, rows, hd])), [H, rows, hd])

    def group_sum(xh, rows):
        return xh if rep == 1 else ctx.op("ReduceSum", ctx.reshape(xh, [KVH, rep, rows, hd]), ctx.ints([1]), keepdims=0)

    def flat(xh):
        return ctx.reshape(ctx.op("Transpose", xh, perm=[1, 0, 2]), [-1])

    def t(x):
        return ctx.op("Transpose", x, perm=[0, 2, 1])

    qh, doh = heads(q, H, T), heads(dy, H, T)
    kh, vh = expand(heads(k, KVH, S), S), expand(heads(v, KVH, S), S)
    scale = ctx.const(1.0 / np.sqrt(hd))
    scores = ctx.op("Mul", ctx.op("MatMul", qh, t(kh)), scale)
    if a["causal"]:
        hidden = ctx.op("Greater", ctx.op("Unsqueeze", arange(ctx, S), ctx.ints([0])), ctx.op("Unsqueeze", arange(ctx, T), ctx.ints([1])))
        scores = ctx.op("Where", hidden, ctx.const(NEG_INF), scores)
    p = ctx.op("Softmax", scores, axis=-1)
    dp = ctx.op("MatMul", doh, t(vh))
    ds = ctx.op("Mul", p, ctx.op("Sub", dp, ctx.op("ReduceSum", ctx.op("Mul", dp, p), ctx.ints([-1]), keepdims=1)))
    dq = ctx.op("Mul", ctx.op("MatMul", ds, kh), scale)
    dk = group_sum(ctx.op("Mul", ctx.op("MatMul", t(ds), qh), scale), S)
    dv = group_sum(ctx.op("MatMul", t(p), doh), S)
    return ctx.op("Concat", flat(dq), flat(dk), flat(dv), axis=0)


def _ex_bwd(g, f, s, skv, h, kvh, hd, causal):
    q, dy = f.param(g, "q", [s, h * hd]), f.param(g, "dy", [s, h * hd])
    k, v = f.param(g, "k", [skv, kvh * hd]), f.param(g, "v", [skv, kvh * hd])
    return g._emit("attention_backward", q, k, v, dy, num_heads=h, num_kv_heads=kvh, head_dim=hd, causal=causal)


examples(
    attention_backward,
    _ex_bwd,
    {"s": 4, "skv": 4, "h": 4, "kvh": 2, "hd": 4, "causal": True},
    {"s": 3, "skv": 5, "h": 2, "kvh": 1, "hd": 8, "causal": False},
)


@take.shape
def _(x: TensorType, *, start: int, shape: tuple[int, ...]) -> TensorType:
    out = TensorType(tuple(shape))
    require(
        isinstance(start, int) and 0 <= start and start + out.num_elements() <= x.num_elements(),
        "take",
        f"elements [{start}, {start} + {out.num_elements()}) do not fit in x {list(x.shape)}",
    )
    return out


take.numpy(lambda x, *, start, shape: x.reshape(-1)[start : start + int(np.prod(shape))].reshape(shape))


@take.onnx
def _(ctx, node, x):
    start, shape = node.attrs["start"], list(node.attrs["shape"])
    flat = ctx.reshape(x, [-1])
    return ctx.reshape(ctx.op("Slice", flat, ctx.ints([start]), ctx.ints([start + int(np.prod(shape))]), ctx.ints([0])), shape)


examples(
    take,
    lambda g, f, n, start, shape: g._emit("take", f.param(g, "x", [n]), start=start, shape=shape),
    {"n": 20, "start": 3, "shape": (2, 5)},
    {"n": 6, "start": 0, "shape": (6,)},
)


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
