"""Reductions, row softmax and the four losses (losses return shape [1])."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import Dim, NodeId, TensorType
from .elementwise import mean_scale
from .table import examples, op, rank, same_shape, times_upstream

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

sum_all.vjp(lambda g, node, dy: [g.broadcast_to(dy, g.node(node.inputs[0]).ty.shape)])


@mean_all.vjp
def _(g, node, dy):
    ty = g.node(node.inputs[0]).ty
    return [mean_scale(g, g.broadcast_to(dy, ty.shape), 1.0, ty.elements())]


for _d in (sum_all, mean_all):
    examples(_d, lambda g, f, shape, _n=_d.name: g.apply(_n, f.param(g, "x", shape)), {"shape": [4, 3]}, {"shape": [2, 3, 5]})


def _rowwise(name: str, ref, onnx_type: str):
    d = op(name, ("x",))

    @d.shape
    def _(x: TensorType) -> TensorType:
        rank(name, x, 2, "x")
        return x

    d.numpy(ref)
    d.onnx(lambda ctx, node, x: ctx.op(onnx_type, x, axis=-1))
    examples(
        d, lambda g, f, rows, cols: g.apply(name, f.param(g, "x", [rows, cols], -3, 3)), {"rows": 3, "cols": 7}, {"rows": 5, "cols": 2}
    )
    return d


softmax = _rowwise("softmax", lambda x: np.exp(_log_softmax(x)), "Softmax")
log_softmax = _rowwise("log_softmax", _log_softmax, "LogSoftmax")


def _rows(g, v: NodeId, like: NodeId) -> NodeId:
    """A ``[M, 1]`` per-row value repeated across the columns of ``like``."""
    return g.broadcast_to(v, g.node(like).ty.shape)


@softmax.vjp
def _(g, node, dy):
    y = node.id  # dx = y * (dy - sum_row(dy * y))
    return [g.mul(y, g.sub(dy, _rows(g, g.row_sum(g.mul(dy, y)), y)))]


@log_softmax.vjp
def _(g, node, dy):
    y = node.id  # dx = dy - softmax(x) * sum_row(dy)
    return [g.sub(dy, g.mul(g.exp(y), _rows(g, g.row_sum(dy), y)))]


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
        return g.apply(name, f.param(g, pred, shape, *pred_range), f.input(g, target, shape, *target_range))

    examples(d, ex, {"shape": [4, 3]}, {"shape": [2, 10]})
    return d


def _ce_lower(ctx, node, logits, labels):
    batch = ctx.input_types(node)[0].shape[0]
    prod = ctx.op("Mul", labels, ctx.op("LogSoftmax", logits, axis=-1))
    total = ctx.op("ReduceSum", prod, keepdims=0)
    if isinstance(batch, int):
        return ctx.op("Mul", total, ctx.const(-1.0 / batch))
    return ctx.op("Neg", ctx.op("Div", total, ctx.cast(ctx.size(batch), TensorProto.FLOAT)))  # a symbolic batch, read at run time


def _ce_ref(logits, labels):
    return -(labels * _log_softmax(logits)).sum() / logits.shape[0]


ce = _loss("cross_entropy_loss", "logits", "labels", _ce_ref, _ce_lower, rank2=True)


@ce.vjp
def _(g, node, dy):
    logits, labels = node.inputs
    batch = g.node(logits).ty.shape[0]
    # Meganeura's form (labels need not sum to 1): (softmax * rowsum(labels) - labels) / B
    dlogits = mean_scale(g, g.sub(g.mul(g.softmax(logits), _rows(g, g.row_sum(labels), labels)), labels), 1.0, batch)
    dlabels = mean_scale(g, g.log_softmax(logits), -1.0, batch)
    return [times_upstream(g, dlogits, dy), times_upstream(g, dlabels, dy)]


def _bce_lower(ctx, node, p, t):
    one = ctx.const(1.0)
    pos = ctx.op("Mul", t, ctx.op("Log", p))
    negative = ctx.op("Mul", ctx.op("Sub", one, t), ctx.op("Log", ctx.op("Sub", one, p)))
    return ctx.op("Neg", ctx.op("ReduceMean", ctx.op("Add", pos, negative), keepdims=0))


bce = _loss(
    "bce_loss", "pred", "labels", lambda p, t: -np.mean(t * np.log(p) + (1 - t) * np.log(1 - p)), _bce_lower, pred_range=(0.05, 0.95)
)


def _count(g, node) -> Dim:
    return g.node(node.inputs[0]).ty.elements()


@bce.vjp
def _(g, node, dy):
    p, t = node.inputs
    one_minus_p = g.affine(p, -1.0, 1.0)
    dp = mean_scale(g, g.div(g.sub(p, t), g.mul(p, one_minus_p)), 1.0, _count(g, node))  # (p - t) / (p (1 - p)) / n
    dt = mean_scale(g, g.sub(g.log(one_minus_p), g.log(p)), 1.0, _count(g, node))
    return [times_upstream(g, dp, dy), times_upstream(g, dt, dy)]


def _mse_lower(ctx, node, p, t):
    d = ctx.op("Sub", p, t)
    return ctx.op("ReduceMean", ctx.op("Mul", d, d), keepdims=0)


mse = _loss("mse_loss", "pred", "target", lambda p, t: np.mean((p - t) ** 2), _mse_lower, target_range=(-2, 2))
l1 = _loss(
    "l1_loss",
    "pred",
    "target",
    lambda p, t: np.mean(np.abs(p - t)),
    lambda ctx, node, p, t: ctx.op("ReduceMean", ctx.op("Abs", ctx.op("Sub", p, t)), keepdims=0),
    target_range=(-2, 2),
)


@mse.vjp
def _(g, node, dy):
    dp = times_upstream(g, mean_scale(g, g.sub(*node.inputs), 2.0, _count(g, node)), dy)
    return [dp, g.neg(dp)]


@l1.vjp
def _(g, node, dy):
    dp = times_upstream(g, mean_scale(g, g.sign(g.sub(*node.inputs)), 1.0, _count(g, node)), dy)
    return [dp, g.neg(dp)]


class ReduceBuilders:
    def sum_all(self, x: NodeId) -> NodeId:
        """Sum of every element -> ``[1]``."""
        return self.apply("sum_all", x)

    def mean_all(self, x: NodeId) -> NodeId:
        """Mean of every element -> ``[1]``."""
        return self.apply("mean_all", x)

    def softmax(self, x: NodeId) -> NodeId:
        """Numerically stable softmax of each row of a 2-D ``[batch, features]`` tensor."""
        return self.apply("softmax", x)

    def log_softmax(self, x: NodeId) -> NodeId:
        """Numerically stable log-softmax of each row of a 2-D tensor."""
        return self.apply("log_softmax", x)

    def cross_entropy_loss(self, logits: NodeId, labels: NodeId) -> NodeId:
        """``-(1/B) sum_b sum_c labels[b,c] * log_softmax(logits)[b,c]``; both ``[B, C]``; -> ``[1]``."""
        return self.apply("cross_entropy_loss", logits, labels)

    def bce_loss(self, pred: NodeId, labels: NodeId) -> NodeId:
        """Binary cross-entropy ``-mean(t log p + (1 - t) log(1 - p))``; pred in (0, 1); -> ``[1]``."""
        return self.apply("bce_loss", pred, labels)

    def mse_loss(self, pred: NodeId, target: NodeId) -> NodeId:
        """``mean((pred - target)^2)`` -> ``[1]``."""
        return self.apply("mse_loss", pred, target)

    def l1_loss(self, pred: NodeId, target: NodeId) -> NodeId:
        """``mean(|pred - target|)`` -> ``[1]``."""
        return self.apply("l1_loss", pred, target)
