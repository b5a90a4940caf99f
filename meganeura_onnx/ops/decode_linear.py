"""RMSNorm fused into the projections that read it: one small-row GEMV kernel per decode-layer norm.

``rms_norm_linear`` normalises the rows of x ``[M, K]`` once (``rms_norm(x, weight, eps)``) and
multiplies them by n weights in one kernel, one output per weight: ``y_i = rms_norm(x) @ w_i^T``
(``trans_b``: ``w_i [N_i, K]``, torch's Linear layout, as ``matmul_bt`` reads it) or
``rms_norm(x) @ w_i`` (``w_i [K, N_i]``, the ``[in, out]`` layout of ``nn.llama.InOutLinear``).
A LLaMA decode layer's q/k/v projections are one ``com.meganeura.RMSNormLinear`` node with three
outputs instead of ``SimplifiedLayerNormalization`` + three ``Gemm``. ``rms_norm_swiglu`` is the
MLP's variant with the SwiGLU epilogue: ``silu(rms_norm(x) @ w_gate^T) * (rms_norm(x) @ w_up^T)``,
one ``com.meganeura.RMSNormSwiGLU`` node instead of a norm, two products and ``SwiGLU``.
``linear_residual`` is the GEMV without a norm and with the residual add as its epilogue:
``residual + x @ w^T`` (``trans_b``) or ``residual + x @ w``, one ``com.meganeura.LinearResidual``
node where the residual stream of a LLaMA layer otherwise takes ``Gemm`` with a full-size C input
(which ONNX Runtime's CUDA Gemm first copies into its output: two kernels). ``add_rms_norm`` is the
prefill's counterpart, the residual add fused into the norm after it: ``sum = x + residual`` and
``y = rms_norm(sum) * weight``, one ``com.meganeura.AddRMSNorm`` node with two outputs where a prefill
layer otherwise runs the C copy of ``Gemm``, the norm and (in half) a ``Cast`` of its output.

The Graph IR has one output per node, so ``rms_norm_linear`` is one IR node per projection with an
``index`` attribute (which output), all sharing their inputs; the lowering emits the single ONNX node
once, as ``adam_update`` does. The ONNX node carries ``overload = "n<count>"`` and so does its function
body: a model may hold groups of different sizes (three projections, and one for the LM head), and a
model-local function has a fixed signature (ONNX IR 10 tells them apart by overload).

Numerics (every op, every element type): float32 math. ``r = 1 / sqrt(mean(x^2) + eps)`` per row,
the normalised row ``x * r * weight`` is kept in float32 (Hugging Face's LlamaRMSNorm rounds it to the
input type before the weight multiply and the projection: in float32 that is the same), the products
accumulate in float32 and round once to the output type (``linear_residual``: the residual is added in
float32 before that one rounding). ``add_rms_norm`` rounds the float32 sum once to the element type (its
output ``sum``) and normalises that rounded sum, widened to float32, as Hugging Face does (the residual
add in the model's dtype, the norm in float32); ``y`` rounds once.

None of them has a gradient: the graph passes that introduce them (``transforms.decode_fusion``,
``transforms.add_rms_norm_fusion``) run on inference graphs only, the decode fusions only where the row
count is a small static number (a decode step), ``add_rms_norm`` only where it is not (a prefill).
"""

from __future__ import annotations

import numpy as np
import onnx

from ..ir import NodeId, TensorType
from .lowering import CUSTOM_DOMAIN, function_body
from .norm import EPS
from .table import CustomOp, TensorArg, bool_attr, examples, float_attr, int_attr, op, rank, require, same_dim

HALF = frozenset({"float16", "bfloat16"})
ONNX_ATTRS = (float_attr("epsilon", 0, lo_open=True, doc="added to the mean square"), int_attr("trans_b", 0, 1, doc="1: w [N, K]"))
TRANS_B = bool_attr("trans_b", doc="True: weights [N, K] (torch's Linear layout); False: [K, N]")

rms_norm_linear = op(
    "rms_norm_linear",
    ("x", "weight"),
    variadic=("w",),
    differentiable=False,
    attrs=(EPS, TRANS_B, int_attr("index", 0, doc="which projection's output this node is")),
    custom=CustomOp(
        "RMSNormLinear",
        (TensorArg("x"), TensorArg("weight")),
        (),
        ONNX_ATTRS,
        variadic_inputs=(TensorArg("w"),),
        variadic_outputs=(TensorArg("y"),),
    ),
    half_types=HALF,
)

rms_norm_swiglu = op(
    "rms_norm_swiglu",
    ("x", "weight", "w_gate", "w_up"),
    differentiable=False,
    attrs=(EPS, TRANS_B),
    custom=CustomOp(
        "RMSNormSwiGLU",
        (TensorArg("x"), TensorArg("weight"), TensorArg("w_gate"), TensorArg("w_up")),
        (TensorArg("out"),),
        ONNX_ATTRS,
    ),
    half_types=HALF,
)

