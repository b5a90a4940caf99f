"""Ops that produce indices (U32), for decoding on the device.

- ``argmax``: the index of the largest value of each row of x ``[..., n]`` -> U32 ``[...]`` (the
  first one on ties, as ``numpy.argmax`` and ONNX ``ArgMax``), e.g. a greedy decode step's next
  token from its logits.
- ``add_u32``: U32 ``x + offset`` (an int attribute; modulo 2**32), e.g. a decode step's next
  position from its ``kv_pos``.
- ``put_u32``: U32 ``buffer [B, n]`` with ``buffer[b, min(index[b], n - 1)] = value[b]``, e.g. a log
  of the tokens a run of greedy steps chose, each at its position (the index is clamped, so no
  index writes outside the buffer).

All three lower to standard ONNX (``ArgMax``, ``Add`` in int64 as ONNX Runtime's CPU ``Add`` takes no
uint32, ``ScatterElements``; cast to uint32). With a session's ``feedback`` (:func:`meganeura_onnx.build_inference_session`)
their outputs become the next step's ``input_ids`` and ``kv_pos`` without a trip through the host.
Neither is differentiable.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import DType, NodeId, TensorType
from .table import examples, f32, int_attr, op, require, u32

argmax = op("argmax", ("x",), differentiable=False)
add_u32 = op("add_u32", ("x",), u32=("x",), attrs=(int_attr("offset", 0, (1 << 32) - 1),), differentiable=False)
put_u32 = op("put_u32", ("buffer", "index", "value"), u32=("buffer", "index", "value"), differentiable=False)


@argmax.shape
def _(x: TensorType) -> TensorType:
    f32("argmax", x, "x")
    require(len(x.shape) >= 1, "argmax", f"x must have at least one dimension, got {list(x.shape)}")
    n = x.shape[-1]
    require(not isinstance(n, int) or n >= 1, "argmax", f"x's last dimension must not be empty, got {list(x.shape)}")
    return TensorType(tuple(x.shape[:-1]) or (1,), DType.U32)


@argmax.numpy
def _(x):
    out = np.argmax(x, axis=-1).astype(np.uint32)
    return out.reshape(x.shape[:-1] or (1,))


@argmax.onnx
def _(ctx, node, x):
    index = ctx.op("ArgMax", x, axis=-1, keepdims=0, select_last_index=0)
    if len(ctx.graph.node(node.inputs[0]).ty.shape) == 1:  # a vector's argmax is a scalar: keep it [1]
        index = ctx.reshape(index, [1])
    return ctx.cast(index, TensorProto.UINT32)


@add_u32.shape
def _(x: TensorType, *, offset: int) -> TensorType:
    u32("add_u32", x, "x")
    return x


add_u32.numpy(lambda x, *, offset: ((x.astype(np.uint64) + offset) % (1 << 32)).astype(np.uint32))


@add_u32.onnx
def _(ctx, node, x):
    offset = ctx.const(np.array([node.attrs["offset"]], np.int64), np.int64, "offset")
    wide = ctx.op("Add", ctx.cast(x, TensorProto.INT64), offset)
    return ctx.cast(wide, TensorProto.UINT32)  # int64 -> uint32 keeps the low 32 bits: modulo 2**32


@put_u32.shape
def _(buffer: TensorType, index: TensorType, value: TensorType) -> TensorType:
    for arg, t in (("buffer", buffer), ("index", index), ("value", value)):
        u32("put_u32", t, arg)
    shape = list(buffer.shape)
    require(len(shape) == 2 and isinstance(shape[1], int), "put_u32", f"buffer must be [B, n] with a static n, got {shape}")
    rows = buffer.shape[0]
    for arg, t in (("index", index), ("value", value)):
        require(
            list(t.shape) == [rows], "put_u32", f"{arg} must be [{rows}] (one per row of buffer {list(buffer.shape)}), got {list(t.shape)}"
        )
    return buffer


@put_u32.numpy
def _(buffer, index, value):
    out = buffer.copy()
    out[np.arange(buffer.shape[0]), np.minimum(index.astype(np.int64), buffer.shape[1] - 1)] = value
    return out


@put_u32.onnx
def _(ctx, node, buffer, index, value):
    last = ctx.graph.node(node.inputs[0]).ty.shape[1] - 1
    column = ctx.op("Min", ctx.cast(index, TensorProto.INT64), ctx.ints([last]))
    return ctx.op("ScatterElements", buffer, ctx.reshape(column, [-1, 1]), ctx.reshape(value, [-1, 1]), axis=1)


examples(argmax, lambda g, f, shape: g.argmax(f.input(g, "x", shape, -3, 3)), {"shape": [3, 50]}, {"shape": [7]}, {"shape": [2, 2, 5]})
examples(
    add_u32,
    lambda g, f, shape, offset: g.add_u32(f.u32(g, "x", shape, 1000), offset),
    {"shape": [1], "offset": 1},
    {"shape": [4], "offset": 7},
)
examples(
    put_u32,
    lambda g, f, rows, width: g.put_u32(
        f.u32(g, "buffer", [rows, width], 1000), f.u32(g, "index", [rows], width + 2), f.u32(g, "value", [rows], 1000)
    ),
    {"rows": 1, "width": 6},
    {"rows": 4, "width": 3},
)


class IndexBuilders:
    def argmax(self, x: NodeId) -> NodeId:
        """U32 index of the largest value of each row of x ``[..., n]`` (the first on ties) ->
        ``[...]`` (``[1]`` for a vector), e.g. the greedy next token from logits."""
        return self.apply("argmax", x)

    def add_u32(self, x: NodeId, offset: int) -> NodeId:
        """U32 ``x + offset`` modulo 2**32 (``offset`` in ``[0, 2**32)``), e.g. the next position."""
        return self.apply("add_u32", x, offset=offset)

    def put_u32(self, buffer: NodeId, index: NodeId, value: NodeId) -> NodeId:
        """U32 ``buffer [B, n]`` with ``value[b]`` written at column ``min(index[b], n - 1)`` of row b."""
        return self.apply("put_u32", buffer, index, value)
