"""Fused attention for training: ``com.meganeura.FlashAttention`` and ``FlashAttentionGrad``.

The forward kernel walks the keys in tiles with an online softmax (never an S x S matrix) and keeps
each query row's log-sum-exp of the scaled scores; the backward kernel recomputes the probabilities
from q, k and that log-sum-exp (``p = exp(q.k / sqrt(hd) - lse)``), flash-attention style, and
returns dq, dk, dv. Causal or not, GQA (query head h reads KV head ``h // (num_heads /
num_kv_heads)``), ``batch`` sequences stacked in the rows (``q [batch * T, H*hd]``).

The Graph IR has one output per node, so as with ``adam_update`` one ONNX node serves several IR
nodes that differ only in ``part``: ``flash_attention`` part 0 is the output, part 1 the
log-sum-exp (``[batch * H * T]``, laid out ``[batch, H, T]``; the VJP creates it, so a forward-only
graph never computes more than the output); ``flash_attention_backward`` parts 0, 1, 2 are dq, dk,
dv. Without our kernel library the nodes run their model-local function bodies (MatMul, Softmax
pieces), which compute the same functions.

The ONNX ops see 3-D tensors ``Q [B, T, H*hd]``, ``K/V [B, S, KVH*hd]``, ``LSE [B, H, T]``: the
sequence boundaries come from the shapes, so a symbolic batch needs no attribute.

Both kernels take float16 and bfloat16 for every tensor but the log-sum-exp, which stays float32
(``half_types``; the precision pass keeps them in half): the arithmetic is float32 (on CUDA, half
operands feed tensor-core MMAs that accumulate in float32) and each output is rounded once.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import Dim, NodeId, TensorType, dim_div, dim_mul
from .attention import BATCH, attention_ref, check_heads
from .lowering import CUSTOM_DOMAIN, function_body
from .onnx_util import NEG_INF, arange, dims
from .table import CustomOp, TensorArg, bool_attr, examples, int_attr, op, optional, rank, require

MAX_HEAD_DIM = 256
"""Largest head_dim the kernels take (the CUDA kernels keep one row of a head in registers)."""
HEADS = (int_attr("num_heads", 1, 1 << 20), int_attr("num_kv_heads", 1, 1 << 20), int_attr("head_dim", 1, MAX_HEAD_DIM))
ONNX_ATTRS = (*HEADS, int_attr("causal", 0, 1, doc="1: key j is hidden from query i where j > i"))
RELATIONS = ("num_heads % num_kv_heads == 0",)

flash_attention = op(
    "flash_attention",
    ("q", "k", "v"),
    attrs=(*HEADS, BATCH, bool_attr("causal"), optional(int_attr("part", 0, 1, doc="0: the output, 1: the log-sum-exp"), 0)),
    custom=CustomOp(
        "FlashAttention",
        (TensorArg("Q"), TensorArg("K"), TensorArg("V")),
        (TensorArg("Y"), TensorArg("LSE", "float32")),
        ONNX_ATTRS,
        relations=RELATIONS,
    ),
    half_types=frozenset({"float16", "bfloat16"}),
)
flash_attention_backward = op(
    "flash_attention_backward",
    ("q", "k", "v", "out", "dy", "lse"),
    differentiable=False,  # second-order gradients through attention stop here
    attrs=(*HEADS, BATCH, bool_attr("causal"), int_attr("part", 0, 2, doc="0: dq, 1: dk, 2: dv")),
    custom=CustomOp(
        "FlashAttentionGrad",
        (*(TensorArg(n) for n in ("Q", "K", "V", "Y", "dY")), TensorArg("LSE", "float32")),
        (TensorArg("dQ"), TensorArg("dK"), TensorArg("dV")),
        ONNX_ATTRS,
        relations=RELATIONS,
    ),
    half_types=frozenset({"float16", "bfloat16"}),
)


def check_qkv(name: str, q: TensorType, k: TensorType, v: TensorType, a: dict) -> None:
    """The shape relations between q, k, v and the attributes (rows hold ``batch`` sequences)."""
    H, KVH, hd, batch = a["num_heads"], a["num_kv_heads"], a["head_dim"], a.get("batch", 1)
    check_heads(name, H, KVH, hd)
    for arg, t in (("q", q), ("k", k), ("v", v)):
        rank(name, t, 2, arg)
    require(q.shape[1] == H * hd, name, f"q must be [rows, {H}*{hd}], got {list(q.shape)}")
    require(
        k.shape[1] == KVH * hd and v.shape == k.shape,
        name,
        f"k and v must both be [kv_rows, {KVH}*{hd}], got k {list(k.shape)} and v {list(v.shape)}",
    )
    require(
        dim_div(q.shape[0], batch) is not None and dim_div(k.shape[0], batch) is not None,
        name,
        f"batch={batch} must divide the rows of q {list(q.shape)} and k {list(k.shape)}",
    )
    require(
        not a["causal"] or q.shape[0] == k.shape[0],
        name,
        f"causal attention needs q and k with the same rows, got q {list(q.shape)} and k {list(k.shape)}",
    )


def lse_type(q: TensorType, num_heads: int) -> TensorType:
    return TensorType((dim_mul(q.shape[0], num_heads),))


@flash_attention.shape
def _(q: TensorType, k: TensorType, v: TensorType, **a) -> TensorType:
    check_qkv("flash_attention", q, k, v, a)
    return q if a.get("part", 0) == 0 else lse_type(q, a["num_heads"])


def flash_reference(q, k, v, num_heads, num_kv_heads, head_dim, causal, batch=1):
    """Numpy (output, log-sum-exp ``[batch, H, T]``) of ``batch`` stacked sequences."""
    outs, lses = [], []
    for qs, ks, vs in zip(*(np.split(t, batch) for t in (q, k, v)), strict=True):
        T, S = qs.shape[0], ks.shape[0]
        pos = np.arange(T) if causal else None
        outs.append(attention_ref(qs, ks, vs, num_heads, num_kv_heads, head_dim, pos))
        qh = qs.astype(np.float64).reshape(T, num_heads, head_dim).transpose(1, 0, 2)
        kh = np.repeat(ks.astype(np.float64).reshape(S, num_kv_heads, head_dim).transpose(1, 0, 2), num_heads // num_kv_heads, axis=0)
        scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(head_dim)
        if causal:
            scores = np.where((np.arange(S)[None, :] > np.arange(T)[:, None])[None], -np.inf, scores)
        m = scores.max(axis=-1)
        lses.append(m + np.log(np.exp(scores - m[..., None]).sum(axis=-1)))
    return np.concatenate(outs), np.stack(lses).astype(q.dtype)


@flash_attention.numpy
def _(q, k, v, *, num_heads, num_kv_heads, head_dim, causal, batch=1, part=0):
    out, lse = flash_reference(q, k, v, num_heads, num_kv_heads, head_dim, causal, batch)
    return out if part == 0 else lse.reshape(-1)


@flash_attention_backward.shape
def _(q: TensorType, k: TensorType, v: TensorType, out: TensorType, dy: TensorType, lse: TensorType, **a) -> TensorType:
    name = "flash_attention_backward"
    check_qkv(name, q, k, v, a)
    require(
        out.shape == q.shape and dy.shape == q.shape,
        name,
        f"out and dy must be {list(q.shape)} (q), got {list(out.shape)} and {list(dy.shape)}",
    )
    want = lse_type(q, a["num_heads"])
    require(lse.shape == want.shape, name, f"lse must be {list(want.shape)} (rows of q * num_heads), got {list(lse.shape)}")
    return (q, k, v)[a["part"]]


def flash_backward_reference(q, k, v, out, dy, lse, num_heads, num_kv_heads, head_dim, causal, batch=1):
    """Numpy (dq, dk, dv) from the backward op's own inputs: ``p = exp(s - lse)``, ``D = dy . out``
    per row (with the forward's out and lse this is the gradient of attention)."""
    B, rep = batch, num_heads // num_kv_heads
    T, S = q.shape[0] // B, k.shape[0] // B

    def heads(x, n, rows):  # [B*rows, n*hd] -> [B, n, rows, hd], float64
        return x.astype(np.float64).reshape(B, rows, n, head_dim).transpose(0, 2, 1, 3)

    qh, doh, oh = heads(q, num_heads, T), heads(dy, num_heads, T), heads(out, num_heads, T)
    kh, vh = (np.repeat(heads(x, num_kv_heads, S), rep, axis=1) for x in (k, v))
    scale = 1.0 / np.sqrt(head_dim)
    s = qh @ kh.transpose(0, 1, 3, 2) * scale
    if causal:
        s = np.where(np.arange(S)[None, :] > np.arange(T)[:, None], -np.inf, s)
    p = np.exp(s - lse.astype(np.float64).reshape(B, num_heads, T, 1))
    ds = p * (doh @ vh.transpose(0, 1, 3, 2) - (doh * oh).sum(axis=-1, keepdims=True))
    dq = ds @ kh * scale
    dk = (ds.transpose(0, 1, 3, 2) @ qh * scale).reshape(B, num_kv_heads, rep, S, head_dim).sum(axis=2)
    dv = (p.transpose(0, 1, 3, 2) @ doh).reshape(B, num_kv_heads, rep, S, head_dim).sum(axis=2)
    return [x.transpose(0, 2, 1, 3).reshape(B * x.shape[2], -1).astype(q.dtype) for x in (dq, dk, dv)]


@flash_attention_backward.numpy
def _(q, k, v, out, dy, lse, *, num_heads, num_kv_heads, head_dim, causal, part, batch=1):
    return flash_backward_reference(q, k, v, out, dy, lse, num_heads, num_kv_heads, head_dim, causal, batch)[part]


# -- function bodies (standard ONNX; what runs without the kernel library) ----------------------------
class _BodyHeads:
    """[B, T, n*hd] <-> [B, n, T, hd] inside a function body; head counts are attribute references."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.H, self.KVH, self.hd = (ctx.attr_ref(n, "int") for n in ("num_heads", "num_kv_heads", "head_dim"))
        self.rep = ctx.op("Div", self.H, self.KVH)
        self.scale = ctx.op("Reciprocal", ctx.op("Sqrt", ctx.cast(self.hd, TensorProto.FLOAT)))

    def split(self, x: str, n: str) -> str:
        return self.ctx.op("Transpose", self.ctx.op("Reshape", x, dims(self.ctx, 0, 0, n, self.hd)), perm=[0, 2, 1, 3])

    def expand(self, xh: str) -> str:  # [B, KVH, S, hd] -> [B, H, S, hd]: KV head j serves query heads j*rep ...
        c = self.ctx
        x5 = c.op("Expand", c.op("Unsqueeze", xh, c.ints([2])), dims(c, 1, 1, self.rep, 1, 1))
        return c.op("Reshape", x5, dims(c, 0, self.H, -1, self.hd))

    def group_sum(self, xh: str) -> str:  # [B, H, S, hd] -> [B, KVH, S, hd]: the sum over each KV head's queries
        c = self.ctx
        return c.op("ReduceSum", c.op("Reshape", xh, dims(c, 0, self.KVH, self.rep, -1, self.hd)), c.ints([2]), keepdims=0)

    def merge(self, xh: str) -> str:
        return self.ctx.op("Reshape", self.ctx.op("Transpose", xh, perm=[0, 2, 1, 3]), self.ctx.ints([0, 0, -1]))

    def scores(self, qh: str, kh: str, q: str, k: str) -> str:
        """Scaled scores ``[B, H, T, S]``; with the ``causal`` attribute, key j > query i is -inf."""
        c = self.ctx
        s = c.op("Mul", c.op("MatMul", qh, c.op("Transpose", kh, perm=[0, 1, 3, 2])), self.scale)
        T = c.op("Squeeze", c.op("Shape", q, start=1, end=2), c.ints([0]))
        S = c.op("Squeeze", c.op("Shape", k, start=1, end=2), c.ints([0]))
        later = c.op("Greater", c.op("Unsqueeze", arange(c, S), c.ints([0])), c.op("Unsqueeze", arange(c, T), c.ints([1])))
        hidden = c.op("And", later, c.cast(c.attr_ref("causal", "int"), TensorProto.BOOL))
        return c.op("Where", hidden, c.const(NEG_INF), s)


@flash_attention.function_body
def flash_attention_function(opset: int):
    def body(ctx, q, k, v):
        h = _BodyHeads(ctx)
        s = h.scores(h.split(q, h.H), h.expand(h.split(k, h.KVH)), q, k)
        # ReduceLogSumExp subtracts the row max inside ORT's kernel (every row sees a key, so it is
        # finite); unlike ReduceMax it has a gradient in onnxruntime-training's builder too.
        lse = ctx.op("ReduceLogSumExp", s, ctx.ints([-1]), keepdims=1)
        y = ctx.op("MatMul", ctx.op("Exp", ctx.op("Sub", s, lse)), h.expand(h.split(v, h.KVH)))
        return [h.merge(y), ctx.op("Squeeze", lse, ctx.ints([3]))]

    return function_body(flash_attention.custom, body, opset)


@flash_attention_backward.function_body
def flash_attention_grad_function(opset: int):
    def body(ctx, q, k, v, y, dy, lse):
        h = _BodyHeads(ctx)
        qh, doh, oh = h.split(q, h.H), h.split(dy, h.H), h.split(y, h.H)
        kh, vh = h.expand(h.split(k, h.KVH)), h.expand(h.split(v, h.KVH))
        p = ctx.op("Exp", ctx.op("Sub", h.scores(qh, kh, q, k), ctx.op("Unsqueeze", lse, ctx.ints([3]))))
        dp = ctx.op("MatMul", doh, ctx.op("Transpose", vh, perm=[0, 1, 3, 2]))
        row_dot = ctx.op("ReduceSum", ctx.op("Mul", doh, oh), ctx.ints([-1]), keepdims=1)  # sum_j p_ij dp_ij = dO_i . O_i
        ds = ctx.op("Mul", p, ctx.op("Sub", dp, row_dot))
        dq = ctx.op("Mul", ctx.op("MatMul", ds, kh), h.scale)
        dk = h.group_sum(ctx.op("Mul", ctx.op("MatMul", ctx.op("Transpose", ds, perm=[0, 1, 3, 2]), qh), h.scale))
        dv = h.group_sum(ctx.op("MatMul", ctx.op("Transpose", p, perm=[0, 1, 3, 2]), doh))
        return [h.merge(dq), h.merge(dk), h.merge(dv)]

    return function_body(flash_attention_backward.custom, body, opset)


# -- lowering: one ONNX node per (inputs, attributes), shared by the nodes of its parts --------------
def _onnx_attrs(a: dict) -> dict:
    return {"num_heads": a["num_heads"], "num_kv_heads": a["num_kv_heads"], "head_dim": a["head_dim"], "causal": int(a["causal"])}


def _seq3(ctx, x: str, t: TensorType, batch: Dim) -> str:
    """``[batch * T, W]`` -> ``[batch, T, W]``."""
    return ctx.reshape(x, [batch, dim_div(t.shape[0], batch), t.shape[1]])


def _lse_shape(a: dict, tq: TensorType, batch: Dim) -> list[Dim]:
    return [batch, a["num_heads"], dim_div(tq.shape[0], batch)]


@flash_attention.onnx
def _(ctx, node, q, k, v):
    a, batch = node.attrs, node.attrs.get("batch", 1)

    def emit():
        ctx.use_function(flash_attention_function(ctx.opset))
        tq, tk, tv = ctx.input_types(node)
        q3, k3, v3 = _seq3(ctx, q, tq, batch), _seq3(ctx, k, tk, batch), _seq3(ctx, v, tv, batch)
        y, lse = ctx.op("FlashAttention", q3, k3, v3, domain=CUSTOM_DOMAIN, outputs=2, **_onnx_attrs(a))
        # the backward's reshapes of Y and LSE back to these shapes fold onto them (LoweringContext.reshape)
        ctx.note_shape(y, ctx.static_shapes.get(q3))
        ctx.note_shape(lse, _lse_shape(a, tq, batch))
        return [y, lse]

    y, lse = ctx.shared_node(("FlashAttention", q, k, v, tuple(_onnx_attrs(a).items()), batch), emit)
    return ctx.reshape(y, list(node.ty.shape)) if a.get("part", 0) == 0 else ctx.reshape(lse, [-1])


@flash_attention_backward.onnx
def _(ctx, node, q, k, v, out, dy, lse):
    a, batch = node.attrs, node.attrs.get("batch", 1)

    def emit():
        ctx.use_function(flash_attention_grad_function(ctx.opset))
        tq, tk, tv, to, tdy, _ = ctx.input_types(node)
        seq = [_seq3(ctx, x, t, batch) for x, t in ((q, tq), (k, tk), (v, tv), (out, to), (dy, tdy))]
        lse3 = ctx.reshape(lse, _lse_shape(a, tq, batch))
        grads = ctx.op("FlashAttentionGrad", *seq, lse3, domain=CUSTOM_DOMAIN, outputs=3, **_onnx_attrs(a))
        for grad, x3 in zip(grads, seq, strict=False):  # dq, dk, dv have the shapes of q, k, v
            ctx.note_shape(grad, ctx.static_shapes.get(x3))
        return grads

    key = ("FlashAttentionGrad", q, k, v, out, dy, lse, tuple(_onnx_attrs(a).items()), batch)
    return ctx.reshape(ctx.shared_node(key, emit)[a["part"]], list(node.ty.shape))


@flash_attention.vjp
def _(g, node, dy):
    a = dict(node.attrs)
    if a.pop("part", 0) != 0:
        raise ValueError("flash_attention: the log-sum-exp output (part=1) has no gradient; differentiate the output (part=0)")
    q, k, v = node.inputs
    lse = g.apply("flash_attention", q, k, v, **a, part=1)  # the same ONNX node as the forward: no recompute
    return [g.apply("flash_attention_backward", q, k, v, node.id, dy, lse, **a, part=p) for p in range(3)]


def _ex(g, f, s, skv, h, kvh, hd, causal, batch=1):
    rows, kv_rows = dim_mul(batch, s), dim_mul(batch, skv)  # s may be symbolic ("n")
    q = f.param(g, "q", [rows, h * hd])
    k, v = f.param(g, "k", [kv_rows, kvh * hd]), f.param(g, "v", [kv_rows, kvh * hd])
    return g.flash_attention(q, k, v, h, kvh, hd, causal=causal, batch=batch)


examples(
    flash_attention,
    _ex,
    {"s": 5, "skv": 5, "h": 4, "kvh": 2, "hd": 8, "causal": True},
    {"s": 3, "skv": 6, "h": 2, "kvh": 2, "hd": 4, "causal": False},
    {"s": 4, "skv": 4, "h": 3, "kvh": 1, "hd": 8, "causal": True, "batch": 3},
)  # the log-sum-exp (part 1, not differentiable) is checked against numpy in tests/test_flash_attention.py


def _ex_bwd(g, f, s, skv, h, kvh, hd, causal, part, batch=1):
    # out and lse fed as data: the op is a function of its six inputs (the gradient tests chain it
    # after the forward).
    rows, kv_rows = dim_mul(batch, s), dim_mul(batch, skv)  # s may be symbolic ("n")
    q, dy, out = (f.param(g, n, [rows, h * hd]) for n in ("q", "dy", "out"))
    k, v = f.param(g, "k", [kv_rows, kvh * hd]), f.param(g, "v", [kv_rows, kvh * hd])
    lse = g.reshape(f.param(g, "lse", [rows, h], 0.5, 2.0), [dim_mul(rows, h)])  # random data: any layout
    a = {"num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "causal": causal, "batch": batch}
    return g.apply("flash_attention_backward", q, k, v, out, dy, lse, **a, part=part)


examples(
    flash_attention_backward,
    _ex_bwd,
    {"s": 4, "skv": 4, "h": 4, "kvh": 2, "hd": 4, "causal": True, "part": 0},
    {"s": 3, "skv": 5, "h": 2, "kvh": 1, "hd": 8, "causal": False, "part": 1},
    {"s": 3, "skv": 3, "h": 2, "kvh": 1, "hd": 4, "causal": True, "batch": 2, "part": 2},
)


class FlashAttentionBuilders:
    def flash_attention(
        self, q: NodeId, k: NodeId, v: NodeId, num_heads: int, num_kv_heads: int, head_dim: int, *, causal: bool = True, batch: Dim = 1
    ) -> NodeId:
        """Fused multi-head attention with GQA over ``batch`` sequences stacked in the rows: q
        ``[batch * T, H*hd]``, k/v ``[batch * S, KVH*hd]`` -> ``[batch * T, H*hd]`` (``batch`` an int
        or a symbolic dim; causal needs S == T). Its gradient runs one fused backward kernel that
        recomputes the probabilities from the forward's log-sum-exp."""
        return self.apply(
            "flash_attention", q, k, v, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, causal=causal, batch=batch
        )