linear_residual = op(
    "linear_residual",
    ("x", "w", "residual"),
    differentiable=False,
    attrs=(TRANS_B,),
    custom=CustomOp(
        "LinearResidual",
        (TensorArg("x"), TensorArg("w"), TensorArg("residual")),
        (TensorArg("y"),),
        (ONNX_ATTRS[1],),
    ),
    half_types=HALF,
)


add_rms_norm = op(
    "add_rms_norm",
    ("x", "residual", "weight"),
    differentiable=False,
    attrs=(EPS, int_attr("index", 0, 1, doc="which output this node is: 0 the normalised rows y, 1 the sum x + residual")),
    custom=CustomOp(
        "AddRMSNorm",
        (TensorArg("x"), TensorArg("residual"), TensorArg("weight")),
        (TensorArg("y"), TensorArg("sum")),
        (ONNX_ATTRS[0],),
    ),
    half_types=HALF,
)


def _projection(name: str, x: TensorType, w: TensorType, arg: str, trans_b: bool) -> TensorType:
    """The ``[M, N]`` product of normalised x ``[M, K]`` with ``w`` (``[N, K]`` with trans_b, else ``[K, N]``)."""
    rank(name, w, 2, arg)
    k = w.shape[1] if trans_b else w.shape[0]
    layout = "[N, K]" if trans_b else "[K, N]"
    same_dim(name, k, x.shape[1], f"{arg} must be {layout} with K = {x.shape[1]} (x {list(x.shape)}), got {list(w.shape)}")
    return TensorType((x.shape[0], w.shape[0] if trans_b else w.shape[1]))


def _norm_input(name: str, x: TensorType, weight: TensorType) -> None:
    rank(name, x, 2, "x")
    require(weight.shape == (x.shape[1],), name, f"weight must have shape [{x.shape[1]}] for x {list(x.shape)}, got {list(weight.shape)}")


@rms_norm_linear.shape
def _(x: TensorType, weight: TensorType, *ws: TensorType, eps: float, trans_b: bool, index: int) -> TensorType:
    name = "rms_norm_linear"
    _norm_input(name, x, weight)
    require(len(ws) >= 1, name, f"takes x, weight, then one or more weights w, got {2 + len(ws)} inputs")
    require(0 <= index < len(ws), name, f"index must be in [0, {len(ws)}) for {len(ws)} weights, got {index}")
    outs = [_projection(name, x, w, f"w{k}", trans_b) for k, w in enumerate(ws)]
    return outs[index]


@rms_norm_swiglu.shape
def _(x: TensorType, weight: TensorType, w_gate: TensorType, w_up: TensorType, *, eps: float, trans_b: bool) -> TensorType:
    name = "rms_norm_swiglu"
    _norm_input(name, x, weight)
    gate, up = _projection(name, x, w_gate, "w_gate", trans_b), _projection(name, x, w_up, "w_up", trans_b)
    require(gate.shape == up.shape, name, f"w_gate and w_up must give one output width, got {list(gate.shape)} and {list(up.shape)}")
    return gate


@linear_residual.shape
def _(x: TensorType, w: TensorType, residual: TensorType, *, trans_b: bool) -> TensorType:
    name = "linear_residual"
    rank(name, x, 2, "x")
    out = _projection(name, x, w, "w", trans_b)
    require(residual.shape == out.shape, name, f"residual must have the product's shape {list(out.shape)}, got {list(residual.shape)}")
    return out


@add_rms_norm.shape
def _(x: TensorType, residual: TensorType, weight: TensorType, *, eps: float, index: int) -> TensorType:
    name = "add_rms_norm"
    _norm_input(name, x, weight)
    require(residual.shape == x.shape, name, f"residual must have the shape of x {list(x.shape)}, got {list(residual.shape)}")
    return x


def rms_norm_ref(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + x.dtype.type(eps)) * weight


def _product(xn: np.ndarray, w: np.ndarray, trans_b: bool) -> np.ndarray:
    return xn @ (w.T if trans_b else w)


@rms_norm_linear.numpy
def _(x, weight, *ws, eps, trans_b, index):
    return _product(rms_norm_ref(x, weight, eps), ws[index], trans_b).astype(x.dtype)


@rms_norm_swiglu.numpy
def _(x, weight, w_gate, w_up, *, eps, trans_b):
    xn = rms_norm_ref(x, weight, eps)
    gate, up = _product(xn, w_gate, trans_b), _product(xn, w_up, trans_b)
    return (gate / (1.0 + np.exp(-gate)) * up).astype(x.dtype)


