"""Fused decode-layer ops: one kernel where the plain ops launch two, chosen by e-graph rules.

``rope_cache_write`` rotates new key rows with RoPE and writes them into a KV cache in place, in one
pass: ``cache_write(rope(k, kv_pos), cache, kv_pos)`` is one ``com.meganeura.RopeCacheWrite`` node
instead of ``Rope`` + ``CacheWrite`` (the rotated rows never go through memory). The rule below
rewrites every graph where the rope's dynamic offset and the write position are the same node, so
a model written with plain ops (``nn.llama``) gets it from the optimizer. Like ``cache_write`` it
writes its ``cache`` input in place and has no gradient (KV caches appear in inference graphs only).

Its attributes are ``rope``'s (the rule hands the matched rope's attributes over as they are); the
shape rule accepts only what the kernel computes: positions ``kv_pos + r`` (``offset_static`` 0),
the forward rotation (not ``inverse``) and no ``period``. A term that fails it is never extracted.

Other decode-layer fusions live with the ops they fuse: ``gemm`` takes a residual ``[M, N]`` as its
bias (``linalg.py``) and ``swiglu`` is one ``com.meganeura.SwiGLU`` kernel (``elementwise.py``).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import NodeId, TensorType
from .kv_cache import cache_write, check_kv_pos
from .lowering import CUSTOM_DOMAIN, function_body
from .onnx_util import arange, dim, dims, scalar_of
from .rope import HEAD_DIM, MAX_POSITION, THETA, rope_ref
from .table import CustomOp, Position, TensorArg, bool_attr, dim_attr, examples, int_attr, op, optional, rank, require

rope_cache_write = op(
    "rope_cache_write",
    ("new_kv", "cache", "kv_pos"),
    u32=("kv_pos",),
    differentiable=False,
    attrs=(
        THETA,
        HEAD_DIM,
        optional(int_attr("offset_static", 0, MAX_POSITION, doc="must be 0: row r sits at kv_pos + r"), 0),
        optional(bool_attr("inverse"), False),
        optional(dim_attr("period")),
    ),
    custom=CustomOp(
        "RopeCacheWrite",
        (TensorArg("new_kv"), TensorArg("cache"), TensorArg("kv_pos", "index")),
        (TensorArg("updated"),),
        (THETA, HEAD_DIM),
        inplace_input="cache",
    ),
    inplace_input="cache",
    positions=(Position("kv_pos", rows="new_kv", within="cache"),),
    half_types=frozenset({"float16", "bfloat16"}),
)

rope_cache_write.rewrite(
    "rope_then_cache_write", "(cache_write (rope ?k ?pos {?rope}) ?cache ?pos)", "(rope_cache_write ?k ?cache ?pos {?rope})"
)


@rope_cache_write.shape
def _(
    new_kv: TensorType,
    cache: TensorType,
    kv_pos: TensorType,
    *,
    theta: float,
    head_dim: int,
    offset_static: int = 0,
    inverse: bool = False,
    period: int | None = None,
) -> TensorType:
    name = "rope_cache_write"
    require(
        offset_static == 0 and not inverse and period is None,
        name,
        f"rotates row r by position kv_pos + r only (offset_static 0, inverse False, no period), got offset_static={offset_static}, "
        f"inverse={inverse}, period={period}",
    )
    rank(name, new_kv, 2, "new_kv")  # one sequence: the kernels take no [batch, ...] form
    rank(name, cache, 2, "cache")
    try:  # cache_write's checks, under this op's name
        out = cache_write.shape_rule(new_kv, cache, kv_pos)
    except ValueError as e:
        raise ValueError(f"{name}: {str(e).removeprefix('cache_write: ')}") from None
    require(
        isinstance(new_kv.shape[1], int) and new_kv.shape[1] % head_dim == 0,
        name,
        f"new_kv width {new_kv.shape[1]} (shape {list(new_kv.shape)}) must be a multiple of head_dim {head_dim}",
    )
    return out


@rope_cache_write.numpy
def _(new_kv, cache, kv_pos, *, theta, head_dim, offset_static=0, inverse=False, period=None):
    p = int(kv_pos.reshape(-1)[0])
    check_kv_pos("rope_cache_write", p, new_kv.shape[0], cache.shape[0])
    out = cache.copy()
    out[p : p + new_kv.shape[0]] = rope_ref(new_kv, p + np.arange(new_kv.shape[0]), theta, head_dim)
    return out


@rope_cache_write.function_body
def rope_cache_write_function(opset: int):
    """``Rope``'s body at positions ``kv_pos + r``, then ``CacheWrite``'s ``ScatterND``."""

    def body(ctx, new, cache, kv_pos):
        hd = ctx.attr_ref("head_dim", "int")
        half = ctx.op("Div", hd, ctx.const(2, np.int64))
        rows = arange(ctx, dim(ctx, new, 0), scalar_of(ctx, kv_pos))  # int64 [T]: the cache rows written
        j = ctx.cast(arange(ctx, half), TensorProto.FLOAT)
        freq = ctx.op(
            "Pow", ctx.attr_ref("theta", "float"), ctx.op("Div", ctx.op("Mul", j, ctx.const(-2.0)), ctx.cast(hd, TensorProto.FLOAT))
        )
        ang = ctx.op("Mul", ctx.op("Unsqueeze", ctx.cast(rows, TensorProto.FLOAT), ctx.ints([1])), ctx.op("Unsqueeze", freq, ctx.ints([0])))
        cos = ctx.op("Unsqueeze", ctx.op("Concat", ctx.op("Cos", ang), ctx.op("Cos", ang), axis=1), ctx.ints([1]))
        sin = ctx.op("Unsqueeze", ctx.op("Concat", ctx.op("Sin", ang), ctx.op("Sin", ang), axis=1), ctx.ints([1]))
        heads = ctx.op("Div", dim(ctx, new, 1), hd)  # not -1: T may be 0
        xh = ctx.op("Reshape", new, dims(ctx, 0, heads, hd))  # [T, heads, hd]
        x1 = ctx.op("Slice", xh, dims(ctx, 0), dims(ctx, half), ctx.ints([2]))
        x2 = ctx.op("Slice", xh, dims(ctx, half), dims(ctx, hd), ctx.ints([2]))
        rotated = ctx.op("Add", ctx.op("Mul", xh, cos), ctx.op("Mul", ctx.op("Concat", ctx.op("Neg", x2), x1, axis=2), sin))
        return ctx.op("ScatterND", cache, ctx.op("Unsqueeze", rows, ctx.ints([1])), ctx.op("Reshape", rotated, ctx.op("Shape", new)))

    return function_body(rope_cache_write.custom, body, opset)


@rope_cache_write.onnx
def _(ctx, node, new_kv, cache, kv_pos):
    ctx.use_function(rope_cache_write_function(ctx.opset))
    a = node.attrs
    return ctx.op("RopeCacheWrite", new_kv, cache, kv_pos, domain=CUSTOM_DOMAIN, theta=float(a["theta"]), head_dim=a["head_dim"])


def _ex(g, f, max_seq, width, hd, t, kv_pos):
    pos = g.input_u32("kv_pos", [1])
    f.inputs["kv_pos"] = np.array([kv_pos], dtype=np.uint32)
    return g.rope_cache_write(f.param(g, "new_kv", [t, width]), f.input(g, "cache", [max_seq, width]), pos, 10000.0, hd)


examples(
    rope_cache_write,
    _ex,
    {"max_seq": 8, "width": 16, "hd": 8, "t": 1, "kv_pos": 3},
    {"max_seq": 9, "width": 16, "hd": 16, "t": 1, "kv_pos": 8},
    {"max_seq": 6, "width": 12, "hd": 4, "t": 3, "kv_pos": 3},
    {"max_seq": 5, "width": 8, "hd": 8, "t": 1, "kv_pos": 0},
)


class FusedBuilders:
    def rope_cache_write(self, new_kv: NodeId, cache: NodeId, kv_pos: NodeId, theta: float, head_dim: int) -> NodeId:
        """``cache_write(rope_dynamic_offset(new_kv, theta, kv_pos, head_dim), cache, kv_pos)`` in one
        kernel: the cache ``[max_seq, dim]`` with rows ``[kv_pos, kv_pos + T)`` replaced by the rotated
        rows of new_kv ``[T, dim]`` (row r at position ``kv_pos + r``)."""
        return self.apply("rope_cache_write", new_kv, cache, kv_pos, theta=theta, head_dim=head_dim, offset_static=0)
