"""Shape plumbing the gradient rules need: reshape, row/column sums, broadcasts and zeros.

They are ordinary ops of the table (shape rule, numpy reference, ONNX lowering, VJP, examples),
so user programs may call them too. The reductions and broadcasts come in transposed pairs:
``col_sum``/``row_sum``/``sum_all`` are the VJPs of ``broadcast_to`` and the other way round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import numpy_helper

from ..ir import Dim, NodeId, TensorType, dim_prod
from .table import examples, op, rank, require, shape_attr

SHAPE = (shape_attr("shape", symbolic=True),)
reshape = op("reshape", ("x",), attrs=SHAPE)
broadcast_to = op("broadcast_to", ("x",), attrs=SHAPE)
col_sum = op("col_sum", ("x",))
row_sum = op("row_sum", ("x",))
zeros = op("zeros", (), differentiable=False, attrs=SHAPE)


@reshape.shape
def _(x: TensorType, *, shape: tuple[Dim, ...]) -> TensorType:
    shp = tuple(shape)
    # Symbolic counts must be equal as expressions: [batch, seq, 4] -> ["batch*seq", 4] works.
    n, want = x.elements(), dim_prod(shp)
    require(want == n, "reshape", f"cannot reshape {list(x.shape)} ({n} elements) to {list(shp)} ({want} elements)")
    return TensorType(shp)


reshape.numpy(lambda x, *, shape: x.reshape(shape))
reshape.onnx(lambda ctx, node, x: ctx.reshape(x, list(node.ty.shape)))
reshape.vjp(lambda g, node, dy: [g.reshape(dy, g.node(node.inputs[0]).ty.shape)])
examples(reshape, lambda g, f, a, b: g.reshape(f.param(g, "x", a), b), {"a": [3, 4], "b": [12]}, {"a": [2, 6], "b": [4, 3]})


def _broadcast_kind(x: tuple[Dim, ...], out: tuple[Dim, ...]) -> str:
    """Which of the supported broadcasts ``x -> out`` is: scalar, row vector, [1, N] or [M, 1]."""
    if dim_prod(x) == 1:
        return "scalar"
    if len(out) == 2 and x == (out[1],):
        return "row"
    if len(out) == 2 and x == (1, out[1]):
        return "row2"
    if len(out) == 2 and x == (out[0], 1):
        return "col"
    return ""


@broadcast_to.shape
def _(x: TensorType, *, shape: tuple[Dim, ...]) -> TensorType:
    shp = tuple(shape)
    require(
        bool(_broadcast_kind(x.shape, shp)),
        "broadcast_to",
        f"supports [1] -> any shape and [N], [1, N], [M, 1] -> [M, N]; got {list(x.shape)} -> {list(shp)}",
    )
    return TensorType(shp)


@broadcast_to.numpy
def _(x, *, shape):
    if math.prod(x.shape) == 1:
        x = x.reshape(-1)
    return np.broadcast_to(x, shape).copy()


@broadcast_to.onnx
def _(ctx, node, x):
    if ctx.input_types(node)[0].elements() == 1:
        x = ctx.reshape(x, [1])
    return ctx.op("Expand", x, ctx.shape_tensor(node.ty.shape))


@broadcast_to.vjp
def _(g, node, dy):
    x_shape = g.node(node.inputs[0]).ty.shape
    kind = _broadcast_kind(x_shape, node.ty.shape)
    if kind == "scalar":
        s = g.sum_all(dy)
        return [s if x_shape == (1,) else g.reshape(s, x_shape)]
    if kind == "row":
        return [g.col_sum(dy)]
    if kind == "row2":
        return [g.reshape(g.col_sum(dy), x_shape)]
    return [g.row_sum(dy)]


examples(
    broadcast_to,
    lambda g, f, a, b: g.broadcast_to(f.param(g, "x", a), b),
    {"a": [1], "b": [2, 3, 4]},
    {"a": [5], "b": [3, 5]},
    {"a": [1, 4], "b": [2, 4]},
    {"a": [3, 1], "b": [3, 6]},
)


@col_sum.shape
def _(x: TensorType) -> TensorType:
    rank("col_sum", x, 2, "x")
    return TensorType((x.shape[1],))


col_sum.numpy(lambda x: x.sum(axis=0))
col_sum.onnx(lambda ctx, node, x: ctx.op("ReduceSum", x, ctx.ints([0]), keepdims=0))
col_sum.vjp(lambda g, node, dy: [g.broadcast_to(dy, g.node(node.inputs[0]).ty.shape)])


@row_sum.shape
def _(x: TensorType) -> TensorType:
    rank("row_sum", x, 2, "x")
    return TensorType((x.shape[0], 1))


row_sum.numpy(lambda x: x.sum(axis=1, keepdims=True))
row_sum.onnx(lambda ctx, node, x: ctx.op("ReduceSum", x, ctx.ints([1]), keepdims=1))
row_sum.vjp(lambda g, node, dy: [g.broadcast_to(dy, g.node(node.inputs[0]).ty.shape)])

for _d in (col_sum, row_sum):
    examples(_d, lambda g, f, m, n, _name=_d.name: g.apply(_name, f.param(g, "x", [m, n])), {"m": 3, "n": 5}, {"m": 6, "n": 1})


@zeros.shape
def _(*, shape: tuple[Dim, ...]) -> TensorType:
    return TensorType(tuple(shape))


zeros.numpy(lambda *, shape: np.zeros(shape, np.float32))


@zeros.onnx
def _(ctx, node):
    return ctx.op("ConstantOfShape", ctx.shape_tensor(node.ty.shape), value=numpy_helper.from_array(np.zeros(1, np.float32)))


# zeros has no operand; the example adds a parameter so the exported model has an input.
examples(zeros, lambda g, f, shape: g.add(g.zeros(shape), f.param(g, "x", shape)), {"shape": [2, 3]}, {"shape": [5]})


class ShapeBuilders:
    def reshape(self, x: NodeId, shape: Sequence[Dim]) -> NodeId:
        """The same elements in a new shape (row-major). Symbolic dims are allowed where the element
        counts agree as expressions: ``["batch", "seq", 64]`` -> ``["batch*seq", 64]``."""
        return self.apply("reshape", x, shape=shape)

    def broadcast_to(self, x: NodeId, shape: Sequence[Dim]) -> NodeId:
        """Repeat x to ``shape``: ``[1]`` -> any shape; ``[N]``, ``[1, N]`` or ``[M, 1]`` -> ``[M, N]``."""
        return self.apply("broadcast_to", x, shape=shape)

    def col_sum(self, x: NodeId) -> NodeId:
        """Sum over rows: ``[M, N] -> [N]`` (the gradient of a bias)."""
        return self.apply("col_sum", x)

    def row_sum(self, x: NodeId) -> NodeId:
        """Sum over each row: ``[M, N] -> [M, 1]``."""
        return self.apply("row_sum", x)

    def zeros(self, shape: Sequence[Dim]) -> NodeId:
        """An F32 tensor of zeros (no gradient)."""
        return self.apply("zeros", shape=shape)