@linear_residual.numpy
def _(x, w, residual, *, trans_b):
    return (residual + _product(x, w, trans_b)).astype(x.dtype)


@add_rms_norm.numpy
def _(x, residual, weight, *, eps, index):
    s = (x + residual).astype(x.dtype)  # the sum rounded to the element type, then normalised
    return s if index == 1 else rms_norm_ref(s, weight, eps).astype(x.dtype)


# -- function bodies (what runs without our kernel library) ---------------------------------------------
def _normalized(ctx, x, weight):
    """``x / sqrt(mean(x^2) + epsilon) * weight``: rms_norm's decomposed pattern, eps from the attribute."""
    ms = ctx.op("ReduceMean", ctx.op("Mul", x, x), ctx.ints([-1]), keepdims=1)
    rms = ctx.op("Sqrt", ctx.op("Add", ms, ctx.attr_ref("epsilon", "float")))
    return ctx.op("Mul", ctx.op("Div", x, rms), weight)


def _gemm(ctx, a, w, *c):
    """``Gemm(a, w[, c])`` with ``transB`` read from the caller's ``trans_b`` attribute."""
    out = ctx.op("Gemm", a, w, *c)
    ctx.nodes[-1].attribute.append(onnx.AttributeProto(name="transB", ref_attr_name="trans_b", type=onnx.AttributeProto.INT))
    return out


def overload(arity: int) -> str:
    """The overload name of the ``arity``-weight ``RMSNormLinear`` (node and function body alike)."""
    return f"n{arity}"


@rms_norm_linear.function_body
def rms_norm_linear_function(opset: int, n: int = 1):
    def body(ctx, x, weight, *ws):
        xn = _normalized(ctx, x, weight)
        return [_gemm(ctx, xn, w) for w in ws]

    fn = function_body(rms_norm_linear.custom, body, opset, arity=n)
    fn.overload = overload(n)
    return fn


@rms_norm_swiglu.function_body
def rms_norm_swiglu_function(opset: int):
    def body(ctx, x, weight, w_gate, w_up):
        xn = _normalized(ctx, x, weight)
        gate = _gemm(ctx, xn, w_gate)
        return ctx.op("Mul", ctx.op("Mul", gate, ctx.op("Sigmoid", gate)), _gemm(ctx, xn, w_up))

    return function_body(rms_norm_swiglu.custom, body, opset)


@linear_residual.function_body
def linear_residual_function(opset: int):
    return function_body(linear_residual.custom, lambda ctx, x, w, residual: _gemm(ctx, x, w, residual), opset)


@add_rms_norm.function_body
def add_rms_norm_function(opset: int):
    def body(ctx, x, residual, weight):
        s = ctx.op("Add", x, residual)
        return [_normalized(ctx, s, weight), s]

    return function_body(add_rms_norm.custom, body, opset)


def _onnx_attrs(node) -> dict:
    return {"epsilon": float(node.attrs["eps"]), "trans_b": int(bool(node.attrs["trans_b"]))}


@rms_norm_linear.onnx
def _(ctx, node, x, weight, *ws):
    def emit():
        ctx.use_function(rms_norm_linear_function(ctx.opset, len(ws)))
        outs = ctx.op("RMSNormLinear", x, weight, *ws, domain=CUSTOM_DOMAIN, outputs=len(ws), **_onnx_attrs(node))
        ctx.nodes[-1].overload = overload(len(ws))
        return outs

    key = ("RMSNormLinear", x, weight, ws, node.attrs["eps"], node.attrs["trans_b"])
    return ctx.shared_node(key, emit)[node.attrs["index"]]


@rms_norm_swiglu.onnx
def _(ctx, node, x, weight, w_gate, w_up):
    ctx.use_function(rms_norm_swiglu_function(ctx.opset))
    return ctx.op("RMSNormSwiGLU", x, weight, w_gate, w_up, domain=CUSTOM_DOMAIN, **_onnx_attrs(node))


@linear_residual.onnx
def _(ctx, node, x, w, residual):
    ctx.use_function(linear_residual_function(ctx.opset))
    return ctx.op("LinearResidual", x, w, residual, domain=CUSTOM_DOMAIN, trans_b=int(bool(node.attrs["trans_b"])))


@add_rms_norm.onnx
def _(ctx, node, x, residual, weight):
    def emit():
        ctx.use_function(add_rms_norm_function(ctx.opset))
        return ctx.op("AddRMSNorm", x, residual, weight, domain=CUSTOM_DOMAIN, outputs=2, epsilon=float(node.attrs["eps"]))

    return ctx.shared_node(("AddRMSNorm", x, residual, weight, node.attrs["eps"]), emit)[node.attrs["index"]]


