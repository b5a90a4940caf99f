"""Index-label cross entropy: ``sparse_cross_entropy_loss`` and its gradient op.

Labels are U32 class indices ``[rows]`` (token ids for a language model), not one-hot rows: a
one-hot ``[2048, 49152]`` label tensor is 400 MB per batch. The loss is the mean over the rows
whose label is not ``ignore_index``; when every row is ignored the loss is 0 and so is its
gradient (a batch of padding trains nothing; it never produces NaN).

Both directions are one fused kernel each (``com.meganeura``, CPU and CUDA, logits in float32,
float16 or bfloat16 with float32 math):

- ``SparseCrossEntropy(logits, labels) -> (loss_rows, lse)``: per row its log-sum-exp and its loss
  term ``lse - logits[label]`` (0 for an ignored row), both float32 ``[rows]``. The graph sums the
  terms and divides by the number of counted rows (``max(count, 1)``): the loss is a ``[1]`` float32.
- ``SparseCrossEntropyGrad(logits, labels, lse, scale) -> dlogits``: ``(exp(logits - lse) -
  onehot(label)) * scale`` in one pass over the logits, with ``scale = dloss / max(count, 1)``
  (computed by the graph) and 0 for an ignored row. Nothing of size ``[rows, vocab]`` is kept
  between the two but the logits themselves: the forward keeps only the ``[rows]`` log-sum-exp.

The Graph IR has one output per node, so as with ``flash_attention`` the forward is declared with a
``part`` attribute (0: the loss, 1: the log-sum-exp); the VJP creates part 1 and both lower to the
same ONNX node. The ONNX attribute ``ignore_index`` is -1 when no label is ignored (labels are
U32, so -1 matches none). Without our kernel library the nodes run their function bodies
(ReduceLogSumExp + GatherElements; Exp + ScatterElements), which compute the same functions.

A counted label ``>= vocab`` is an error: the numpy reference and the CPU kernel raise (an ORT
error status naming the row and the label), the function bodies fail in GatherElements /
ScatterElements. The CUDA kernels cannot return a status without a sync, so they guard on the
device instead: the row's loss term, log-sum-exp and gradient row are NaN (the loss turns NaN,
visible), and nothing is read or written out of bounds.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import NodeId, TensorType
from .lowering import CUSTOM_DOMAIN, function_body
from .table import CustomOp, TensorArg, examples, int_attr, op, optional, rank, require

SCALAR = TensorType((1,))
U32_MAX = 2**32 - 1

IGNORE_INDEX = optional(int_attr("ignore_index", 0, U32_MAX, doc="a U32 label whose rows count for nothing"))
ONNX_IGNORE = int_attr("ignore_index", -1, U32_MAX, doc="the label whose rows count for nothing; -1: none (labels are >= 0)")
HALF = frozenset({"float16", "bfloat16"})

sparse_ce = op(
    "sparse_cross_entropy_loss",
    ("logits", "labels"),
    u32=("labels",),
    attrs=(IGNORE_INDEX, optional(int_attr("part", 0, 1, doc="0: the loss, 1: the log-sum-exp of each row"), 0)),
    custom=CustomOp(
        "SparseCrossEntropy",
        (TensorArg("logits"), TensorArg("labels", "index")),
        (TensorArg("loss_rows", "float32"), TensorArg("lse", "float32")),
        (ONNX_IGNORE,),
    ),
    half_types=HALF,
)
sparse_ce_grad = op(
    "sparse_cross_entropy_grad",
    ("logits", "labels", "lse", "dy"),
    u32=("labels",),
    differentiable=False,
    attrs=(IGNORE_INDEX,),
    custom=CustomOp(
        "SparseCrossEntropyGrad",
        (TensorArg("logits"), TensorArg("labels", "index"), TensorArg("lse", "float32"), TensorArg("scale", "float32")),
        (TensorArg("dlogits"),),
        (ONNX_IGNORE,),
    ),
    half_types=HALF,
)


def _check(name: str, logits: TensorType, labels: TensorType, ignore_index: int | None) -> None:
    rank(name, logits, 2, "logits")
    rank(name, labels, 1, "labels")
    require(
        labels.shape[0] == logits.shape[0],
        name,
        f"labels {list(labels.shape)} must have one class index per row of logits {list(logits.shape)}",
    )
    if ignore_index is not None and (
        isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not 0 <= ignore_index <= U32_MAX
    ):
        raise ValueError(f"{name}: ignore_index must be None or an int in [0, 2**32) (labels are U32), got {ignore_index!r}")


@sparse_ce.shape
def _(logits: TensorType, labels: TensorType, *, ignore_index: int | None = None, part: int = 0) -> TensorType:
    _check("sparse_cross_entropy_loss", logits, labels, ignore_index)
    return SCALAR if part == 0 else TensorType((logits.shape[0],))


@sparse_ce_grad.shape
def _(logits: TensorType, labels: TensorType, lse: TensorType, dy: TensorType, *, ignore_index: int | None = None) -> TensorType:
    name = "sparse_cross_entropy_grad"
    _check(name, logits, labels, ignore_index)
    require(lse.shape == labels.shape, name, f"lse must be [rows] {list(labels.shape)} (one per row of logits), got {list(lse.shape)}")
    require(dy.shape == (1,), name, f"dy must be the [1] upstream gradient, got {list(dy.shape)}")
    return logits


def _counted(name: str, logits: np.ndarray, labels: np.ndarray, ignore_index: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """(mask of counted rows, their labels as int64 with ignored rows set to 0, count)."""
    labels = labels.astype(np.int64)
    mask = np.ones(labels.shape, bool) if ignore_index is None else labels != ignore_index
    if mask.any() and int(labels[mask].max()) >= logits.shape[1]:
        raise ValueError(f"{name}: label {int(labels[mask].max())} out of range for {logits.shape[1]} classes")
    return mask, np.where(mask, labels, 0), int(mask.sum())


def log_sum_exp(x: np.ndarray) -> np.ndarray:
    """Per row of ``x [rows, C]``: ``log(sum(exp(x)))``, computed from the row max (float64 inside)."""
    x = x.astype(np.float64)
    m = x.max(axis=-1)
    return m + np.log(np.exp(x - m[:, None]).sum(axis=-1))


@sparse_ce.numpy
def _(logits, labels, *, ignore_index=None, part=0):
    mask, safe, count = _counted("sparse_cross_entropy_loss", logits, labels, ignore_index)
    lse = log_sum_exp(logits)
    if part == 1:
        return lse.astype(logits.dtype)
    nll = lse - logits[np.arange(len(safe)), safe]
    return np.asarray([(nll * mask).sum() / max(count, 1)], dtype=logits.dtype)


@sparse_ce_grad.numpy
def _(logits, labels, lse, dy, *, ignore_index=None):
    mask, safe, count = _counted("sparse_cross_entropy_grad", logits, labels, ignore_index)
    grad = np.exp(logits.astype(np.float64) - lse.astype(np.float64)[:, None])
    grad[np.arange(len(safe)), safe] -= 1.0
    return (grad * (mask[:, None] * dy.reshape(()) / max(count, 1))).astype(logits.dtype)


# -- function bodies (standard ONNX; what runs without the kernel library) ----------------------------
def _body_labels(ctx, labels: str) -> tuple[str, str]:
    """(int64 labels [rows, 1] with ignored rows set to 0, float mask [rows] of the counted rows)."""
    labels64 = ctx.to_int64(labels)
    keep = ctx.op("Not", ctx.op("Equal", labels64, ctx.attr_ref("ignore_index", "int")))
    safe = ctx.op("Where", keep, labels64, ctx.const(0, np.int64))
    return ctx.op("Unsqueeze", safe, ctx.ints([1])), ctx.cast(keep, TensorProto.FLOAT)


@sparse_ce.function_body
def sparse_cross_entropy_function(opset: int):
    def body(ctx, logits, labels):
        col, mask = _body_labels(ctx, labels)
        # ReduceLogSumExp subtracts the row max inside ORT's kernel; it has a gradient in
        # onnxruntime-training's builder too (the artifacts path inlines this body).
        lse = ctx.op("ReduceLogSumExp", logits, ctx.ints([1]), keepdims=1)  # [rows, 1]
        picked = ctx.op("GatherElements", logits, col, axis=1)  # [rows, 1]
        rows = ctx.op("Mul", ctx.op("Squeeze", ctx.op("Sub", lse, picked), ctx.ints([1])), mask)
        return [rows, ctx.op("Squeeze", lse, ctx.ints([1]))]

    return function_body(sparse_ce.custom, body, opset)


@sparse_ce_grad.function_body
def sparse_cross_entropy_grad_function(opset: int):
    def body(ctx, logits, labels, lse, scale):
        col, mask = _body_labels(ctx, labels)
        probs = ctx.op("Exp", ctx.op("Sub", logits, ctx.op("Unsqueeze", lse, ctx.ints([1]))))
        minus_one = ctx.op("Expand", ctx.const([[-1.0]]), ctx.op("Shape", col))
        grad = ctx.op("ScatterElements", probs, col, minus_one, axis=1, reduction="add")
        return ctx.op("Mul", grad, ctx.op("Unsqueeze", ctx.op("Mul", mask, scale), ctx.ints([1])))  # [rows, 1] scale

    return function_body(sparse_ce_grad.custom, body, opset)


# -- lowering -----------------------------------------------------------------------------------------
def _onnx_ignore(node) -> int:
    ignore = node.attrs.get("ignore_index")
    return -1 if ignore is None else int(ignore)


def _count(ctx, labels: str, ignore: int) -> str:
    """``max(count of counted rows, 1)`` as a [1] float (the rows may be a symbolic dim)."""
    if ignore < 0:
        return ctx.cast(ctx.op("Shape", labels), TensorProto.FLOAT)
    keep = ctx.op("Not", ctx.op("Equal", ctx.to_int64(labels), ctx.const([ignore], np.int64)))
    total = ctx.op("ReduceSum", ctx.cast(keep, TensorProto.FLOAT), ctx.ints([0]), keepdims=1)
    return ctx.op("Max", total, ctx.const([1.0]))


@sparse_ce.onnx
def _(ctx, node, logits, labels):
    ignore = _onnx_ignore(node)

    def emit():
        ctx.use_function(sparse_cross_entropy_function(ctx.opset))
        return ctx.op("SparseCrossEntropy", logits, labels, domain=CUSTOM_DOMAIN, outputs=2, ignore_index=ignore)

    rows, lse = ctx.shared_node(("SparseCrossEntropy", logits, labels, ignore), emit)
    if node.attrs.get("part", 0) == 1:
        return lse
    total = ctx.op("ReduceSum", rows, ctx.ints([0]), keepdims=1)  # [1]
    return ctx.op("Div", total, _count(ctx, labels, ignore))


@sparse_ce_grad.onnx
def _(ctx, node, logits, labels, lse, dy):
    ignore = _onnx_ignore(node)
    ctx.use_function(sparse_cross_entropy_grad_function(ctx.opset))
    scale = ctx.op("Div", dy, _count(ctx, labels, ignore))  # [1]
    return ctx.op("SparseCrossEntropyGrad", logits, labels, lse, scale, domain=CUSTOM_DOMAIN, ignore_index=ignore)


@sparse_ce.vjp
def _(g, node, dy):
    a = dict(node.attrs)
    if a.pop("part", 0) != 0:
        raise ValueError("sparse_cross_entropy_loss: the log-sum-exp output (part=1) has no gradient; differentiate the loss (part=0)")
    logits, labels = node.inputs
    lse = g.apply("sparse_cross_entropy_loss", logits, labels, **a, part=1)  # the same ONNX node as the loss: no recompute
    return [g.apply("sparse_cross_entropy_grad", logits, labels, lse, dy, **a), None]


# -- examples -----------------------------------------------------------------------------------------
def _labels(f, g, rows: int, classes: int, ignore_index: int | None, ignored: int) -> NodeId:
    lab = f.u32(g, "labels", [rows], classes)
    if ignore_index is not None:  # some rows (or all) carry the ignored label
        f.inputs["labels"][:ignored] = ignore_index
    return lab


def _ex_loss(g, f, rows, classes, ignore_index=None, ignored=0):
    logits = f.param(g, "logits", [rows, classes], -3, 3)
    return g.sparse_cross_entropy_loss(logits, _labels(f, g, rows, classes, ignore_index, ignored), ignore_index=ignore_index)


def _ex_grad(g, f, rows, classes, ignore_index=None, ignored=0):
    logits = f.param(g, "logits", [rows, classes], -3, 3)
    lab = _labels(f, g, rows, classes, ignore_index, ignored)
    lse = f.input(g, "lse", [rows])
    data = {**f.inputs, **f.params}["logits"]  # an input when the rows are symbolic
    f.inputs["lse"] = log_sum_exp(data).astype(np.float32)  # what the forward hands over
    dy = f.input(g, "dy", [1], 0.5, 2.0)
    return g.apply("sparse_cross_entropy_grad", logits, lab, lse, dy, ignore_index=ignore_index)


_VARIANTS = (
    {"rows": 4, "classes": 3},
    {"rows": 6, "classes": 11, "ignore_index": U32_MAX, "ignored": 2},  # an ignored label past the class range
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
        its gradient is 0 (never NaN). A counted label ``>= C`` is an error (on CUDA: a NaN loss).
        One fused kernel each way: the forward keeps each row's log-sum-exp, the backward computes
        ``softmax - onehot`` from it in one pass over the logits.
        """
        return self.apply("sparse_cross_entropy_loss", logits, labels, ignore_index=ignore_index)
