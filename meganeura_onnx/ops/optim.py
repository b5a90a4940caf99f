"""The fused Adam/AdamW update of every parameter: ONE ``com.meganeura.AdamUpdate`` node.

Decomposed into standard ONNX, Adam costs about 13 elementwise nodes per parameter, each a full
pass over the tensor (52 of the MNIST MLP's 93 train-step nodes). ``AdamUpdate`` takes the six
``[1]`` hyper-parameters and, per parameter ``i``, ``p_i, g_i, m_i, v_i`` (variadic inputs), and
returns ``p_i', m_i', v_i'`` (variadic outputs, in that order per parameter): one kernel, one pass
over each tensor. Without our kernel library the node runs its model-local function body, which
is exactly the decomposed update (``transforms/optimizer.py``'s formula, PyTorch's).

The Graph IR has one output per node, so the op is declared as ``adam_update`` with attributes
``index`` (which parameter) and ``part`` (0: the parameter, 1: m, 2: v; ints, as string
attributes would read as symbolic dims): the 3N nodes of one
update share their inputs, and the lowering emits the single ONNX node once (the first of them)
and hands every node its own output of it.

Formula (``step`` counts from 1; ``weight_decay`` 0 gives Adam, p * 1.0 is exact):
    bc1 = 1 - beta1^step, bc2 = 1 - beta2^step
    m' = beta1 m + (1 - beta1) g;  v' = beta2 v + (1 - beta2) g^2
    p' = p (1 - lr wd) - (m' / (sqrt(v') / sqrt(bc2) + eps)) * (lr / bc1)
"""

from __future__ import annotations

import numpy as np

from ..ir import TensorType
from .lowering import CUSTOM_DOMAIN, function_body
from .table import CustomOp, TensorArg, int_attr, op, require

HYPER = ("lr", "beta1", "beta2", "eps", "step", "weight_decay")
PARTS = (0, 1, 2)  # p', m', v'
PER_TENSOR = ("p", "g", "m", "v")

adam_update = op(
    "adam_update",
    HYPER,
    variadic=PER_TENSOR,
    differentiable=False,
    attrs=(int_attr("index", 0, doc="which parameter"), int_attr("part", 0, 2, doc="0: p', 1: m', 2: v'")),
    custom=CustomOp(
        "AdamUpdate",
        tuple(TensorArg(h) for h in HYPER),
        (),
        variadic_inputs=tuple(TensorArg(t) for t in PER_TENSOR),
        variadic_outputs=(TensorArg("p_next"), TensorArg("m_next"), TensorArg("v_next")),
    ),
)


@adam_update.shape
def _(*types: TensorType, index: int, part: int) -> TensorType:
    name = "adam_update"
    for h, t in zip(HYPER, types, strict=False):
        require(t.shape == (1,), name, f"{h} must be a [1] tensor, got {list(t.shape)}")
    tensors = types[len(HYPER) :]
    require(
        len(types) > len(HYPER) and len(tensors) % 4 == 0,
        name,
        f"takes 6 hyper-parameters then (p, g, m, v) per parameter, got {len(types)} inputs",
    )
    n = len(tensors) // 4
    require(isinstance(index, int) and 0 <= index < n, name, f"index must be in [0, {n}), got {index!r}")
    require(part in PARTS, name, f"part must be one of {PARTS}, got {part!r}")
    for k in range(n):
        shapes = [tensors[4 * k + j].shape for j in range(4)]
        require(len(set(shapes)) == 1, name, f"p, g, m, v of parameter {k} must have one shape, got {[list(s) for s in shapes]}")
    return tensors[4 * index]


def _update(hyper, p, g, m, v):
    lr, b1, b2, eps, step, wd = (np.asarray(h).reshape(()) for h in hyper)
    bc1, bc2 = 1 - np.exp(step * np.log(b1)), 1 - np.exp(step * np.log(b2))
    m2 = m * b1 + g * (1 - b1)
    v2 = v * b2 + (g * g) * (1 - b2)
    p2 = p * (1 - lr * wd) - (m2 / (np.sqrt(v2) / np.sqrt(bc2) + eps)) * (lr / bc1)
    return p2, m2, v2


@adam_update.numpy
def _(*values, index, part):
    hyper, tensors = values[: len(HYPER)], values[len(HYPER) :]
    out = _update(hyper, *tensors[4 * index : 4 * index + 4])
    return np.asarray(out[part], dtype=tensors[0].dtype)


@adam_update.function_body
def adam_update_function(opset: int, n: int = 1):
    """The decomposed update as a model-local function for ``n`` parameters (this model's arity)."""

    def body(ctx, *names):
        lr, b1, b2, eps, step, wd = names[: len(HYPER)]
        one = ctx.const([1.0])
        bc1 = ctx.op("Sub", one, ctx.op("Exp", ctx.op("Mul", step, ctx.op("Log", b1))))
        bc2 = ctx.op("Sub", one, ctx.op("Exp", ctx.op("Mul", step, ctx.op("Log", b2))))
        step_size = ctx.op("Div", lr, bc1)
        inv_sqrt_bc2 = ctx.op("Reciprocal", ctx.op("Sqrt", bc2))
        decay = ctx.op("Sub", one, ctx.op("Mul", lr, wd))
        one_minus_b1, one_minus_b2 = ctx.op("Sub", one, b1), ctx.op("Sub", one, b2)
        outs = []
        for k in range(n):
            p, g, m, v = names[len(HYPER) + 4 * k : len(HYPER) + 4 * k + 4]
            m2 = ctx.op("Add", ctx.op("Mul", m, b1), ctx.op("Mul", g, one_minus_b1))
            v2 = ctx.op("Add", ctx.op("Mul", v, b2), ctx.op("Mul", ctx.op("Mul", g, g), one_minus_b2))
            denom = ctx.op("Add", ctx.op("Mul", ctx.op("Sqrt", v2), inv_sqrt_bc2), eps)
            p2 = ctx.op("Sub", ctx.op("Mul", p, decay), ctx.op("Mul", ctx.op("Div", m2, denom), step_size))
            outs += [p2, m2, v2]
        return outs

    return function_body(adam_update.custom, body, opset, arity=n)


@adam_update.onnx
def _(ctx, node, *names):
    n = (len(names) - len(HYPER)) // 4

    def emit():
        ctx.use_function(adam_update_function(ctx.opset, n))
        return ctx.op("AdamUpdate", *names, domain=CUSTOM_DOMAIN, outputs=3 * n)

    return ctx.shared_node(("AdamUpdate", names), emit)[3 * node.attrs["index"] + node.attrs["part"]]


def _example(g, f, shapes, part, index):
    ranges = {
        "lr": (1e-3, 1e-2),
        "beta1": (0.8, 0.95),
        "beta2": (0.9, 0.999),
        "eps": (1e-8, 1e-6),
        "step": (1, 10),
        "weight_decay": (0, 0.1),
    }
    ins = [f.input(g, h, [1], *ranges[h]) for h in HYPER]
    for k, shape in enumerate(shapes):
        ins += [
            f.param(g, f"p{k}", shape),
            f.input(g, f"g{k}", shape),
            f.input(g, f"m{k}", shape, -0.1, 0.1),
            f.input(g, f"v{k}", shape, 0, 0.01),
        ]
    return g.apply("adam_update", *ins, index=index, part=part)


for _shapes, _index in (([[4, 3]], 0), ([[2, 5], [7]], 1), ([[3], [2, 2], [6]], 2)):
    for _part in PARTS:
        adam_update.example(lambda g, f, _s=_shapes, _p=_part, _i=_index: _example(g, f, _s, _p, _i))