def _weight(g, f, name, k, n, trans_b):
    return f.param(g, name, [n, k] if trans_b else [k, n], -0.5, 0.5)


def _ex_linear(g, f, m, k, widths, trans_b, index):
    x, weight = f.param(g, "x", [m, k], -2, 2), f.param(g, "weight", [k], 0.5, 1.5)
    ws = [_weight(g, f, f"w{j}", k, n, trans_b) for j, n in enumerate(widths)]
    return g.apply("rms_norm_linear", x, weight, *ws, eps=1e-5, trans_b=trans_b, index=index)


examples(
    rms_norm_linear,
    _ex_linear,
    {"m": 1, "k": 8, "widths": (6, 4, 4), "trans_b": True, "index": 1},
    {"m": 3, "k": 5, "widths": (7,), "trans_b": False, "index": 0},
    {"m": 2, "k": 6, "widths": (3, 5), "trans_b": False, "index": 1},
)


def _ex_swiglu(g, f, m, k, n, trans_b):
    x, weight = f.param(g, "x", [m, k], -2, 2), f.param(g, "weight", [k], 0.5, 1.5)
    gate, up = _weight(g, f, "w_gate", k, n, trans_b), _weight(g, f, "w_up", k, n, trans_b)
    return g.rms_norm_swiglu(x, weight, gate, up, 1e-5, trans_b)


examples(rms_norm_swiglu, _ex_swiglu, {"m": 1, "k": 8, "n": 12, "trans_b": True}, {"m": 4, "k": 5, "n": 3, "trans_b": False})


def _ex_residual(g, f, m, k, n, trans_b):
    x, residual = f.param(g, "x", [m, k], -2, 2), f.param(g, "residual", [m, n], -2, 2)
    return g.linear_residual(x, _weight(g, f, "w", k, n, trans_b), residual, trans_b)


examples(linear_residual, _ex_residual, {"m": 1, "k": 8, "n": 6, "trans_b": True}, {"m": 3, "k": 5, "n": 7, "trans_b": False})


def _ex_add_norm(g, f, m, k, index):
    x, residual = f.param(g, "x", [m, k], -2, 2), f.param(g, "residual", [m, k], -2, 2)
    return g.apply("add_rms_norm", x, residual, f.param(g, "weight", [k], 0.5, 1.5), eps=1e-5, index=index)


examples(add_rms_norm, _ex_add_norm, {"m": 3, "k": 8, "index": 0}, {"m": 5, "k": 7, "index": 1}, {"m": 1, "k": 16, "index": 0})


class DecodeLinearBuilders:
    def rms_norm_linear(self, x: NodeId, weight: NodeId, ws: list[NodeId], eps: float, trans_b: bool = True) -> list[NodeId]:
        """``[rms_norm(x, weight, eps) @ w.T for w in ws]`` (``@ w`` without ``trans_b``) in one kernel:
        x ``[M, K]``, weight ``[K]``, each w ``[N_i, K]`` (``[K, N_i]``); one ``[M, N_i]`` node per w."""
        return [self.apply("rms_norm_linear", x, weight, *ws, eps=eps, trans_b=trans_b, index=i) for i in range(len(ws))]

    def rms_norm_swiglu(self, x: NodeId, weight: NodeId, w_gate: NodeId, w_up: NodeId, eps: float, trans_b: bool = True) -> NodeId:
        """``silu(n @ w_gate.T) * (n @ w_up.T)`` with ``n = rms_norm(x, weight, eps)`` in one kernel (``@ w``
        without ``trans_b``): x ``[M, K]``, weights ``[N, K]`` (``[K, N]``) -> ``[M, N]``."""
        return self.apply("rms_norm_swiglu", x, weight, w_gate, w_up, eps=eps, trans_b=trans_b)

    def linear_residual(self, x: NodeId, w: NodeId, residual: NodeId, trans_b: bool = True) -> NodeId:
        """``residual + x @ w.T`` (``+ x @ w`` without ``trans_b``) in one kernel: x ``[M, K]``, w ``[N, K]``
        (``[K, N]``), residual ``[M, N]`` -> ``[M, N]``."""
        return self.apply("linear_residual", x, w, residual, trans_b=trans_b)

    def add_rms_norm(self, x: NodeId, residual: NodeId, weight: NodeId, eps: float) -> tuple[NodeId, NodeId]:
        """``(rms_norm(s, weight, eps), s)`` with ``s = x + residual`` in one kernel: x and residual ``[M, K]``,
        weight ``[K]``; two ``[M, K]`` nodes (the normalised rows, then the sum)."""
        y, s = (self.apply("add_rms_norm", x, residual, weight, eps=eps, index=i) for i in (0, 1))
        return y, s
