"""Rotary position embeddings (HF/LLaMA rotate-half), exported as ``com.meganeura.Rope``.

One op serves ``rope``, ``rope_with_offset`` and ``rope_dynamic_offset``: row r of x has position
``r + offset + offset_dyn[0]`` (``offset`` static, ``offset_dyn`` an optional U32 ``[1]`` node).
The ONNX node always gets two inputs; for static rope the second is a constant ``[0]``.

A batch of sequences at their own positions: x ``[B, S, D]`` with ``offset_dyn`` U32 ``[B]`` (row s
of sequence b at position ``s + offset + offset_dyn[b]``; a ``[1]`` offset is shared by all).
The kernels take float32, float16 and bfloat16 (computed in float32).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import Dim, NodeId, TensorType, dim_div
from .lowering import CUSTOM_DOMAIN, function_body
from .onnx_util import arange, dim, dims
from .table import (
    CustomOp,
    Position,
    TensorArg,
    bool_attr,
    dim_attr,
    examples,
    float_attr,
    int_attr,
    op,
    optional,
    require,
    static_dim,
)

MAX_POSITION = 1 << 40
"""Largest position the Rope kernels accept (static offset, and offset + dynamic offset)."""
THETA = float_attr("theta", 0, lo_open=True, doc="RoPE base; inverse frequency theta^(-2j/head_dim)")
HEAD_DIM = int_attr("head_dim", 2, 1024, multiple_of=2, doc="rotated width per head (the kernels keep one head in registers)")

rope = op(
    "rope",
    ("x", "offset"),
    u32=("offset",),
    optional_inputs=("offset",),
    attrs=(
        THETA,
        HEAD_DIM,
        int_attr("offset_static", 0, MAX_POSITION, doc="position of row 0 (static)"),
        optional(bool_attr("inverse"), False),
        optional(dim_attr("period")),
    ),
    custom=CustomOp(
        "Rope",
        (TensorArg("X"), TensorArg("offset_dyn", "index", optional=True)),
        (TensorArg("Y"),),
        (
            THETA,
            HEAD_DIM,
            optional(int_attr("offset", 0, MAX_POSITION), 0),
            optional(int_attr("inverse", 0, 1, doc="1: rotate by the negated angle (the transpose: rope's VJP)"), 0),
        ),
    ),
    positions=(Position("offset", max_value=MAX_POSITION),),
    half_types=frozenset({"float16", "bfloat16"}),
)


def inv_freq(theta: float, head_dim: int, dtype=np.float32) -> np.ndarray:
    """``theta ** (-2j / head_dim)``, correctly rounded to ``dtype``.

    Computed in float64 and rounded once: that is what ``powf`` (ORT's Pow, the kernels) returns,
    while numpy's float32 ``power`` is one ulp off for some frequencies, which shows at large positions.
    """
    j = np.arange(head_dim // 2, dtype=np.float64)
    return np.power(np.float64(theta), -2.0 * j / head_dim).astype(dtype)


def rope_ref(x: np.ndarray, positions: np.ndarray, theta: float, head_dim: int, inverse: bool = False) -> np.ndarray:
    """Rotate-half RoPE of x ``[seq, width]`` (row i at ``positions[i]``); ``inverse`` rotates by the
    negated angle (the transpose, i.e. the VJP)."""
    seq, width = x.shape
    half = head_dim // 2
    ang = positions.astype(x.dtype)[:, None] * inv_freq(theta, head_dim, x.dtype.type)[None, :]
    if inverse:
        ang = -ang
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    xh = x.reshape(seq, width // head_dim, head_dim)
    x1, x2 = xh[..., :half], xh[..., half:]
    out = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.reshape(seq, width).astype(x.dtype)


@rope.shape
def _(
    x: TensorType,
    offset: TensorType | None = None,
    *,
    theta: float,
    head_dim: int,
    offset_static: int,
    inverse: bool = False,
    period: int | None = None,
) -> TensorType:
    require(x.rank() in (2, 3), "rope", f"x must be 2-D [seq, dim] or 3-D [batch, seq, dim], got shape {list(x.shape)}")
    static_dim("rope", x, x.rank() - 1, "x")
    if period is not None:  # rows = blocks of `period` sequences, positions restart in each
        require(
            x.rank() == 2 and dim_div(x.shape[0], period) is not None and offset is None,
            "rope",
            f"period {period} must divide the rows of a 2-D x {list(x.shape)} (static offsets only)",
        )
    require(x.shape[-1] % head_dim == 0, "rope", f"x width {x.shape[-1]} (shape {list(x.shape)}) must be divisible by head_dim {head_dim}")
    if offset is not None:
        per_seq = x.rank() == 3 and offset.rank() == 1 and offset.shape[0] == x.shape[0]
        want = f"[1] or [{x.shape[0]}] (one per sequence)" if x.rank() == 3 else "[1]"
        require(offset.elements() == 1 or per_seq, "rope", f"offset must be a U32 {want} node, got {list(offset.shape)}")
    return x


@rope.numpy
def _(x, offset=None, *, theta, head_dim, offset_static, inverse=False, period=None):
    dyn = offset.reshape(-1).astype(np.int64) if offset is not None else np.zeros(1, np.int64)
    if x.ndim == 3:  # sequence b starts at offset_static + dyn[b] (dyn[0] when shared)
        starts = offset_static + np.broadcast_to(dyn, (x.shape[0],))
        return np.stack(
            [rope_ref(xb, start + np.arange(x.shape[1]), theta, head_dim, inverse) for xb, start in zip(x, starts, strict=True)]
        )
    rows = np.arange(x.shape[0]) % (period or x.shape[0])
    return rope_ref(x, offset_static + int(dyn[0]) + rows, theta, head_dim, inverse)


def rotate_body(ctx, x: str, starts: str, inverse: str | None = None) -> str:
    """Function-body nodes rotating x ``[S, D]`` or ``[B, S, D]`` (the caller's ``theta`` and
    ``head_dim`` attributes), row s of sequence b at position ``starts[b] + s`` (``starts`` int64
    ``[n]``, n = 1 or B, broadcast against x seen as ``[(B,) S, heads, hd]``). Angles are float32 (as
    in the kernels); cos/sin take x's element type. ``inverse``: an int64 scalar, 1 negates the angle.
    Shared with ``rope_cached_attention``'s body."""
    hd = ctx.attr_ref("head_dim", "int")
    half = ctx.op("Div", hd, ctx.const(2, np.int64))
    rows = arange(ctx, dim(ctx, x, -2))  # [S]
    pos = ctx.op("Add", ctx.op("Unsqueeze", starts, ctx.ints([1])), ctx.op("Unsqueeze", rows, ctx.ints([0])))  # [n, S]
    j = ctx.cast(arange(ctx, half), TensorProto.FLOAT)
    exponent = ctx.op("Div", ctx.op("Mul", j, ctx.const(-2.0)), ctx.cast(hd, TensorProto.FLOAT))
    freq = ctx.op("Pow", ctx.attr_ref("theta", "float"), exponent)  # [hd/2]
    ang = ctx.op("Mul", ctx.op("Unsqueeze", ctx.cast(pos, TensorProto.FLOAT), ctx.ints([2])), freq)  # [n, S, hd/2]

    def table(fn: str) -> str:  # [n, S, 1, hd] in x's element type
        t = ctx.op(fn, ang)
        return ctx.op("CastLike", ctx.op("Unsqueeze", ctx.op("Concat", t, t, axis=2), ctx.ints([2])), x)

    cos, sin = table("Cos"), table("Sin")
    if inverse is not None:  # sin(-a) = -sin(a): sin times 1 - 2 * inverse
        sign = ctx.op("Sub", ctx.const(1, np.int64), ctx.op("Mul", ctx.const(2, np.int64), inverse))
        sin = ctx.op("Mul", sin, ctx.op("CastLike", sign, sin))
    xh = ctx.op("Reshape", x, ctx.op("Concat", ctx.op("Shape", x, end=-1), dims(ctx, -1, hd), axis=0))  # [(B,) S, heads, hd]
    x1 = ctx.op("Slice", xh, dims(ctx, 0), dims(ctx, half), ctx.ints([-1]))
    x2 = ctx.op("Slice", xh, dims(ctx, half), dims(ctx, hd), ctx.ints([-1]))
    rotated = ctx.op("Concat", ctx.op("Neg", x2), x1, axis=-1)
    out = ctx.op("Add", ctx.op("Mul", xh, cos), ctx.op("Mul", rotated, sin))
    return ctx.op("Reshape", out, ctx.op("Shape", x))


@rope.function_body
def rope_function(opset: int):
    # Rank-generic: x [S, D] or [B, S, D]; the starts [n] (n = 1 or B) = offset + offset_dyn.
    def body(ctx, x, offset_dyn):
        starts = ctx.op("Add", ctx.attr_ref("offset", "int"), ctx.op("Reshape", ctx.to_int64(offset_dyn), ctx.ints([-1])))  # [n]
        return rotate_body(ctx, x, starts, ctx.attr_ref("inverse", "int"))

    return function_body(rope.custom, body, opset)


@rope.onnx
def _(ctx, node, x, offset=None):
    ctx.use_function(rope_function(ctx.opset))
    dyn = ctx.to_int64(offset) if offset is not None else ctx.ints([0])
    a = node.attrs
    shape = ctx.input_types(node)[0].shape
    if len(shape) == 3:  # a batch: one Rope over [B, S, D] (period is for 2-D x only)
        return _rope_node(ctx, x, dyn, a, shape[2])
    rows, width = shape
    period = a.get("period") or rows
    if period != rows:  # [B*S, D] seen as the batch [B, S, D] of sequences starting at the same position: one Rope, no copy
        x3 = ctx.reshape(x, [dim_div(rows, period), period, width])
        y = _rope_node(ctx, x3, dyn, a, width)
        ctx.note_shape(y, ctx.static_shapes.get(x3))  # the attention lowering reshapes it back to 3-D: that folds
        return ctx.reshape(y, [rows, width])
    return _rope_node(ctx, x, dyn, a, width)


def _rope_node(ctx, x, dyn, a, width: Dim) -> str:
    # The negated angle (rope's VJP) is the kernels' `inverse` attribute. Written on every node: the
    # function body's default serves ORT, but onnx's checker (1.16) does not apply it when inlining.
    inverse = int(bool(a.get("inverse", False)))
    return ctx.op(
        "Rope", x, dyn, domain=CUSTOM_DOMAIN, theta=float(a["theta"]), head_dim=a["head_dim"], offset=a["offset_static"], inverse=inverse
    )


@rope.vjp
def _(g, node, dy):
    # A rotation's transpose is the rotation by the negated angle; the offset (U32) has no gradient.
    attrs = {**node.attrs, "inverse": not node.attrs.get("inverse", False)}
    return [g.apply("rope", dy, *node.inputs[1:], **attrs)] + [None] * (len(node.inputs) - 1)


def _ex(g, f, seq, width, hd, static, dynamic, inverse=False, period=None):
    if isinstance(dynamic, list):  # a batch [B, seq, width], one offset per sequence
        x = f.param(g, "x", [len(dynamic), seq, width])
        off = g.input_u32("offset", [len(dynamic)])
        f.inputs["offset"] = np.array(dynamic, dtype=np.uint32)
        return g.apply("rope", x, off, theta=500.0, head_dim=hd, offset_static=static, inverse=inverse)
    x = f.param(g, "x", [seq, width])
    if inverse or period:
        return g.apply("rope", x, theta=10000.0, head_dim=hd, offset_static=static, inverse=inverse, period=period)
    if dynamic is None:
        return g.rope_with_offset(x, 10000.0, static, hd) if static else g.rope(x, 10000.0, hd)
    off = g.input_u32("offset", [1])
    f.inputs["offset"] = np.array([dynamic], dtype=np.uint32)
    return g.rope_dynamic_offset(x, 500.0, off, hd)


examples(
    rope,
    _ex,
    {"seq": 5, "width": 16, "hd": 8, "static": 0, "dynamic": None},
    {"seq": 3, "width": 12, "hd": 4, "static": 7, "dynamic": None},
    {"seq": 4, "width": 16, "hd": 16, "static": 0, "dynamic": 11},
    {"seq": 4, "width": 8, "hd": 4, "static": 2, "dynamic": None, "inverse": True},
    {"seq": 6, "width": 8, "hd": 4, "static": 1, "dynamic": None, "period": 3},
    {"seq": 3, "width": 16, "hd": 8, "static": 2, "dynamic": [9, 0, 4]},
    {"seq": 2, "width": 8, "hd": 4, "static": 0, "dynamic": [5, 1], "inverse": True},
)


class RopeBuilders:
    def rope(self, x: NodeId, theta: float, head_dim: int) -> NodeId:
        """Rotary embeddings on x ``[seq, dim]`` (dim % head_dim == 0, head_dim even); row i at position i."""
        return self.apply("rope", x, theta=theta, head_dim=head_dim, offset_static=0)

    def rope_with_offset(self, x: NodeId, theta: float, pos_offset: int, head_dim: int) -> NodeId:
        """Like :meth:`rope` with row i at position ``i + pos_offset`` (a static int)."""
        return self.apply("rope", x, theta=theta, head_dim=head_dim, offset_static=pos_offset)

    def rope_dynamic_offset(self, x: NodeId, theta: float, offset: NodeId, head_dim: int) -> NodeId:
        """Like :meth:`rope` with row i at position ``i + offset[0]``, offset a U32 ``[1]`` node.

        Batched: x ``[B, seq, dim]`` with offset U32 ``[B]``: row i of sequence b at ``i + offset[b]``."""
        return self.apply("rope", x, offset, theta=theta, head_dim=head_dim, offset_static=0)
