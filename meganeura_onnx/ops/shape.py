"""Shape plumbing the gradient rules need: reshape, row/column sums, broadcasts and zeros, and the
2-D concatenation ``cat`` with its inverse ``split``.

They are ordinary ops of the table (shape rule, numpy reference, ONNX lowering, VJP, examples),
so user programs may call them too. The reductions and broadcasts come in transposed pairs:
``col_sum``/``row_sum``/``sum_all`` are the VJPs of ``broadcast_to`` and the other way round; so are
``cat`` and ``split``.

``split`` is a multi-output op in a one-output IR: one IR node per piece with an ``index``
attribute, the nodes of one split sharing their input, ``axis`` and ``sizes``; the lowering emits
one ONNX ``Split`` for them all (as ``adam_update`` does), and autodiff gives the pieces' gradients
to the input as ONE ``cat`` (``OpDef.group_vjp``) instead of a zero-padded tensor per piece and
their sum. ``transforms.merge_projections`` uses the pair to run products that share their left
operand as one product.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import numpy_helper

from ..ir import Dim, NodeId, TensorType, dim_prod
from .table import examples, int_attr, op, rank, require, same_dim, shape_attr, static_dim

SHAPE = (shape_attr("shape", symbolic=True),)
reshape = op("reshape", ("x",), attrs=SHAPE)
broadcast_to = op("broadcast_to", ("x",), attrs=SHAPE)
col_sum = op("col_sum", ("x",))
row_sum = op("row_sum", ("x",))
zeros = op("zeros", (), differentiable=False, attrs=SHAPE)
AXIS = int_attr("axis", 0, 1, doc="0: rows, 1: columns")
cat = op("cat", (), variadic=("x",), attrs=(AXIS,))
split = op(
    "split",
    ("x",),
    attrs=(AXIS, shape_attr("sizes", doc="the pieces' static sizes along axis"), int_attr("index", 0, doc="which piece this node is")),
)


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


def _pieces_shape(rows_or_cols: Dim, sizes: Sequence[int], axis: int) -> list[tuple[Dim, Dim]]:
    return [(s, rows_or_cols) if axis == 0 else (rows_or_cols, s) for s in sizes]


@cat.shape
def _(*xs: TensorType, axis: int) -> TensorType:
    keep = 1 - axis  # the axis every operand must agree on
    for k, x in enumerate(xs):
        rank("cat", x, 2, f"x{k}")
        same_dim("cat", x.shape[keep], xs[0].shape[keep], f"x{k} {list(x.shape)} and x0 {list(xs[0].shape)} differ in dimension {keep}")
    total = sum(static_dim("cat", x, axis, f"x{k}") for k, x in enumerate(xs))
    return TensorType(_pieces_shape(xs[0].shape[keep], [total], axis)[0])


cat.numpy(lambda *xs, axis: np.concatenate(xs, axis=axis))
cat.onnx(lambda ctx, node, *xs: ctx.op("Concat", *xs, axis=node.attrs["axis"]))


@cat.vjp
def _(g, node, dy):
    axis = node.attrs["axis"]
    sizes = [g.node(x).ty.shape[axis] for x in node.inputs]
    return g.split(dy, sizes, axis)


@split.shape
def _(x: TensorType, *, axis: int, sizes: tuple[int, ...], index: int) -> TensorType:
    rank("split", x, 2, "x")
    width = static_dim("split", x, axis, "x")
    require(sum(sizes) == width, "split", f"sizes {list(sizes)} must add up to x's dimension {axis} ({width}), got {sum(sizes)}")
    require(index < len(sizes), "split", f"index must be in [0, {len(sizes)}) for {len(sizes)} sizes, got {index}")
    return TensorType(_pieces_shape(x.shape[1 - axis], sizes, axis)[index])


split.numpy(lambda x, *, axis, sizes, index: np.split(x, np.cumsum(sizes)[:-1], axis=axis)[index].copy())


@split.onnx
def _(ctx, node, x):
    a = node.attrs

    def emit():
        return ctx.op("Split", x, ctx.ints(list(a["sizes"])), axis=a["axis"], outputs=len(a["sizes"]))

    return ctx.shared_node(("Split", x, a["axis"], a["sizes"]), emit)[a["index"]]


def _split_input_gradient(g, x: NodeId, axis: int, sizes: Sequence[int], dys: Sequence[NodeId | None]) -> NodeId:
    """The gradient of a split's input from its pieces' gradients (``None``: a piece with none)."""
    rows_or_cols = g.node(x).ty.shape[1 - axis]
    parts = [g.zeros(list(shape)) if dy is None else dy for dy, shape in zip(dys, _pieces_shape(rows_or_cols, sizes, axis), strict=True)]
    return parts[0] if len(parts) == 1 else g.cat(parts, axis)


@split.group_vjp
def _split_group_vjp(g, nodes, dys):
    a = nodes[0].attrs
    by_index: dict[int, NodeId] = {}
    for n, dy in zip(nodes, dys, strict=True):
        k = n.attrs["index"]
        if dy is not None:  # two nodes of one piece (a graph built without sharing): their gradients add
            by_index[k] = dy if k not in by_index else g.add(by_index[k], dy)
    return [_split_input_gradient(g, nodes[0].inputs[0], a["axis"], a["sizes"], [by_index.get(k) for k in range(len(a["sizes"]))])]


split.vjp(lambda g, node, dy: _split_group_vjp(g, [node], [dy]))  # one piece alone: zeros beside its gradient


def _ex_cat(g, f, m, widths, axis):
    return g.cat([f.param(g, f"x{k}", [m, w] if axis == 1 else [w, m]) for k, w in enumerate(widths)], axis)


def _ex_split(g, f, m, sizes, axis, index):
    x = f.param(g, "x", [m, sum(sizes)] if axis == 1 else [sum(sizes), m])
    return g.split(x, sizes, axis)[index]


examples(cat, _ex_cat, {"m": 3, "widths": (4, 2, 2), "axis": 1}, {"m": 5, "widths": (3, 1), "axis": 0}, {"m": 2, "widths": (3,), "axis": 1})
examples(
    split,
    _ex_split,
    {"m": 3, "sizes": (4, 2, 2), "axis": 1, "index": 1},
    {"m": 5, "sizes": (3, 1), "axis": 0, "index": 1},
    {"m": 2, "sizes": (2, 5), "axis": 1, "index": 0},
)


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

    def cat(self, xs: Sequence[NodeId], axis: int) -> NodeId:
        """2-D tensors joined along ``axis`` (0: rows stacked, 1: columns side by side); their
        other dimension must agree and their sizes along ``axis`` must be static."""
        return self.apply("cat", *xs, axis=axis)

    def split(self, x: NodeId, sizes: Sequence[int], axis: int) -> list[NodeId]:
        """The inverse of :meth:`cat`: ``x`` [M, N] cut along ``axis`` into pieces of the static
        ``sizes`` (which add up to its dimension ``axis``); one node per piece, one ONNX ``Split``."""
        return [self.apply("split", x, axis=axis, sizes=tuple(sizes), index=k) for k in range(len(sizes))]
