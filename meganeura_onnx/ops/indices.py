"""Ops that produce indices (U32), for decoding on the device.

- ``argmax``: the index of the largest value of each row of x ``[..., n]`` -> U32 ``[...]`` (the
  first one on ties, as ``numpy.argmax`` and ONNX ``ArgMax``), e.g. a greedy decode step's next
  token from its logits.
- ``add_u32``: U32 ``x + offset`` (an int attribute; modulo 2**32), e.g. a decode step's next
  position from its ``kv_pos``.

Both lower to standard ONNX (``ArgMax`` and ``Add`` in int64, cast to uint32; ONNX Runtime's CPU
``Add`` takes no uint32). With a session's ``feedback`` (:func:`meganeura_onnx.build_inference_session`)
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


examples(argmax, lambda g, f, shape: g.argmax(f.input(g, "x", shape, -3, 3)), {"shape": [3, 50]}, {"shape": [7]}, {"shape": [2, 2, 5]})
examples(
    add_u32,
    lambda g, f, shape, offset: g.add_u32(f.u32(g, "x", shape, 1000), offset),
    {"shape": [1], "offset": 1},
    {"shape": [4], "offset": 7},
)


class IndexBuilders:
    def argmax(self, x: NodeId) -> NodeId:
        """U32 index of the largest value of each row of x ``[..., n]`` (the first on ties) ->
        ``[...]`` (``[1]`` for a vector), e.g. the greedy next token from logits."""
        return self.apply("argmax", x)

    def add_u32(self, x: NodeId, offset: int) -> NodeId:
        """U32 ``x + offset`` modulo 2**32 (``offset`` in ``[0, 2**32)``), e.g. the next position."""
        return self.apply("add_u32", x, offset=offset)
