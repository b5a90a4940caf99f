"""Ops that produce indices (U32), for decoding on the device.

- ``argmax``: the index of the largest value of each row of x ``[..., n]`` -> U32 ``[...]`` (the
  first one on ties, as ``numpy.argmax`` and ONNX ``ArgMax``), e.g. a greedy decode step's next
  token from its logits.
- ``add_u32``: U32 ``x + offset`` (an int attribute; modulo 2**32), e.g. a decode step's next
  position from its ``kv_pos``.
- ``put_u32``: U32 ``buffer [B, n]`` with ``buffer[b, min(index[b], n - 1)] = value[b]``, e.g. a log
  of the tokens a run of greedy steps chose, each at its position (the index is clamped, so no
  index writes outside the buffer).
- ``greedy_step``: the three of a greedy decode step at once: ``token = argmax(logits)``,
  ``next_pos = add_u32(kv_pos, 1)``, ``next_log = put_u32(token_log, next_pos, token)``
  (``com.meganeura.GreedyStep``: one kernel, where the three lowered to standard ONNX are ten nodes
  with their casts; the logits may be float16 / bfloat16).

The first three lower to standard ONNX (``ArgMax``, ``Add`` in int64 as ONNX Runtime's CPU ``Add`` takes
no uint32, ``ScatterElements``; cast to uint32); ``greedy_step``'s function body is that composition.
With a session's ``feedback`` (:func:`meganeura_onnx.build_inference_session`) their outputs become the
next step's ``input_ids`` and ``kv_pos`` without a trip through the host. None is differentiable.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import DType, NodeId, TensorType
from .lowering import CUSTOM_DOMAIN, function_body
from .table import CustomOp, TensorArg, examples, f32, int_attr, op, require, u32

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


def _argmax_onnx(ctx, x: str, vector: bool) -> str:
    # ONNX ArgMax passes over NaN (its comparisons are false); numpy.argmax, the reference, stops at the
    # first NaN: where a row has one, its first NaN's index.
    nan = ctx.cast(ctx.op("IsNaN", x), TensorProto.FLOAT)
    first_nan = ctx.op("ArgMax", nan, axis=-1, keepdims=0, select_last_index=0)
    has_nan = ctx.cast(ctx.op("ReduceMax", nan, ctx.ints([-1]), keepdims=0), TensorProto.BOOL)
    index = ctx.op("Where", has_nan, first_nan, ctx.op("ArgMax", x, axis=-1, keepdims=0, select_last_index=0))
    if vector:  # a vector's argmax is a scalar: keep it [1]
        index = ctx.reshape(index, [1])
    return ctx.cast(index, TensorProto.UINT32)


@argmax.onnx
def _(ctx, node, x):
    return _argmax_onnx(ctx, x, len(ctx.graph.node(node.inputs[0]).ty.shape) == 1)


@add_u32.shape
def _(x: TensorType, *, offset: int) -> TensorType:
    u32("add_u32", x, "x")
    return x


add_u32.numpy(lambda x, *, offset: ((x.astype(np.uint64) + offset) % (1 << 32)).astype(np.uint32))


def _add_u32_onnx(ctx, x: str, offset: int) -> str:
    wide = ctx.op("Add", ctx.cast(x, TensorProto.INT64), ctx.const(np.array([offset], np.int64), np.int64, "offset"))
    return ctx.cast(wide, TensorProto.UINT32)  # int64 -> uint32 keeps the low 32 bits: modulo 2**32


@add_u32.onnx
def _(ctx, node, x):
    return _add_u32_onnx(ctx, x, node.attrs["offset"])


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


def _put_u32_onnx(ctx, buffer: str, index: str, value: str, last: str) -> str:
    column = ctx.op("Min", ctx.cast(index, TensorProto.INT64), last)
    return ctx.op("ScatterElements", buffer, ctx.reshape(column, [-1, 1]), ctx.reshape(value, [-1, 1]), axis=1)


@put_u32.onnx
def _(ctx, node, buffer, index, value):
    return _put_u32_onnx(ctx, buffer, index, value, ctx.ints([ctx.graph.node(node.inputs[0]).ty.shape[1] - 1]))


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


# A greedy decode step's argmax, next position and token log as one com.meganeura.GreedyStep kernel (the
# three ops above lower to ten ONNX nodes, casts included, each a launch on a GPU). Three IR nodes, one
# per output (``index``), share their inputs; the lowering emits the ONNX node once.
greedy_step = op(
    "greedy_step",
    ("logits", "kv_pos", "token_log"),
    u32=("kv_pos", "token_log"),
    differentiable=False,
    attrs=(int_attr("index", 0, 2, doc="which output this node is: 0 next_token, 1 next_pos, 2 next_log"),),
    custom=CustomOp(
        "GreedyStep",
        (TensorArg("logits"), TensorArg("kv_pos", "uint32"), TensorArg("token_log", "uint32")),
        (TensorArg("next_token", "uint32"), TensorArg("next_pos", "uint32"), TensorArg("next_log", "uint32")),
    ),
    half_types=frozenset({"float16", "bfloat16"}),
)


@greedy_step.shape
def _(logits: TensorType, kv_pos: TensorType, token_log: TensorType, *, index: int) -> TensorType:
    f32("greedy_step", logits, "logits")
    u32("greedy_step", kv_pos, "kv_pos")
    u32("greedy_step", token_log, "token_log")
    rows, shape = logits.shape[0] if len(logits.shape) == 2 else None, list(logits.shape)
    require(rows is not None and isinstance(shape[1], int) and shape[1] >= 1, "greedy_step", f"logits must be [B, vocab], got {shape}")
    require(
        list(kv_pos.shape) == [rows], "greedy_step", f"kv_pos must be [{rows}] (one per row of logits {shape}), got {list(kv_pos.shape)}"
    )
    log = list(token_log.shape)
    require(len(log) == 2 and log[0] == rows and isinstance(log[1], int), "greedy_step", f"token_log must be [{rows}, n], got {log}")
    return token_log if index == 2 else kv_pos


def greedy_step_ref(logits: np.ndarray, kv_pos: np.ndarray, token_log: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(next_token, next_pos, next_log) of one greedy step, as argmax, add_u32 and put_u32 compute them."""
    token = np.argmax(logits, axis=-1).astype(np.uint32)
    pos = ((kv_pos.astype(np.uint64) + 1) % (1 << 32)).astype(np.uint32)
    log = token_log.copy()
    log[np.arange(log.shape[0]), np.minimum(pos.astype(np.int64), log.shape[1] - 1)] = token
    return token, pos, log


