"""Decoder ops in the layout of the ONNX ecosystem's LLM files (Hugging Face Optimum, onnxruntime-genai).

There, a step of a decoder takes ``batch`` rows of ``seq`` new tokens, the keys/values of the
``past`` tokens as ``[batch, kv_heads, past, head_dim]`` tensors, an ``attention_mask [batch,
past + seq]`` (0 = padding: batched prompts are left-padded) and the ``position_ids [batch, seq]`` of
the new tokens, and returns ``present`` keys/values ``[batch, kv_heads, past + seq, head_dim]``.

Activations stay row-major 2-D as everywhere in the table: row ``b * seq + s`` is token ``s`` of
sequence ``b``. Four ops cover what the ``cached_attention`` family does with a fixed-size cache:

- ``flatten_ids``: U32 ``[batch, seq]`` token ids -> ``[batch * seq]`` (the rows ``embedding`` reads).
- ``rope_positions``: rotate-half RoPE with a position per row (read from ``position_ids``).
- ``kv_concat``: ``present = concat(past, new rows as [batch, kv_heads, seq, head_dim])`` on axis 2.
- ``masked_causal_attention``: query ``(b, s)`` sits at index ``past + s`` of ``present`` and
  attends to indices ``j <= past + s`` where ``attention_mask[b, j] != 0``. A row with nothing to
  attend to (a padding query before its sequence starts) gets a uniform softmax: finite, and never
  read by a real token, since padding keys are masked for everyone.

All three lower to standard ONNX (sizes read with ``Shape`` at run time), so the file runs on any
ONNX Runtime. ``kv_concat`` and ``masked_causal_attention`` are inference ops (differentiable=False);
``rope_positions``' VJP is itself with the negated angle.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import DType, NodeId, TensorType, dim_add, dim_div, dim_mul, dim_prod
from .attention import HEADS, check_heads
from .onnx_util import arange
from .rope import THETA, inv_freq, rope_ref
from .table import bool_attr, examples, int_attr, op, optional, rank, require

flatten_ids = op("flatten_ids", ("ids",), u32=("ids",), differentiable=False)
rope_positions = op(
    "rope_positions",
    ("x", "positions"),
    u32=("positions",),
    attrs=(THETA, int_attr("head_dim", 2, multiple_of=2), optional(bool_attr("inverse"), False)),
)
kv_concat = op("kv_concat", ("past", "new"), differentiable=False)
masked_causal_attention = op(
    "masked_causal_attention", ("q", "k", "v", "attention_mask"), u32=("attention_mask",), differentiable=False, attrs=HEADS
)

MASKED = float(np.finfo(np.float32).min)
"""Score of a hidden key: the lowest finite float32, so a row with every key hidden stays finite."""


# -- flatten_ids --------------------------------------------------------------------------------------
@flatten_ids.shape
def _(ids: TensorType) -> TensorType:
    return TensorType((ids.elements(),), DType.U32)


flatten_ids.numpy(lambda ids: ids.reshape(-1))
flatten_ids.onnx(lambda ctx, node, ids: ctx.op("Reshape", ids, ctx.ints([-1])))
examples(
    flatten_ids, lambda g, f, batch, seq: g.flatten_ids(f.u32(g, "ids", [batch, seq], 100)), {"batch": 2, "seq": 3}, {"batch": 1, "seq": 5}
)


# -- rope_positions ---------------------------------------------------------------------------------
@rope_positions.shape
def _(x: TensorType, positions: TensorType, *, theta: float, head_dim: int, inverse: bool = False) -> TensorType:
    name = "rope_positions"
    rank(name, x, 2, "x")
    require(
        isinstance(x.shape[1], int) and x.shape[1] % head_dim == 0, name, f"x width {x.shape[1]} must be a multiple of head_dim {head_dim}"
    )
    rows = dim_prod(positions.shape)
    require(rows == x.shape[0], name, f"positions {list(positions.shape)} must give one position per row of x {list(x.shape)}")
    return x


@rope_positions.numpy
def _(x, positions, *, theta, head_dim, inverse=False):
    return rope_ref(x, positions.reshape(-1).astype(np.int64), theta, head_dim, inverse)


@rope_positions.onnx
def _(ctx, node, x, positions):
    a = node.attrs
    hd = a["head_dim"]
    pos = ctx.cast(ctx.op("Reshape", positions, ctx.ints([-1])), TensorProto.FLOAT)  # [N]
    freq = ctx.const(inv_freq(a["theta"], hd) * (-1.0 if a.get("inverse") else 1.0))  # [hd/2]
    ang = ctx.op("Mul", ctx.op("Unsqueeze", pos, ctx.ints([1])), ctx.op("Unsqueeze", freq, ctx.ints([0])))  # [N, hd/2]
    cos = ctx.op("Unsqueeze", ctx.op("Concat", ctx.op("Cos", ang), ctx.op("Cos", ang), axis=1), ctx.ints([1]))  # [N, 1, hd]
    sin = ctx.op("Unsqueeze", ctx.op("Concat", ctx.op("Sin", ang), ctx.op("Sin", ang), axis=1), ctx.ints([1]))
    xh = ctx.op("Reshape", x, ctx.ints([0, -1, hd]))  # [N, heads, hd]
    x1 = ctx.op("Slice", xh, ctx.ints([0]), ctx.ints([hd // 2]), ctx.ints([2]))
    x2 = ctx.op("Slice", xh, ctx.ints([hd // 2]), ctx.ints([hd]), ctx.ints([2]))
    rotated = ctx.op("Concat", ctx.op("Neg", x2), x1, axis=2)
    out = ctx.op("Add", ctx.op("Mul", xh, cos), ctx.op("Mul", rotated, sin))
    return ctx.op("Reshape", out, ctx.op("Shape", x))


@rope_positions.vjp
def _(g, node, dy):
    # A rotation's transpose is the rotation by the negated angle; positions (U32) get no gradient.
    attrs = {**node.attrs, "inverse": not node.attrs.get("inverse", False)}
    return [g.apply("rope_positions", dy, node.inputs[1], **attrs), None]


def _rows(g, f, name, batch, seq, width):
    """A float operand of ``batch * seq`` rows (a reshape, so ``seq`` may be symbolic)."""
    return g.reshape(f.param(g, name, [batch, seq, width]), [dim_mul(batch, seq), width])


def _size(f, d) -> int:
    return f.sizes[d] if isinstance(d, str) else d


def _ex_rope(g, f, batch, seq, width, hd, high):
    return g.rope_positions(_rows(g, f, "x", batch, seq, width), f.u32(g, "position_ids", [batch, seq], high), 10000.0, hd)


examples(
    rope_positions,
    _ex_rope,
    {"batch": 2, "seq": 3, "width": 16, "hd": 8, "high": 50},
    {"batch": 1, "seq": 4, "width": 12, "hd": 4, "high": 5000},
)


# -- kv_concat ----------------------------------------------------------------------------------------
@kv_concat.shape
def _(past: TensorType, new: TensorType) -> TensorType:
    name = "kv_concat"
    rank(name, past, 4, "past")
    rank(name, new, 2, "new")
    batch, kv_heads, past_len, hd = past.shape
    require(
        isinstance(kv_heads, int) and isinstance(hd, int) and new.shape[1] == kv_heads * hd,
        name,
        f"new must be [rows, kv_heads*head_dim] = [rows, {kv_heads}*{hd}] for past {list(past.shape)}, got {list(new.shape)}",
    )
    seq = dim_div(new.shape[0], batch)
    require(seq is not None, name, f"the rows of new {list(new.shape)} must be batch ({batch}) sequences of equal length")
    return TensorType((batch, kv_heads, dim_add(past_len, seq), hd))


@kv_concat.numpy
def _(past, new):
    b, kvh, _, hd = past.shape
    rows = new.reshape(b, -1, kvh, hd).transpose(0, 2, 1, 3)
    return np.concatenate([past, rows], axis=2)


@kv_concat.onnx
def _(ctx, node, past, new):
    kvh, hd = ctx.input_types(node)[0].shape[1], ctx.input_types(node)[0].shape[3]
    batch = ctx.op("Shape", past, start=0, end=1)
    shape = ctx.op("Concat", batch, ctx.ints([-1, kvh, hd]), axis=0)
    rows = ctx.op("Transpose", ctx.op("Reshape", new, shape), perm=[0, 2, 1, 3])
    return ctx.op("Concat", past, rows, axis=2)


def _ex_concat(g, f, batch, kvh, past, seq, hd):
    return g.kv_concat(f.input(g, "past", [batch, kvh, past, hd]), _rows(g, f, "new", batch, seq, kvh * hd))


examples(
    kv_concat,
    _ex_concat,
    {"batch": 2, "kvh": 3, "past": 4, "seq": 1, "hd": 2},
    {"batch": 1, "kvh": 1, "past": 2, "seq": 5, "hd": 4},
)


# -- masked_causal_attention --------------------------------------------------------------------------
@masked_causal_attention.shape
def _(q: TensorType, k: TensorType, v: TensorType, mask: TensorType, *, num_heads: int, num_kv_heads: int, head_dim: int) -> TensorType:
    name = "masked_causal_attention"
    check_heads(name, num_heads, num_kv_heads, head_dim)
    rank(name, q, 2, "q")
    rank(name, k, 4, "k")
    rank(name, mask, 2, "attention_mask")
    require(q.shape[1] == num_heads * head_dim, name, f"q must be [rows, {num_heads}*{head_dim}], got {list(q.shape)}")
    want = (k.shape[0], num_kv_heads, k.shape[2], head_dim)
    require(k.shape == want and v.shape == want, name, f"k and v must be {list(want)}, got {list(k.shape)} and {list(v.shape)}")
    require(dim_div(q.shape[0], k.shape[0]) is not None, name, f"the rows of q {list(q.shape)} must be batch ({k.shape[0]}) sequences")
    require(mask.shape[0] == k.shape[0], name, f"attention_mask {list(mask.shape)} must have batch {k.shape[0]} rows")
    # The mask's length is the total (past + new) length; the ONNX world names it on its own
    # (total_sequence_length), so a symbolic length is checked at run time, a static one here.
    if isinstance(mask.shape[1], int) and isinstance(k.shape[2], int):
        require(mask.shape[1] == k.shape[2], name, f"attention_mask {list(mask.shape)} must cover the {k.shape[2]} keys")
    return q


def causal_mask_ref(mask: np.ndarray, seq: int) -> np.ndarray:
    """``[batch, seq, total]`` True where query s of sequence b may read key j."""
    total = mask.shape[1]
    causal = np.arange(total)[None, :] <= (total - seq + np.arange(seq))[:, None]
    return causal[None] & (mask[:, None, :] != 0)


@masked_causal_attention.numpy
def _(q, k, v, mask, *, num_heads, num_kv_heads, head_dim):
    b, _, total, _ = k.shape
    seq = q.shape[0] // b
    rep = num_heads // num_kv_heads
    qh = q.reshape(b, seq, num_heads, head_dim).transpose(0, 2, 1, 3)
    kh, vh = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scores = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(head_dim).astype(q.dtype)
    scores = np.where(causal_mask_ref(mask, seq)[:, None], scores, MASKED)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return (p @ vh).transpose(0, 2, 1, 3).reshape(b * seq, num_heads * head_dim).astype(q.dtype)


@masked_causal_attention.onnx
def _(ctx, node, q, k, v, mask):
    a = node.attrs
    h, kvh, hd = a["num_heads"], a["num_kv_heads"], a["head_dim"]
    rep = h // kvh
    batch = ctx.op("Shape", k, start=0, end=1)
    total = ctx.op("Squeeze", ctx.op("Shape", k, start=2, end=3), ctx.ints([0]))
    qh = ctx.op(
        "Transpose", ctx.op("Reshape", q, ctx.op("Concat", batch, ctx.ints([-1, h, hd]), axis=0)), perm=[0, 2, 1, 3]
    )  # [B, H, S, hd]
    seq = ctx.op("Squeeze", ctx.op("Shape", qh, start=2, end=3), ctx.ints([0]))

    def heads(x: str) -> str:  # [B, KVH, T, hd] -> [B, H, T, hd] (query head i reads KV head i // rep)
        if rep == 1:
            return x
        x5 = ctx.op("Expand", ctx.op("Unsqueeze", x, ctx.ints([2])), ctx.ints([1, 1, rep, 1, 1]))
        return ctx.op("Reshape", x5, ctx.ints([0, h, -1, hd]))

    scores = ctx.op("Mul", ctx.op("MatMul", qh, ctx.op("Transpose", heads(k), perm=[0, 1, 3, 2])), ctx.const(1.0 / np.sqrt(hd)))
    qidx = arange(ctx, seq, ctx.op("Sub", total, seq))  # query s sits at index past + s
    future = ctx.op("Greater", ctx.op("Unsqueeze", arange(ctx, total), ctx.ints([0])), ctx.op("Unsqueeze", qidx, ctx.ints([1])))  # [S, T]
    padding = ctx.op("Equal", ctx.op("Unsqueeze", ctx.to_int64(mask), ctx.ints([1, 2])), ctx.const(0, np.int64))  # [B, 1, 1, T]
    hidden = ctx.op("Or", ctx.op("Unsqueeze", future, ctx.ints([0, 1])), padding)
    probs = ctx.op("Softmax", ctx.op("Where", hidden, ctx.const(MASKED), scores), axis=-1)
    out = ctx.op("Transpose", ctx.op("MatMul", probs, heads(v)), perm=[0, 2, 1, 3])  # [B, S, H, hd]
    return ctx.op("Reshape", out, ctx.ints([-1, h * hd]))


def _ex_attn(g, f, batch, seq, past, h, kvh, hd, pads):
    q = _rows(g, f, "q", batch, seq, h * hd)
    if past:  # keys/values of the past tokens followed by this step's
        k = g.kv_concat(f.input(g, "past_k", [batch, kvh, past, hd]), _rows(g, f, "k", batch, seq, kvh * hd))
        v = g.kv_concat(f.input(g, "past_v", [batch, kvh, past, hd]), _rows(g, f, "v", batch, seq, kvh * hd))
    else:
        k, v = (f.input(g, name, [batch, kvh, seq, hd]) for name in ("k", "v"))
    total = past + _size(f, seq)
    mask = np.ones((batch, total), np.uint32)
    for b, n in enumerate(pads):  # left padding
        mask[b, : min(n, total)] = 0
    f.inputs["attention_mask"] = mask
    mask_node = g.input_u32("attention_mask", [batch, seq if not past else dim_add(past, seq) if isinstance(seq, int) else "total"])
    return g.masked_causal_attention(q, k, v, mask_node, h, kvh, hd)


examples(
    masked_causal_attention,
    _ex_attn,
    {"batch": 2, "seq": 3, "past": 0, "h": 4, "kvh": 2, "hd": 8, "pads": [0, 2]},  # a left-padded prompt
    {"batch": 2, "seq": 1, "past": 5, "h": 3, "kvh": 1, "hd": 4, "pads": [3, 0]},  # a decode step
    {"batch": 1, "seq": 4, "past": 2, "h": 2, "kvh": 2, "hd": 4, "pads": [0]},
)


class DecoderBuilders:
    def flatten_ids(self, ids: NodeId) -> NodeId:
        """U32 ids ``[batch, seq]`` as ``[batch * seq]`` (row ``b * seq + s``), e.g. for ``embedding``."""
        return self.apply("flatten_ids", ids)

    def rope_positions(self, x: NodeId, positions: NodeId, theta: float, head_dim: int) -> NodeId:
        """Rotate-half RoPE on x ``[rows, width]`` with row r at position ``positions.flat[r]`` (a U32
        ``[batch, seq]`` or ``[rows]`` node, e.g. ``position_ids``)."""
        return self.apply("rope_positions", x, positions, theta=theta, head_dim=head_dim)

    def kv_concat(self, past: NodeId, new: NodeId) -> NodeId:
        """``present [batch, kv_heads, past + seq, head_dim]``: past keys/values followed by the new
        rows ``[batch * seq, kv_heads * head_dim]``."""
        return self.apply("kv_concat", past, new)

    def masked_causal_attention(
        self, q: NodeId, k: NodeId, v: NodeId, attention_mask: NodeId, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> NodeId:
        """Attention of q ``[batch * seq, H*hd]`` over present keys/values ``[batch, KVH, total, hd]``:
        query s at index ``total - seq + s`` reads keys up to it whose ``attention_mask`` is not 0."""
        return self.apply(
            "masked_causal_attention", q, k, v, attention_mask, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim
        )
