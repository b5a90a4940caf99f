"""Elementwise ops: binary arithmetic, row broadcasts and the unary activations."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from ..ir import NodeId, TensorType
from .table import Feeds, examples, op, rank, require, same_shape

SHAPES = ({"shape": [3, 5]}, {"shape": [2, 3, 4]})


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # stable for large |x|


_erf = np.vectorize(math.erf, otypes=[np.float64])  # numpy has no erf; references need not be fast


def _gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(x.dtype)


def _gelu_onnx(ctx, x: str) -> str:
    # The exact (erf) GELU that BERT uses; ORT fuses this pattern into its Gelu kernel.
    inner = ctx.op("Erf", ctx.op("Mul", x, ctx.const(1.0 / math.sqrt(2.0))))
    return ctx.op("Mul", ctx.op("Mul", x, ctx.const(0.5)), ctx.op("Add", inner, ctx.const(1.0)))


# -- binary, identical shapes ---------------------------------------------------------------------
def _binary(name: str, np_fn, onnx_type: str) -> None:
    d = op(name, ("a", "b"))
    d.shape(lambda a, b: same_shape(name, a, b))
    d.numpy(lambda a, b: np_fn(a, b))
    d.onnx(lambda ctx, node, a, b: ctx.op(onnx_type, a, b))

    def ex(g, f: Feeds, shape):
        return g._emit(name, f.param(g, "a", shape), f.param(g, "b", shape, 0.5, 2.0))

    examples(d, ex, *SHAPES)


_binary("add", np.add, "Add")
_binary("mul", np.multiply, "Mul")
_binary("div", np.divide, "Div")

greater = op("greater", ("a", "b"), differentiable=False)
greater.shape(lambda a, b: same_shape("greater", a, b))
greater.numpy(lambda a, b: (a > b).astype(a.dtype))
greater.onnx(lambda ctx, node, a, b: ctx.cast(ctx.op("Greater", a, b), TensorProto.FLOAT))
examples(greater, lambda g, f, shape: g.greater(f.param(g, "a", shape), f.param(g, "b", shape)), *SHAPES)

swiglu = op("swiglu", ("gate", "up"))
swiglu.shape(lambda gate, up: same_shape("swiglu", gate, up, ("gate", "up")))
swiglu.numpy(lambda gate, up: gate * _sigmoid(gate) * up)


@swiglu.onnx
def _(ctx, node, gate, up):
    return ctx.op("Mul", ctx.op("Mul", gate, ctx.op("Sigmoid", gate)), up)


examples(swiglu, lambda g, f, shape: g.swiglu(f.param(g, "gate", shape, -3, 3), f.param(g, "up", shape)), *SHAPES)


# -- row broadcasts -------------------------------------------------------------------------------
def _row_broadcast(name: str, bias_shape) -> None:
    d = op(name, ("x", "bias"))

    @d.shape
    def _(x: TensorType, b: TensorType) -> TensorType:
        rank(name, x, 2, "x")
        want = bias_shape(x.shape[1])
        require(b.shape == want, name, f"bias must have shape {list(want)} for x {list(x.shape)}, got {list(b.shape)}")
        return x

    d.numpy(lambda x, b: x + b.reshape(1, -1))
    d.onnx(lambda ctx, node, x, b: ctx.op("Add", x, b))

    def ex(g, f: Feeds, rows, cols):
        return g._emit(name, f.param(g, "x", [rows, cols]), f.param(g, "bias", list(bias_shape(cols))))

    examples(d, ex, {"rows": 3, "cols": 5}, {"rows": 7, "cols": 2})


_row_broadcast("bias_add", lambda n: (n,))
_row_broadcast("broadcast_add", lambda n: (1, n))


# -- unary ----------------------------------------------------------------------------------------
UNARY = {
    # name: (numpy reference, ONNX lowering, input range for the examples)
    "relu": (lambda x: np.maximum(x, 0), lambda ctx, x: ctx.op("Relu", x), (-1, 1)),
    "sigmoid": (_sigmoid, lambda ctx, x: ctx.op("Sigmoid", x), (-4, 4)),
    "neg": (np.negative, lambda ctx, x: ctx.op("Neg", x), (-1, 1)),
    "abs": (np.abs, lambda ctx, x: ctx.op("Abs", x), (-1, 1)),
    "log": (np.log, lambda ctx, x: ctx.op("Log", x), (0.1, 3)),
    "recip": (np.reciprocal, lambda ctx, x: ctx.op("Reciprocal", x), (0.5, 2)),
    "silu": (lambda x: x * _sigmoid(x), lambda ctx, x: ctx.op("Mul", x, ctx.op("Sigmoid", x)), (-4, 4)),
    "exp": (np.exp, lambda ctx, x: ctx.op("Exp", x), (-2, 2)),
    "tanh": (np.tanh, lambda ctx, x: ctx.op("Tanh", x), (-2, 2)),
    "sqrt": (np.sqrt, lambda ctx, x: ctx.op("Sqrt", x), (0.1, 3)),
    "gelu": (_gelu, _gelu_onnx, (-4, 4)),
}

for _name, (_ref, _lower, (_lo, _hi)) in UNARY.items():
    _d = op(_name, ("x",))
    _d.shape(lambda x: x)
    _d.numpy(_ref)
    _d.onnx(lambda ctx, node, x, _lower=_lower: _lower(ctx, x))
    examples(_d, lambda g, f, shape, _n=_name, _lo=_lo, _hi=_hi: g._emit(_n, f.param(g, "x", shape, _lo, _hi)), *SHAPES)


class ElementwiseBuilders:
    def add(self, a: NodeId, b: NodeId) -> NodeId:
        """Elementwise ``a + b``; identical shapes."""
        return self._emit("add", a, b)

    def mul(self, a: NodeId, b: NodeId) -> NodeId:
        """Elementwise ``a * b``; identical shapes."""
        return self._emit("mul", a, b)

    def div(self, a: NodeId, b: NodeId) -> NodeId:
        """Elementwise ``a / b`` (Meganeura: ``mul(a, recip(b))``); identical shapes."""
        return self._emit("div", a, b)

    def greater(self, a: NodeId, b: NodeId) -> NodeId:
        """1.0 where ``a > b`` else 0.0; identical shapes; no gradient."""
        return self._emit("greater", a, b)

    def bias_add(self, x: NodeId, bias: NodeId) -> NodeId:
        """``x [M, N] + bias [N]`` broadcast over rows."""
        return self._emit("bias_add", x, bias)

    def broadcast_add(self, x: NodeId, b: NodeId) -> NodeId:
        """``x [M, N] + b [1, N]`` broadcast over rows."""
        return self._emit("broadcast_add", x, b)

    def relu(self, x: NodeId) -> NodeId:
        """``max(0, x)``."""
        return self._emit("relu", x)

    def sigmoid(self, x: NodeId) -> NodeId:
        """``1 / (1 + exp(-x))``."""
        return self._emit("sigmoid", x)

    def neg(self, x: NodeId) -> NodeId:
        """``-x``."""
        return self._emit("neg", x)

    def abs(self, x: NodeId) -> NodeId:
        """``|x|``."""
        return self._emit("abs", x)

    def log(self, x: NodeId) -> NodeId:
        """Natural logarithm."""
        return self._emit("log", x)

    def recip(self, x: NodeId) -> NodeId:
        """``1 / x``."""
        return self._emit("recip", x)

    def silu(self, x: NodeId) -> NodeId:
        """``x * sigmoid(x)``."""
        return self._emit("silu", x)

    def exp(self, x: NodeId) -> NodeId:
        """``e ** x`` (Meganeura extra)."""
        return self._emit("exp", x)

    def tanh(self, x: NodeId) -> NodeId:
        """Hyperbolic tangent (Meganeura extra)."""
        return self._emit("tanh", x)

    def sqrt(self, x: NodeId) -> NodeId:
        """Square root (extra, used by gradients and norms)."""
        return self._emit("sqrt", x)

    def gelu(self, x: NodeId) -> NodeId:
        """Exact GELU ``0.5 * x * (1 + erf(x / sqrt(2)))`` (BERT's ``hidden_act="gelu"``; Meganeura extra)."""
        return self._emit("gelu", x)

    def swiglu(self, gate: NodeId, up: NodeId) -> NodeId:
        """``silu(gate) * up``; identical shapes."""
        return self._emit("swiglu", gate, up)