greedy_step.numpy(lambda logits, kv_pos, token_log, *, index: greedy_step_ref(logits, kv_pos, token_log)[index])


@greedy_step.function_body
def greedy_step_function(opset: int):
    def body(ctx, logits, kv_pos, token_log):
        # float32 first (exact for float16 / bfloat16): ONNX Runtime's CPU ArgMax has no bfloat16 kernel
        token, pos = _argmax_onnx(ctx, ctx.cast(logits, TensorProto.FLOAT), False), _add_u32_onnx(ctx, kv_pos, 1)
        last = ctx.op("Sub", ctx.op("Gather", ctx.op("Shape", token_log), ctx.ints([1])), ctx.ints([1]))
        return [token, pos, _put_u32_onnx(ctx, token_log, pos, token, last)]

    return function_body(greedy_step.custom, body, opset)


@greedy_step.onnx
def _(ctx, node, logits, kv_pos, token_log):
    def emit():
        ctx.use_function(greedy_step_function(ctx.opset))
        return ctx.op("GreedyStep", logits, kv_pos, token_log, domain=CUSTOM_DOMAIN, outputs=3)

    return ctx.shared_node(("GreedyStep", logits, kv_pos, token_log), emit)[node.attrs["index"]]


def _greedy_step_example(g, f, rows, vocab, width, index):
    logits = f.input(g, "logits", [rows, vocab], -3, 3)
    return g.apply("greedy_step", logits, f.u32(g, "kv_pos", [rows], width + 2), f.u32(g, "token_log", [rows, width], 1000), index=index)


examples(
    greedy_step,
    _greedy_step_example,
    {"rows": 1, "vocab": 50, "width": 6, "index": 0},
    {"rows": 3, "vocab": 7, "width": 4, "index": 1},
    {"rows": 4, "vocab": 33, "width": 3, "index": 2},
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

    def greedy_step(self, logits: NodeId, kv_pos: NodeId, token_log: NodeId) -> tuple[NodeId, NodeId, NodeId]:
        """A greedy decode step in one op: ``(argmax(logits), add_u32(kv_pos, 1), put_u32(token_log,
        kv_pos + 1, argmax(logits)))`` for logits ``[B, vocab]``, kv_pos U32 ``[B]``, token_log U32 ``[B, n]``."""
        return tuple(self.apply("greedy_step", logits, kv_pos, token_log, index=k) for k in range(3))
