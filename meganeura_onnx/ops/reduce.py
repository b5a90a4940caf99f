"""Reductions, row softmax and the four losses (losses return shape [1])."""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .table import examples, op, rank, same_shape

SCALAR = TensorType((1,))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _to_scalar(ctx, x: str) -> str:
    return ctx.reshape(x, [1])


sum_all = op("sum_all", ("x",))
sum_all.shape(lambda x: SCALAR)
sum_all.numpy(lambda x: np.sum(x).reshape(1))
sum_all.onnx(lambda ctx, node, x: _to_scalar(ctx, ctx.op("ReduceSum", x, keepdims=0)))

mean_all = op("mean_all", ("x",))
mean_all.shape(lambda x: SCALAR)
mean_all.numpy(lambda x: np.mean(x).reshape(1))
mean_all.onnx(lambda ctx, node, x: _to_scalar(ctx, ctx.op("ReduceMean", x, keepdims=0)))

for _d in (sum_all, mean_all):
    examples(_d, lambda g, f, shape, _n=_d.name: g._emit(_n, f.param(g, "x", shape)), {"shape": [4, 3]}, {"shape": [2, 3, 5]})


def _rowwise(name: str, ref, onnx_type: str):
    d = op(name, ("x",))

    @d.shape
    def _(x: TensorType) -> TensorType:
        rank(name, x, 2, "x")
        return x

    d.numpy(ref)
    d.onnx(lambda ctx, node, x: ctx.op(onnx_type, x, axis=-1))
    examples(
        d, lambda g, f, rows, cols: g._emit(name, f.param(g, "x", [rows, cols], -3, 3)), {"rows": 3, "cols": 7}, {"rows": 5, "cols": 2}
    )
    return d


_rowwise("softmax", lambda x: np.exp(_log_softmax(x)), "Softmax")
_rowwise("log_softmax", _log_softmax, "LogSoftmax")


def _loss(name: str, pred: str, target: str, ref, lower, pred_range=(-2, 2), target_range=(0, 1), rank2: bool = False):
    d = op(name, (pred, target))

    @d.shape
    def _(p: TensorType, t: TensorType) -> TensorType:
        if rank2:
            rank(name, p, 2, pred)
        same_shape(name, p, t, (pred, target))
        return SCALAR

    d.numpy(lambda p, t: np.asarray(ref(p, t), dtype=p.dtype).reshape(1))
    d.onnx(lambda ctx, node, p, t: _to_scalar(ctx, lower(ctx, node, p, t)))

    def ex(g, f, shape):
        return g._emit(name, f.param(g, pred, shape, *pred_range), f.input(g, target, shape, *target_range))

    examples(d, ex, {"shape": [4, 3]}, {"shape": [2, 10]})
    return d


def _ce_lower(ctx, node, logits, labels):
    batch = ctx.input_types(node)[0].shape[0]
    prod = ctx.op("Mul", labels, ctx.op("LogSoftmax", logits, axis=-1))
    return ctx.op("Mul", ctx.op("ReduceSum", prod, keepdims=0), ctx.const(-1.0 / batch))


def _ce_ref(logits, labels):
    return -(labels * _log_softmax(logits)).sum() / logits.shape[0]


ce = _loss("cross_entropy_loss", "logits", "labels", _ce_ref, _ce_lower, rank2=True)


def _bce_lower(ctx, node, p, t):
    one = ctx.const(1.0)
    pos = ctx.op("Mul", t, ctx.op("Log", p))
    negative = ctx.op("Mul", ctx.op("Sub", one, t), ctx.op("Log", ctx.op("Sub", one, p)))
    return ctx.op("Neg", ctx.op("ReduceMean", ctx.op("Add", pos, negative), keepdims=0))


_loss("bce_loss", "pred", "labels", lambda p, t: -np.mean(t * np.log(p) + (1 - t) * np.log(1 - p)), _bce_lower, pred_range=(0.05, 0.95))


def _mse_lower(ctx, node, p, t):
    d = ctx.op("Sub", p, t)
    return ctx.op("ReduceMean", ctx.op("Mul", d, d), keepdims=0)


_loss("mse_loss", "pred", "target", lambda p, t: np.mean((p - t) ** 2), _mse_lower, target_range=(-2, 2))
_loss(
    "l1_loss",
    "pred",
    "target",
    lambda p, t: np.mean(np.abs(p - t)),
    lambda ctx, node, p, t: ctx.op("ReduceMean", ctx.op("Abs", ctx.op("Sub", p, t)), keepdims=0),
    target_range=(-2, 2),
)


class ReduceBuilders:
    def sum_all(self, x: NodeId) -> NodeId:
        """Sum of every element -> ``[1]``."""
        return self._emit("sum_all", x)

    def mean_all(self, x: NodeId) -> NodeId:
        """Mean of every element -> ``[1]``."""
        return self._emit("mean_all", x)

    def softmax(self, x: NodeId) -> NodeId:
        """Numerically stable softmax of each row of a 2-D ``[batch, features]`` tensor."""
        return self._emit("softmax", x)

    def log_softmax(self, x: NodeId) -> NodeId:
        """Numerically stable log-softmax of each row of a 2-D tensor."""
        return self._emit("log_softmax", x)

    def cross_entropy_loss(self, logits: NodeId, labels: NodeId) -> NodeId:
        """``-(1/B) sum_b sum_c labels[b,c] * log_softmax(logits)[b,c]``; both ``[B, C]``; -> ``[1]``."""
        return self._emit("cross_entropy_loss", logits, labels)

    def bce_loss(self, pred: NodeId, labels: NodeId) -> NodeId:
        """Binary cross-entropy ``-mean(t log p + (1 - t) log(1 - p))``; pred in (0, 1); -> ``[1]``."""
        return self._emit("bce_loss", pred, labels)

    def mse_loss(self, pred: NodeId, target: NodeId) -> NodeId:
        """``mean((pred - target)^2)`` -> ``[1]``."""
        return self._emit("mse_loss", pred, target)

    def l1_loss(self, pred: NodeId, target: NodeId) -> NodeId:
        """``mean(|pred - target|)`` -> ``[1]``."""
        return self._emit("l1_loss", pred, target)
