"""Small ONNX building blocks shared by lowerings and ``com.meganeura`` function bodies.

Sizes may be Python ints (known at export time) or names of int64 scalar tensors (attributes read
inside a function body), so one helper serves both.
"""

from __future__ import annotations

import math

from onnx import TensorProto

NEG_INF = float("-inf")


def dims(ctx, *parts: int | str) -> str:
    """A 1-D int64 shape tensor from ints and int64 scalar tensor names."""
    if all(isinstance(p, int) for p in parts):
        return ctx.ints(parts)
    pieces = [ctx.ints([p]) if isinstance(p, int) else ctx.op("Unsqueeze", p, ctx.ints([0])) for p in parts]
    return ctx.op("Concat", *pieces, axis=0)


def dim(ctx, x: str, axis: int) -> str:
    """``x.shape[axis]`` as an int64 scalar tensor."""
    return ctx.op("Squeeze", ctx.op("Shape", x, start=axis, end=axis + 1), ctx.ints([0]))


def arange(ctx, n: int | str, start: str | None = None) -> str:
    """int64 ``[start, start + n)``; ``start`` an int64 scalar tensor (default 0)."""
    zero = ctx.const(0, "int64")
    nn = ctx.const(n, "int64") if isinstance(n, int) else n
    begin = start if start is not None else zero
    return ctx.op("Range", begin, ctx.op("Add", begin, nn), ctx.const(1, "int64"))


def scalar_of(ctx, x: str) -> str:
    """First element of a ``[1]`` int tensor, as an int64 scalar."""
    return ctx.op("Squeeze", ctx.to_int64(x), ctx.ints([0]))


def attend(ctx, q: str, k: str, v: str, head_dim: int | str, rep: int | str, mask_positions=None) -> str:
    """Multi-head attention over 2-D row-major tensors.

    q ``[T, H*hd]``, k/v ``[S, KVH*hd]`` -> ``[T, H*hd]``. ``rep`` = H / KVH (GQA: query head h reads
    KV head h // rep). ``mask_positions`` is None (no mask) or ``(qpos [T], kpos [S])`` int64
    tensors; key j is hidden from query t where ``kpos[j] > qpos[t]``.
    """
    if isinstance(head_dim, int):
        scale = ctx.const(1.0 / math.sqrt(head_dim))
    else:
        scale = ctx.op("Reciprocal", ctx.op("Sqrt", ctx.cast(head_dim, TensorProto.FLOAT)))

    def heads(x: str) -> str:  # [S, KVH*hd] -> [S, H, hd]
        if rep == 1:
            return ctx.op("Reshape", x, dims(ctx, 0, -1, head_dim))
        x4 = ctx.op("Reshape", x, dims(ctx, 0, -1, 1, head_dim))
        x4 = ctx.op("Expand", x4, dims(ctx, 1, 1, rep, 1))
        return ctx.op("Reshape", x4, dims(ctx, 0, -1, head_dim))

    qh = ctx.op("Transpose", ctx.op("Reshape", q, dims(ctx, 0, -1, head_dim)), perm=[1, 0, 2])  # [H, T, hd]
    kt = ctx.op("Transpose", heads(k), perm=[1, 2, 0])  # [H, hd, S]
    vh = ctx.op("Transpose", heads(v), perm=[1, 0, 2])  # [H, S, hd]
    scores = ctx.op("Mul", ctx.op("MatMul", qh, kt), scale)  # [H, T, S]
    if mask_positions is not None:
        qpos, kpos = mask_positions
        hidden = ctx.op("Greater", ctx.op("Unsqueeze", kpos, ctx.ints([0])), ctx.op("Unsqueeze", qpos, ctx.ints([1])))
        scores = ctx.op("Where", hidden, ctx.const(NEG_INF), scores)
    probs = ctx.op("Softmax", scores, axis=-1)
    out = ctx.op("Transpose", ctx.op("MatMul", probs, vh), perm=[1, 0, 2])  # [T, H, hd]
    return ctx.op("Reshape", out, dims(ctx, 0, -1))
