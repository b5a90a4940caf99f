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

from ..ir import Dim, NodeId, TensorType, dim_add, dim_div, dim_mul
from .onnx_util import NEG_INF, arange, attend
from .table import bool_attr, dim_attr, examples, int_attr, op, optional, rank, require, shape_attr

HEADS = (int_attr("num_heads", 1), int_attr("num_kv_heads", 1), int_attr("head_dim", 1))
BATCH = optional(dim_attr("batch", doc="rows hold this many sequences stacked (an int or a symbolic dim)"), 1)


def check_heads(name: str, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
    """The relation between the (already type-checked) head counts."""
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


def _attention_shape(name: str, same_seq: bool):
    """The shape rule of attention op ``name``: q [seq, heads*head_dim], k and v [kv_seq, kv_heads*head_dim]."""

    def shape(q: TensorType, k: TensorType, v: TensorType, num_heads: int, num_kv_heads: int, head_dim: int, **attrs: object) -> TensorType:
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
        batch = attrs.get("batch", 1)
        require(
            dim_div(q.shape[0], batch) is not None and dim_div(k.shape[0], batch) is not None,
            name,
            f"batch={batch} must divide the rows of q {list(q.shape)} and k {list(k.shape)}",
        )
        if same_seq or (name == "multi_head_attn" and not attrs.get("is_cross", False)):
            require(
                q.shape[0] == k.shape[0],
                name,
                f"self-attention needs q and k with the same sequence length, got q {list(q.shape)} and k {list(k.shape)}",
            )
        return q

    return shape


def _attention_examples(d, name: str, same_seq: bool) -> None:
    """The op table examples of attention op ``name`` (GQA, single-head groups, batched rows)."""

    def ex(g, f, s, skv, h, kvh, hd, batch=1):
        q = f.param(g, "q", [batch * s, h * hd])
        k = f.param(g, "k", [batch * skv, kvh * hd])
        v = f.param(g, "v", [batch * skv, kvh * hd])
        if batch > 1:  # rows = batch sequences stacked (the `batch` attribute)
            extra = {"is_cross": s != skv} if name == "multi_head_attn" else {}
            return g.apply(name, q, k, v, num_heads=h, num_kv_heads=kvh, head_dim=hd, batch=batch, **extra)
        if name == "multi_head_attn":
            return g.multi_head_attn(q, k, v, h, kvh, hd, s != skv)
        return g.apply(name, q, k, v, num_heads=h, num_kv_heads=kvh, head_dim=hd)

    skv2 = 5 if same_seq else 7
    examples(
        d,
        ex,
        {"s": 5, "skv": 5, "h": 4, "kvh": 2, "hd": 8},
        {"s": 3, "skv": 3 if same_seq else 6, "h": 2, "kvh": 2, "hd": 4},
        {"s": 5, "skv": skv2, "h": 3, "kvh": 1, "hd": 16},
        {"s": 4, "skv": 4 if same_seq else 3, "h": 4, "kvh": 2, "hd": 4, "batch": 3},
    )


def _declare(name: str, causal: bool, same_seq: bool) -> None:
    extra = (optional(bool_attr("is_cross"), False),) if name == "multi_head_attn" else ()
    d = op(name, ("q", "k", "v"), attrs=(*HEADS, BATCH, *extra))

    d.shape(_attention_shape(name, same_seq))

    def _is_causal(attrs) -> bool:
        return causal and not attrs.get("is_cross", False)

    @d.numpy
    def _(q, k, v, num_heads, num_kv_heads, head_dim, **attrs):
        b = attrs.get("batch", 1)  # rows = b blocks, each its own sequence
        qs, ks, vs = np.split(q, b), np.split(k, b), np.split(v, b)
        pos = np.arange(q.shape[0] // b) if _is_causal(attrs) else None
        return np.concatenate([attention_ref(*blk, num_heads, num_kv_heads, head_dim, pos) for blk in zip(qs, ks, vs, strict=True)])

    @d.onnx
    def _(ctx, node, q, k, v):
        a = node.attrs
        if a.get("batch", 1) != 1:
            return _batched_attention(ctx, node, q, k, v, _is_causal(a))
        mask = None
        if _is_causal(a):
            seq = ctx.scalar(ctx.input_types(node)[0].shape[0])
            mask = (arange(ctx, seq), arange(ctx, seq))
        return attend(ctx, q, k, v, a["head_dim"], a["num_heads"] // a["num_kv_heads"], mask)

    _attention_examples(d, name, same_seq)

    @d.vjp
    def _(g, node, dy):
        q, k, v = node.inputs
        a = node.attrs
        packed = g.apply(
            "attention_backward",
            q,
            k,
            v,
            dy,
            num_heads=a["num_heads"],
            num_kv_heads=a["num_kv_heads"],
            head_dim=a["head_dim"],
            causal=_is_causal(a),
            batch=a.get("batch", 1),
        )
        types = [g.node(i).ty for i in (q, k, v)]
        starts = [0, types[0].elements(), dim_add(types[0].elements(), types[1].elements())]  # symbolic with the rows
        return [g.apply("take", packed, start=st, shape=t.shape) for st, t in zip(starts, types, strict=True)]


_declare("causal_attention", causal=True, same_seq=True)
_declare("full_attention", causal=False, same_seq=True)
_declare("cross_attention", causal=False, same_seq=False)
_declare("multi_head_attn", causal=True, same_seq=False)


# -- backward (no VJP of its own: second-order gradients through attention stop here) --------------
attention_backward = op("attention_backward", ("q", "k", "v", "dy"), differentiable=False, attrs=(*HEADS, bool_attr("causal"), BATCH))
take = op("take", ("x",), differentiable=False, attrs=(dim_attr("start", 0), shape_attr("shape", symbolic=True)))


@attention_backward.shape
def _(
    q: TensorType,
    k: TensorType,
    v: TensorType,
    dy: TensorType,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    causal: bool,
    batch: int = 1,
) -> TensorType:
    check_heads("attention_backward", num_heads, num_kv_heads, head_dim)
    require(
        dim_div(q.shape[0], batch) is not None and dim_div(k.shape[0], batch) is not None,
        "attention_backward",
        f"batch={batch} must divide the rows of q and k",
    )
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
    return TensorType((dim_add(q.elements(), dim_mul(2, k.elements())),))


@attention_backward.numpy
def _(q, k, v, dy, *, num_heads, num_kv_heads, head_dim, causal, batch=1):
    parts = [
        _attention_backward_ref(*blk, num_heads, num_kv_heads, head_dim, causal)
        for blk in zip(*(np.split(t, batch) for t in (q, k, v, dy)), strict=True)
    ]
    return np.concatenate([np.concatenate([p[i] for p in parts]) for i in range(3)]).astype(q.dtype)


def _attention_backward_ref(q, k, v, dy, num_heads, num_kv_heads, head_dim, causal):
    """(dq, dk, dv) of one sequence, each flat row-major."""
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
    return [x.transpose(1, 0, 2).reshape(-1) for x in (dq, dk, dv)]


class _Heads:
    """ONNX helpers for [B*rows, n*hd] <-> [B, n, rows, hd] with GQA expansion (B sequences)."""

    def __init__(self, ctx, batch: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        self.ctx, self.B, self.H, self.KVH, self.hd = ctx, batch, num_heads, num_kv_heads, head_dim
        self.rep = num_heads // num_kv_heads

    def split(self, x, n, rows):  # -> [B, n, rows, hd]
        return self.ctx.op("Transpose", self.ctx.reshape(x, [self.B, rows, n, self.hd]), perm=[0, 2, 1, 3])

    def expand(self, xh, rows):  # GQA: KV head j serves query heads j*rep .. j*rep + rep - 1
        if self.rep == 1:
            return xh
        c, shape = self.ctx, [self.B, self.KVH, self.rep, rows, self.hd]
        return c.reshape(
            c.op("Expand", c.reshape(xh, [self.B, self.KVH, 1, rows, self.hd]), c.shape_tensor(shape)), [self.B, self.H, rows, self.hd]
        )

    def group_sum(self, xh, rows):
        if self.rep == 1:
            return xh
        return self.ctx.op("ReduceSum", self.ctx.reshape(xh, [self.B, self.KVH, self.rep, rows, self.hd]), self.ctx.ints([2]), keepdims=0)

    def merge(self, xh, width: int):  # [B, n, rows, hd] -> [B*rows, width]
        return self.ctx.reshape(self.ctx.op("Transpose", xh, perm=[0, 2, 1, 3]), [-1, width])

    def t(self, x):
        return self.ctx.op("Transpose", x, perm=[0, 1, 3, 2])

    def probs(self, qh, kh, T: int, S: int, causal: bool):
        c = self.ctx
        scores = c.op("Mul", c.op("MatMul", qh, self.t(kh)), c.const(1.0 / np.sqrt(self.hd)))
        if causal:
            kpos, qpos = arange(c, c.scalar(S)), arange(c, c.scalar(T))
            hidden = c.op("Greater", c.op("Unsqueeze", kpos, c.ints([0])), c.op("Unsqueeze", qpos, c.ints([1])))
            scores = c.op("Where", hidden, c.const(NEG_INF), scores)
        return c.op("Softmax", scores, axis=-1)


def _batched_attention(ctx, node, q, k, v, causal: bool) -> str:
    a = node.attrs
    B = a["batch"]
    T, S = dim_div(ctx.input_types(node)[0].shape[0], B), dim_div(ctx.input_types(node)[1].shape[0], B)
    h = _Heads(ctx, B, a["num_heads"], a["num_kv_heads"], a["head_dim"])
    p = h.probs(h.split(q, h.H, T), h.expand(h.split(k, h.KVH, S), S), T, S, causal)
    return h.merge(ctx.op("MatMul", p, h.expand(h.split(v, h.KVH, S), S)), h.H * h.hd)


@attention_backward.onnx
def _(ctx, node, q, k, v, dy):
    a = node.attrs
    B = a.get("batch", 1)
    T, S = dim_div(ctx.input_types(node)[0].shape[0], B), dim_div(ctx.input_types(node)[1].shape[0], B)
    h = _Heads(ctx, B, a["num_heads"], a["num_kv_heads"], a["head_dim"])
    qh, doh = h.split(q, h.H, T), h.split(dy, h.H, T)
    kh, vh = h.expand(h.split(k, h.KVH, S), S), h.expand(h.split(v, h.KVH, S), S)
    p = h.probs(qh, kh, T, S, a["causal"])
    dp = ctx.op("MatMul", doh, h.t(vh))
    ds = ctx.op("Mul", p, ctx.op("Sub", dp, ctx.op("ReduceSum", ctx.op("Mul", dp, p), ctx.ints([-1]), keepdims=1)))
    scale = ctx.const(1.0 / np.sqrt(h.hd))
    dq = ctx.op("Mul", ctx.op("MatMul", ds, kh), scale)
    dk = h.group_sum(ctx.op("Mul", ctx.op("MatMul", h.t(ds), qh), scale), S)
    dv = h.group_sum(ctx.op("MatMul", h.t(p), doh), S)
    flat = [ctx.reshape(h.merge(x, n * h.hd), [-1]) for x, n in ((dq, h.H), (dk, h.KVH), (dv, h.KVH))]
    return ctx.op("Concat", *flat, axis=0)


def _ex_bwd(g, f, s, skv, h, kvh, hd, causal, batch=1):
    q, dy = f.param(g, "q", [batch * s, h * hd]), f.param(g, "dy", [batch * s, h * hd])
    k, v = f.param(g, "k", [batch * skv, kvh * hd]), f.param(g, "v", [batch * skv, kvh * hd])
    return g.apply("attention_backward", q, k, v, dy, num_heads=h, num_kv_heads=kvh, head_dim=hd, causal=causal, batch=batch)


examples(
    attention_backward,
    _ex_bwd,
    {"s": 4, "skv": 4, "h": 4, "kvh": 2, "hd": 4, "causal": True},
    {"s": 3, "skv": 5, "h": 2, "kvh": 1, "hd": 8, "causal": False},
    {"s": 3, "skv": 3, "h": 2, "kvh": 1, "hd": 4, "causal": True, "batch": 2},
)


@take.shape
def _(x: TensorType, *, start: Dim, shape: tuple[Dim, ...]) -> TensorType:
    out = TensorType(tuple(shape))
    end = dim_add(start, out.elements())
    if isinstance(start, int) and isinstance(end, int) and isinstance(x.elements(), int):
        fits = 0 <= start and end <= x.num_elements()
    else:  # symbolic offsets (the packed gradients of attention over symbolic rows): the slice is checked at run time
        fits = isinstance(start, (int, str)) and not isinstance(start, bool)
    require(fits, "take", f"elements [{start}, {end}) do not fit in x {list(x.shape)}")
    return out


take.numpy(lambda x, *, start, shape: x.reshape(-1)[start : start + int(np.prod(shape))].reshape(shape))


@take.onnx
def _(ctx, node, x):
    start, shape = node.attrs["start"], list(node.ty.shape)
    end = dim_add(start, node.ty.elements())
    flat = ctx.reshape(x, [-1])
    return ctx.reshape(ctx.op("Slice", flat, ctx.size(start), ctx.size(end), ctx.ints([0])), shape)


examples(
    take,
    lambda g, f, n, start, shape: g.apply("take", f.param(g, "x", [n]), start=start, shape=shape),
    {"n": 20, "start": 3, "shape": (2, 5)},
    {"n": 6, "start": 0, "shape": (6,)},
)


# -- masked_full_attention: padded batches of an encoder (BERT) ----------------------------------------
masked_full_attention = op(
    "masked_full_attention", ("q", "k", "v", "attention_mask"), u32=("attention_mask",), differentiable=False, attrs=HEADS
)
MASKED = float(np.finfo(np.float32).min)
"""Score of a padding key: the lowest finite float32, so a row with every key hidden stays finite."""


@masked_full_attention.shape
def _(q: TensorType, k: TensorType, v: TensorType, mask: TensorType, *, num_heads: int, num_kv_heads: int, head_dim: int) -> TensorType:
    name = "masked_full_attention"
    check_heads(name, num_heads, num_kv_heads, head_dim)
    for arg, t in (("q", q), ("k", k), ("v", v), ("attention_mask", mask)):
        rank(name, t, 2, arg)
    require(q.shape[1] == num_heads * head_dim, name, f"q must be [rows, {num_heads}*{head_dim}], got {list(q.shape)}")
    kv = num_kv_heads * head_dim
    require(
        q.shape[0] == k.shape[0] and k.shape == v.shape and k.shape[1] == kv,
        name,
        f"k and v must both be [{q.shape[0]}, {num_kv_heads}*{head_dim}] (the rows of q), got k {list(k.shape)} and v {list(v.shape)}",
    )
    require(
        dim_mul(mask.shape[0], mask.shape[1]) == q.shape[0],
        name,
        f"attention_mask [batch, seq] must give one entry per row of q {list(q.shape)}, got {list(mask.shape)}",
    )
    return q


@masked_full_attention.numpy
def _(q, k, v, mask, *, num_heads, num_kv_heads, head_dim):
    outs = []
    for b, (qs, ks, vs) in enumerate(zip(*(np.split(t, mask.shape[0]) for t in (q, k, v)), strict=True)):
        rep = num_heads // num_kv_heads
        qh = qs.reshape(-1, num_heads, head_dim).transpose(1, 0, 2)
        kh = np.repeat(ks.reshape(-1, num_kv_heads, head_dim).transpose(1, 0, 2), rep, axis=0)
        vh = np.repeat(vs.reshape(-1, num_kv_heads, head_dim).transpose(1, 0, 2), rep, axis=0)
        scores = np.where(mask[b][None, None, :] != 0, qh @ kh.transpose(0, 2, 1) / np.sqrt(head_dim).astype(q.dtype), MASKED)
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        outs.append((p @ vh).transpose(1, 0, 2).reshape(qs.shape[0], -1))
    return np.concatenate(outs).astype(q.dtype)


@masked_full_attention.onnx
def _(ctx, node, q, k, v, mask):
    a = node.attrs
    H, KVH, hd = a["num_heads"], a["num_kv_heads"], a["head_dim"]
    batch = ctx.op("Shape", mask, start=0, end=1)  # sizes at run time: batch and seq may be symbolic

    def split(x: str, n: int) -> str:  # [B*S, n*hd] -> [B, n, S, hd]; GQA: query head i reads KV head i // rep
        xh = ctx.op("Transpose", ctx.op("Reshape", x, ctx.op("Concat", batch, ctx.ints([-1, n, hd]), axis=0)), perm=[0, 2, 1, 3])
        if n == H:
            return xh
        expanded = ctx.op("Expand", ctx.op("Unsqueeze", xh, ctx.ints([2])), ctx.ints([1, 1, H // n, 1, 1]))
        return ctx.op("Reshape", expanded, ctx.ints([0, H, -1, hd]))

    scores = ctx.op(
        "Mul", ctx.op("MatMul", split(q, H), ctx.op("Transpose", split(k, KVH), perm=[0, 1, 3, 2])), ctx.const(1.0 / np.sqrt(hd))
    )
    padding = ctx.op("Equal", ctx.op("Unsqueeze", ctx.to_int64(mask), ctx.ints([1, 2])), ctx.const(0, np.int64))  # [B, 1, 1, S]
    probs = ctx.op("Softmax", ctx.op("Where", padding, ctx.const(MASKED), scores), axis=-1)
    out = ctx.op("Transpose", ctx.op("MatMul", probs, split(v, KVH)), perm=[0, 2, 1, 3])  # [B, S, H, hd]
    return ctx.op("Reshape", out, ctx.ints([-1, H * hd]))


def _ex_masked(g, f, batch, seq, h, kvh, hd, lengths):
    rows = dim_mul(batch, seq)
    q, k, v = (g.reshape(f.param(g, n, [batch, seq, w]), [rows, w]) for n, w in (("q", h * hd), ("k", kvh * hd), ("v", kvh * hd)))
    size = f.sizes[seq] if isinstance(seq, str) else seq
    f.inputs["attention_mask"] = (np.arange(size)[None, :] < np.minimum(lengths, size)[:, None]).astype(np.uint32)  # right padding
    return g.masked_full_attention(q, k, v, g.input_u32("attention_mask", [batch, seq]), h, kvh, hd)


examples(
    masked_full_attention,
    _ex_masked,
    {"batch": 2, "seq": 4, "h": 4, "kvh": 2, "hd": 4, "lengths": [4, 2]},
    {"batch": 3, "seq": 3, "h": 2, "kvh": 2, "hd": 8, "lengths": [1, 3, 2]},
)


class AttentionBuilders:
    def _self_attention(self, name: str, q, k, v, heads: tuple[int, int, int], batch: Dim, fused: bool, causal: bool) -> NodeId:
        h, kvh, hd = heads
        if fused:  # one kernel forward, one backward (flash_attention), same function
            return self.apply("flash_attention", q, k, v, num_heads=h, num_kv_heads=kvh, head_dim=hd, causal=causal, batch=batch)
        extra = {} if batch == 1 else {"batch": batch}  # graphs without batches keep their attributes
        return self.apply(name, q, k, v, num_heads=h, num_kv_heads=kvh, head_dim=hd, **extra)

    def causal_attention(
        self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int, batch: Dim = 1, fused: bool = False
    ) -> NodeId:
        """Causal multi-head attention with GQA: q ``[S, H*hd]``, k/v ``[S, KVH*hd]`` -> ``[S, H*hd]``.

        ``batch``: the rows hold this many sequences of ``S / batch`` rows each, attended separately
        (an int or a symbolic dim). ``fused``: build it as :meth:`flash_attention` (one fused kernel
        forward and backward, which keeps the log-sum-exp instead of the probabilities; for training)."""
        return self._self_attention("causal_attention", q, k, v, (num_heads, num_kv_heads, head_dim), batch, fused, True)

    def full_attention(
        self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int, batch: Dim = 1, fused: bool = False
    ) -> NodeId:
        """Bidirectional (unmasked) self-attention; same shapes and arguments as :meth:`causal_attention`."""
        return self._self_attention("full_attention", q, k, v, (num_heads, num_kv_heads, head_dim), batch, fused, False)

    def cross_attention(
        self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int, batch: Dim = 1, fused: bool = False
    ) -> NodeId:
        """Unmasked attention of q ``[Sq, H*hd]`` over k/v ``[Skv, KVH*hd]`` from another sequence;
        ``batch`` and ``fused`` as in :meth:`causal_attention` (q and k/v rows hold ``batch`` blocks each)."""
        return self._self_attention("cross_attention", q, k, v, (num_heads, num_kv_heads, head_dim), batch, fused, False)

    def multi_head_attn(
        self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int, is_cross: bool, batch: Dim = 1
    ) -> NodeId:
        """Meganeura's differentiable attention: causal self-attention when ``is_cross`` is False
        (q and k/v of the same length), unmasked cross-attention when True; ``batch`` as in
        :meth:`causal_attention`."""
        extra = {} if batch == 1 else {"batch": batch}
        return self.apply(
            "multi_head_attn", q, k, v, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, is_cross=is_cross, **extra
        )

    def masked_full_attention(
        self, q: NodeId, k: NodeId, v: NodeId, attention_mask: NodeId, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> NodeId:
        """Bidirectional attention within each of ``batch`` padded sequences: q ``[batch * seq, H*hd]``,
        k/v ``[batch * seq, KVH*hd]``; key j of sequence b is hidden where ``attention_mask[b, j]`` is 0
        (U32 ``[batch, seq]``, as a tokenizer's padding mask)."""
        return self.apply(
            "masked_full_attention", q, k, v, attention_mask, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim
        )
