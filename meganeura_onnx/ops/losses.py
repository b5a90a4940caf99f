"""Index-label cross entropy: ``sparse_cross_entropy_loss`` and its gradient op.

Labels are U32 class indices ``[rows]`` (token ids for a language model), not one-hot rows: a
one-hot ``[2048, 49152]`` label tensor is 400 MB per batch. The loss is the mean over the rows
whose label is not ``ignore_index``; when every row is ignored the loss is 0 and so is its
gradient (a batch of padding trains nothing; it never produces NaN).

The forward lowers to LogSoftmax + GatherElements (the label's log-probability per row), summed over
the counted rows and divided by their number (measured faster on ORT's CPU provider than its
SoftmaxCrossEntropyLoss kernel). The backward is its own op
(``sparse_cross_entropy_grad``: softmax minus the label's one-hot, masked and scaled), lowered to
Softmax + ScatterElements so no one-hot tensor is ever built.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import NodeId, TensorType
from .table import examples, int_attr, op, optional, rank, require

SCALAR = TensorType((1,))

IGNORE_INDEX = (optional(int_attr("ignore_index", 0, 2**32 - 1, doc="a U32 label whose rows count for nothing")),)
sparse_ce = op("sparse_cross_entropy_loss", ("logits", "labels"), u32=("labels",), attrs=IGNORE_INDEX)
sparse_ce_grad = op("sparse_cross_entropy_grad", ("logits", "labels", "dy"), u32=("labels",), differentiable=False, attrs=IGNORE_INDEX)


def _check(name: str, logits: TensorType, labels: TensorType, ignore_index: int | None) -> None:
    rank(name, logits, 2, "logits")
    rank(name, labels, 1, "labels")
    require(
        labels.shape[0] == logits.shape[0],
        name,
        f"labels {list(labels.shape)} must have one class index per row of logits {list(logits.shape)}",
    )
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not 0 <= ignore_index < 2**32):
        raise ValueError(f"{name}: ignore_index must be None or an int in [0, 2**32) (labels are U32), got {ignore_index!r}")


@sparse_ce.shape
def _(logits: TensorType, labels: TensorType, *, ignore_index: int | None = None) -> TensorType:
    _check("sparse_cross_entropy_loss", logits, labels, ignore_index)
    return SCALAR


@sparse_ce_grad.shape
def _(logits: TensorType, labels: TensorType, dy: TensorType, *, ignore_index: int | None = None) -> TensorType:
    _check("sparse_cross_entropy_grad", logits, labels, ignore_index)
    require(dy.shape == (1,), "sparse_cross_entropy_grad", f"dy must be the [1] upstream gradient, got {list(dy.shape)}")
    return logits


def _counted(name: str, logits: np.ndarray, labels: np.ndarray, ignore_index: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """(mask of counted rows, their labels as int64 with ignored rows set to 0, count)."""
    labels = labels.astype(np.int64)
    mask = np.ones(labels.shape, bool) if ignore_index is None else labels != ignore_index
    if mask.any() and int(labels[mask].max()) >= logits.shape[1]:
        raise ValueError(f"{name}: label {int(labels[mask].max())} out of range for {logits.shape[1]} classes")
    return mask, np.where(mask, labels, 0), int(mask.sum())


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@sparse_ce.numpy
def _(logits, labels, *, ignore_index=None):
    mask, safe, count = _counted("sparse_cross_entropy_loss", logits, labels, ignore_index)
    nll = -_log_softmax(logits)[np.arange(len(safe)), safe]
    return np.asarray([(nll * mask).sum() / max(count, 1)], dtype=logits.dtype)


@sparse_ce_grad.numpy
def _(logits, labels, dy, *, ignore_index=None):
    mask, safe, count = _counted("sparse_cross_entropy_grad", logits, labels, ignore_index)
    grad = np.exp(_log_softmax(logits))
    grad[np.arange(len(safe)), safe] -= 1.0
    return (grad * (mask[:, None] * dy.reshape(()) / max(count, 1))).astype(logits.dtype)


def _mask_and_count(ctx, labels64: str, ignore_index: int | None) -> tuple[str | None, str]:
    """(float mask [rows] or None when nothing is ignored, max(count, 1) as a [1] float).

    The row count is read from the labels' shape at run time (the rows may be a symbolic dim)."""
    if ignore_index is None:
        return None, ctx.cast(ctx.op("Shape", labels64), TensorProto.FLOAT)
    keep = ctx.op("Not", ctx.op("Equal", labels64, ctx.const([ignore_index], np.int64)))
    mask = ctx.cast(keep, TensorProto.FLOAT)
    count = ctx.op("Max", ctx.op("ReduceSum", mask, ctx.ints([0]), keepdims=1), ctx.const([1.0]))
    return mask, count


