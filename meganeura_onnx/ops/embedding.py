"""Embedding lookup (ONNX Gather) and its transpose ``scatter_add`` (``com.meganeura.ScatterAdd``)."""

from __future__ import annotations

import numpy as np

from ..ir import Dim, NodeId, TensorType
from .lowering import CUSTOM_DOMAIN, function_body
from .onnx_util import dim, dims
from .table import CustomOp, Position, TensorArg, examples, int_attr, op, rank, require

# Token ids are row indices: sessions check them on upload (positions), so ScatterAdd's CUDA kernel
# need not read them back (check_positions=0 in the graphs a Session builds).
embedding = op("embedding", ("indices", "table"), u32=("indices",), positions=(Position("indices", within="table"),))
NUM_ROWS = int_attr("num_rows", 1, doc="rows of the output (the table size)")
scatter_add = op(
    "scatter_add",
    ("indices", "src"),
    u32=("indices",),
    attrs=(NUM_ROWS,),
    custom=CustomOp("ScatterAdd", (TensorArg("indices", "index"), TensorArg("src")), (TensorArg("out"),), (NUM_ROWS,)),
    positions=(Position("indices", below="num_rows"),),
)


def _check_indices(name: str, idx: np.ndarray, rows: int) -> None:
    if idx.size and int(idx.max()) >= rows:
        raise ValueError(f"{name}: index {int(idx.max())} out of range for {rows} rows")


def _index_rows(name: str, indices: TensorType) -> Dim:
    """Indices are ``[S]`` or ``[B, S]`` (token ids of B sequences, e.g. ``["batch", "seq"]``): B*S rows."""
    require(indices.rank() in (1, 2), name, f"indices must be 1-D [S] or 2-D [B, S], got shape {list(indices.shape)}")
    return indices.elements()


@embedding.shape
def _(indices: TensorType, table: TensorType) -> TensorType:
    rows = _index_rows("embedding", indices)
    rank("embedding", table, 2, "table")
    return TensorType((rows, table.shape[1]))


@embedding.numpy
def _(indices, table):
    _check_indices("embedding", indices, table.shape[0])
    return table[indices.reshape(-1).astype(np.int64)]


def _flat_indices(ctx, node, idx: str) -> str:
    idx = ctx.to_int64(idx)
    return ctx.reshape(idx, [-1]) if ctx.input_types(node)[0].rank() == 2 else idx


embedding.onnx(lambda ctx, node, idx, table: ctx.op("Gather", table, _flat_indices(ctx, node, idx), axis=0))


@scatter_add.shape
def _(indices: TensorType, src: TensorType, *, num_rows: int) -> TensorType:
    rows = _index_rows("scatter_add", indices)
    rank("scatter_add", src, 2, "src")
    require(
        rows == src.shape[0],
        "scatter_add",
        f"indices {list(indices.shape)} must hold one index per row of src {list(src.shape)}",
    )
    return TensorType((num_rows, src.shape[1]))


@scatter_add.numpy
def _(indices, src, *, num_rows):
    _check_indices("scatter_add", indices, num_rows)
    out = np.zeros((num_rows, src.shape[1]), dtype=src.dtype)
    np.add.at(out, indices.reshape(-1).astype(np.int64), src)
    return out


@scatter_add.function_body
def scatter_add_function(opset: int):
    def body(ctx, indices, src):
        rows = ctx.attr_ref("num_rows", "int")
        zeros = ctx.op("ConstantOfShape", dims(ctx, rows, dim(ctx, src, 1)), value=_zero())
        return ctx.op("ScatterND", zeros, ctx.op("Unsqueeze", indices, ctx.ints([1])), src, reduction="add")

    return function_body(scatter_add.custom, body, opset)


def _zero():
    from onnx import numpy_helper

    return numpy_helper.from_array(np.zeros(1, dtype=np.float32))


@scatter_add.onnx
def _(ctx, node, indices, src):
    ctx.use_function(scatter_add_function(ctx.opset))
    return ctx.op("ScatterAdd", _flat_indices(ctx, node, indices), src, domain=CUSTOM_DOMAIN, num_rows=node.attrs["num_rows"])


# Embedding and scatter_add are each other's transpose; the U32 indices get no gradient.
embedding.vjp(lambda g, node, dy: [None, g.scatter_add(node.inputs[0], dy, g.node(node.inputs[1]).ty.shape[0])])
scatter_add.vjp(lambda g, node, dy: [None, g.embedding(node.inputs[0], dy)])

examples(
    embedding,
    lambda g, f, s, v, d: g.embedding(f.u32(g, "indices", [s], v), f.param(g, "table", [v, d])),
    {"s": 6, "v": 10, "d": 4},
    {"s": 3, "v": 2, "d": 7},
)
examples(
    scatter_add,
    lambda g, f, n, rows, d: g.scatter_add(f.u32(g, "indices", [n], rows), f.param(g, "src", [n, d]), rows),
    {"n": 12, "rows": 4, "d": 3},
    {"n": 3, "rows": 9, "d": 5},
)


class EmbeddingBuilders:
    def embedding(self, indices: NodeId, table: NodeId) -> NodeId:
        """Rows of table ``[V, D]`` picked by U32 indices ``[S]`` -> ``[S, D]`` (indices ``[B, S]``
        -> ``[B*S, D]``: the rows of B sequences, one after the other)."""
        return self.apply("embedding", indices, table)

    def scatter_add(self, indices: NodeId, src: NodeId, num_rows: int) -> NodeId:
        """``out[indices[i]] += src[i]`` into zeros ``[num_rows, D]``; duplicates accumulate."""
        return self.apply("scatter_add", indices, src, num_rows=num_rows)