@sparse_ce.onnx
def _(ctx, node, logits, labels):
    # LogSoftmax + GatherElements: on ORT's CPU provider twice as fast as its SoftmaxCrossEntropyLoss
    # kernel ([512, 8192]: 30-42 ms vs 54-79 ms per call on the shared 2-core VM).
    ignore = node.attrs.get("ignore_index")
    labels64 = ctx.to_int64(labels)
    mask, count = _mask_and_count(ctx, labels64, ignore)
    safe = labels64 if mask is None else ctx.op("Where", ctx.cast(mask, TensorProto.BOOL), labels64, ctx.const([0], np.int64))
    picked = ctx.op("GatherElements", ctx.op("LogSoftmax", logits, axis=-1), ctx.op("Unsqueeze", safe, ctx.ints([1])), axis=1)
    picked = ctx.reshape(picked, [-1])  # [rows]
    if mask is not None:
        picked = ctx.op("Mul", picked, mask)
    total = ctx.op("ReduceSum", picked, ctx.ints([0]), keepdims=1)  # [1]
    return ctx.op("Neg", ctx.op("Div", total, count))


@sparse_ce_grad.onnx
def _(ctx, node, logits, labels, dy):
    ignore = node.attrs.get("ignore_index")
    labels64 = ctx.to_int64(labels)
    mask, count = _mask_and_count(ctx, labels64, ignore)
    safe = labels64 if mask is None else ctx.op("Where", ctx.cast(mask, TensorProto.BOOL), labels64, ctx.const([0], np.int64))
    col = ctx.op("Unsqueeze", safe, ctx.ints([1]))
    minus_one = ctx.op("ConstantOfShape", ctx.op("Shape", col), value=_minus_one())
    grad = ctx.op("ScatterElements", ctx.op("Softmax", logits, axis=-1), col, minus_one, axis=1, reduction="add")
    scale = ctx.op("Div", dy, count)  # [1]
    if mask is not None:
        scale = ctx.op("Unsqueeze", ctx.op("Mul", mask, scale), ctx.ints([1]))  # [rows, 1]
    return ctx.op("Mul", grad, scale)


def _minus_one():
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array([-1.0], np.float32))


@sparse_ce.vjp
def _(g, node, dy):
    logits, labels = node.inputs
    return [g.apply("sparse_cross_entropy_grad", logits, labels, dy, **node.attrs), None]


def _labels(f, g, rows: int, classes: int, ignore_index: int | None, ignored: int) -> NodeId:
    lab = f.u32(g, "labels", [rows], classes)
    if ignore_index is not None:  # some rows (not all) carry the ignored label
        f.inputs["labels"][:ignored] = ignore_index
    return lab


def _ex_loss(g, f, rows, classes, ignore_index=None, ignored=0):
    logits = f.param(g, "logits", [rows, classes], -3, 3)
    return g.sparse_cross_entropy_loss(logits, _labels(f, g, rows, classes, ignore_index, ignored), ignore_index=ignore_index)


def _ex_grad(g, f, rows, classes, ignore_index=None, ignored=0):
    logits = f.param(g, "logits", [rows, classes], -3, 3)
    dy = f.input(g, "dy", [1], 0.5, 2.0)
    lab = _labels(f, g, rows, classes, ignore_index, ignored)
    return g.apply("sparse_cross_entropy_grad", logits, lab, dy, ignore_index=ignore_index)


_VARIANTS = (
    {"rows": 4, "classes": 3},
    {"rows": 6, "classes": 11, "ignore_index": 4294967295, "ignored": 2},  # an ignored label past the class range
    {"rows": 5, "classes": 7, "ignore_index": 2, "ignored": 5},  # every row ignored: loss 0, gradient 0
    {"rows": 3, "classes": 5, "ignore_index": 1, "ignored": 1},  # an ignored label inside the class range
)
examples(sparse_ce, _ex_loss, *_VARIANTS)
examples(sparse_ce_grad, _ex_grad, *_VARIANTS)


class LossBuilders:
    def sparse_cross_entropy_loss(self, logits: NodeId, labels: NodeId, ignore_index: int | None = None) -> NodeId:
        """Cross entropy with class-index labels: ``logits [R, C]`` F32, ``labels [R]`` U32 -> ``[1]``.

        ``mean over counted rows r of -log_softmax(logits)[r, labels[r]]``; a row whose label equals
        ``ignore_index`` is not counted (e.g. padding). When every row is ignored the loss is 0 and
        its gradient is 0 (never NaN). A counted label ``>= C`` is an error.
        """
        return self.apply("sparse_cross_entropy_loss", logits, labels, ignore_index=ignore_index)
