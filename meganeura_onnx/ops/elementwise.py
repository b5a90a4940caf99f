"""Elementwise ops: binary arithmetic, row broadcasts and the unary activations."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from ..ir import Dim, NodeId, TensorType
from .lowering import CUSTOM_DOMAIN, function_body
from .table import OPS, CustomOp, Feeds, TensorArg, dim_attr, examples, float_attr, int_attr, op, rank, require, same_shape

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
def _binary(name: str, np_fn, onnx_type: str, vjp) -> None:
    d = op(name, ("a", "b"))
    d.shape(lambda a, b: same_shape(name, a, b))
    d.numpy(lambda a, b: np_fn(a, b))
    d.onnx(lambda ctx, node, a, b: ctx.op(onnx_type, a, b))
    d.vjp(vjp)

    def ex(g, f: Feeds, shape):
        return g.apply(name, f.param(g, "a", shape), f.param(g, "b", shape, 0.5, 2.0))

    examples(d, ex, *SHAPES)


def _div_vjp(g, node, dy):
    b = node.inputs[1]
    da = g.div(dy, b)
    return [da, g.neg(g.mul(da, node.id))]  # d(a/b)/db = -(a/b)/b


_binary("add", np.add, "Add", lambda g, node, dy: [dy, dy])
_binary("sub", np.subtract, "Sub", lambda g, node, dy: [dy, g.neg(dy)])
_binary("mul", np.multiply, "Mul", lambda g, node, dy: [g.mul(dy, node.inputs[1]), g.mul(dy, node.inputs[0])])
_binary("div", np.divide, "Div", _div_vjp)
# Ties send the gradient nowhere (both masks are 0): a subgradient, and ties have measure zero.
_binary(
    "minimum",
    np.minimum,
    "Min",
    lambda g, node, dy: [g.mul(dy, g.greater(node.inputs[1], node.inputs[0])), g.mul(dy, g.greater(*node.inputs))],
)

greater = op("greater", ("a", "b"), differentiable=False)
greater.shape(lambda a, b: same_shape("greater", a, b))
greater.numpy(lambda a, b: (a > b).astype(a.dtype))
greater.onnx(lambda ctx, node, a, b: ctx.cast(ctx.op("Greater", a, b), TensorProto.FLOAT))
examples(greater, lambda g, f, shape: g.greater(f.param(g, "a", shape), f.param(g, "b", shape)), *SHAPES)

# One com.meganeura.SwiGLU kernel: ORT fuses the standard pattern only as far as QuickGelu + Mul
# (two kernels and a round trip of silu(gate) through memory); the function body is that pattern.
swiglu = op(
    "swiglu",
    ("gate", "up"),
    custom=CustomOp("SwiGLU", (TensorArg("gate"), TensorArg("up")), (TensorArg("out"),)),
    half_types=frozenset({"float16", "bfloat16"}),
)
swiglu.shape(lambda gate, up: same_shape("swiglu", gate, up, ("gate", "up")))
swiglu.numpy(lambda gate, up: gate * _sigmoid(gate) * up)


@swiglu.function_body
def swiglu_function(opset: int):
    return function_body(swiglu.custom, lambda ctx, gate, up: ctx.op("Mul", ctx.op("Mul", gate, ctx.op("Sigmoid", gate)), up), opset)


@swiglu.onnx
def _(ctx, node, gate, up):
    ctx.use_function(swiglu_function(ctx.opset))
    return ctx.op("SwiGLU", gate, up, domain=CUSTOM_DOMAIN)


examples(swiglu, lambda g, f, shape: g.swiglu(f.param(g, "gate", shape, -3, 3), f.param(g, "up", shape)), *SHAPES)

# SwiGLU on a merged gate|up product: out[..., j] = silu(x[..., j]) * x[..., F + j] for x [..., 2F], one
# com.meganeura.SwiGLUPacked kernel that reads both halves in place, where split + SwiGLU first copies them
# out with an ONNX Split (a kernel launch per LLaMA layer on CUDA). Inference only (no gradient): the pass
# that makes it (transforms.swiglu_packed_fusion) runs on inference graphs.
swiglu_packed = op(
    "swiglu_packed",
    ("x",),
    differentiable=False,
    custom=CustomOp("SwiGLUPacked", (TensorArg("x"),), (TensorArg("out"),)),
    half_types=frozenset({"float16", "bfloat16"}),
)


@swiglu_packed.shape
def _(x: TensorType) -> TensorType:
    name = "swiglu_packed"
    require(x.rank() >= 1, name, f"x must have at least 1 dimension (gate|up along the last), got shape {list(x.shape)}")
    width = x.shape[-1]
    require(isinstance(width, int), name, f"x needs a static last dimension (2F), got {width!r} (shape {list(x.shape)})")
    require(width % 2 == 0, name, f"x's last dimension must be even (gate|up, 2F), got {width} (shape {list(x.shape)})")
    return TensorType((*x.shape[:-1], width // 2), x.dtype)


def swiglu_packed_ref(x: np.ndarray) -> np.ndarray:
    """``silu(gate) * up`` with ``gate, up = x[..., :F], x[..., F:]``."""
    gate, up = np.split(x, 2, axis=-1)
    return gate * _sigmoid(gate) * up


swiglu_packed.numpy(swiglu_packed_ref)


@swiglu_packed.function_body
def swiglu_packed_function(opset: int):
    def body(ctx, x):
        # Split into equal halves: ``num_outputs`` is required from opset 18, before it the output count decides.
        halves = {"num_outputs": 2} if opset >= 18 else {}
        gate, up = ctx.op("Split", x, outputs=2, axis=-1, **halves)
        return ctx.op("Mul", ctx.op("Mul", gate, ctx.op("Sigmoid", gate)), up)

    return function_body(swiglu_packed.custom, body, opset)


@swiglu_packed.onnx
def _(ctx, node, x):
    ctx.use_function(swiglu_packed_function(ctx.opset))
    return ctx.op("SwiGLUPacked", x, domain=CUSTOM_DOMAIN)


examples(
    swiglu_packed,
    lambda g, f, shape: g.swiglu_packed(f.param(g, "x", shape, -3, 3)),
    {"shape": [3, 10]},
    {"shape": [2, 3, 8]},
    {"shape": [4, 2]},
)


def _dsilu(g, x: NodeId) -> NodeId:
    """silu'(x) = s * (1 + x * (1 - s)) with s = sigmoid(x)."""
    s = g.sigmoid(x)
    return g.mul(s, g.affine(g.mul(x, g.affine(s, -1.0, 1.0)), 1.0, 1.0))


@swiglu.vjp
def _(g, node, dy):
    gate, up = node.inputs
    return [g.apply("swiglu_grad", gate, up, dy, index=k) for k in (0, 1)]


# SwiGLU's backward as one com.meganeura.SwiGLUGrad kernel with two outputs: decomposed it is about ten
# elementwise nodes (sigmoid, silu and the dsilu chain, each a full pass over the [tokens, ffn] tensors).
# The Graph IR has one output per node, so it is one IR node per output with an ``index`` attribute
# (0: dgate, 1: dup), both sharing their inputs; the lowering emits the single ONNX node once, as
# ``adam_update`` does. float16 / bfloat16 are computed in float32 by the kernels.
swiglu_grad = op(
    "swiglu_grad",
    ("gate", "up", "dy"),
    differentiable=False,
    attrs=(int_attr("index", 0, 1, doc="0: dgate = dy * up * silu'(gate), 1: dup = dy * silu(gate)"),),
    custom=CustomOp("SwiGLUGrad", (TensorArg("gate"), TensorArg("up"), TensorArg("dy")), (TensorArg("dgate"), TensorArg("dup"))),
    half_types=frozenset({"float16", "bfloat16"}),
)


@swiglu_grad.shape
def _(gate: TensorType, up: TensorType, dy: TensorType, *, index: int) -> TensorType:
    same_shape("swiglu_grad", gate, up, ("gate", "up"))
    return same_shape("swiglu_grad", gate, dy, ("gate", "dy"))


def swiglu_grad_ref(gate: np.ndarray, up: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dgate, dup) of ``silu(gate) * up`` for the cotangent dy."""
    s = _sigmoid(gate)
    return dy * up * s * (1.0 + gate * (1.0 - s)), dy * gate * s


swiglu_grad.numpy(lambda gate, up, dy, *, index: swiglu_grad_ref(gate, up, dy)[index].astype(gate.dtype))


@swiglu_grad.function_body
def swiglu_grad_function(opset: int):
    def body(ctx, gate, up, dy):
        s = ctx.op("Sigmoid", gate)
        one = ctx.const(1.0)
        dsilu = ctx.op("Mul", s, ctx.op("Add", one, ctx.op("Mul", gate, ctx.op("Sub", one, s))))
        return [ctx.op("Mul", ctx.op("Mul", dy, up), dsilu), ctx.op("Mul", dy, ctx.op("Mul", gate, s))]

    return function_body(swiglu_grad.custom, body, opset)


@swiglu_grad.onnx
def _(ctx, node, gate, up, dy):
    def emit():
        ctx.use_function(swiglu_grad_function(ctx.opset))
        return ctx.op("SwiGLUGrad", gate, up, dy, domain=CUSTOM_DOMAIN, outputs=2)

    return ctx.shared_node(("SwiGLUGrad", gate, up, dy), emit)[node.attrs["index"]]


def _swiglu_grad_example(g, f: Feeds, shape, index):
    gate, up = f.param(g, "gate", shape, -4, 4), f.param(g, "up", shape)
    return g.apply("swiglu_grad", gate, up, f.input(g, "dy", shape), index=index)


examples(swiglu_grad, _swiglu_grad_example, {"shape": [3, 5], "index": 0}, {"shape": [2, 3, 4], "index": 1})


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

    @d.vjp
    def _(g, node, dy):
        db = g.col_sum(dy)
        return [dy, db if name == "bias_add" else g.reshape(db, g.node(node.inputs[1]).ty.shape)]

    def ex(g, f: Feeds, rows, cols):
        return g.apply(name, f.param(g, "x", [rows, cols]), f.param(g, "bias", list(bias_shape(cols))))

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
    "erf": (lambda x: _erf(x).astype(x.dtype), lambda ctx, x: ctx.op("Erf", x), (-2, 2)),
}

# name: the gradient wrt x as a function of (g, x, y = the op's output, dy).
UNARY_VJP = {
    "relu": lambda g, x, y, dy: g.mul(dy, g.heaviside(x)),
    "sigmoid": lambda g, x, y, dy: g.mul(dy, g.mul(y, g.affine(y, -1.0, 1.0))),
    "neg": lambda g, x, y, dy: g.neg(dy),
    "abs": lambda g, x, y, dy: g.mul(dy, g.sign(x)),
    "log": lambda g, x, y, dy: g.div(dy, x),
    "recip": lambda g, x, y, dy: g.neg(g.mul(dy, g.mul(y, y))),
    "silu": lambda g, x, y, dy: g.mul(dy, _dsilu(g, x)),
    "exp": lambda g, x, y, dy: g.mul(dy, y),
    "tanh": lambda g, x, y, dy: g.mul(dy, g.affine(g.mul(y, y), -1.0, 1.0)),
    "sqrt": lambda g, x, y, dy: g.affine(g.div(dy, y), 0.5, 0.0),
    # gelu'(x) = Phi(x) + x phi(x): Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    "gelu": lambda g, x, y, dy: g.mul(
        dy,
        g.add(
            g.affine(g.erf(g.affine(x, 1 / math.sqrt(2.0), 0.0)), 0.5, 0.5),
            g.mul(x, g.affine(g.exp(g.affine(g.mul(x, x), -0.5, 0.0)), 1 / math.sqrt(2 * math.pi), 0.0)),
        ),
    ),
    "erf": lambda g, x, y, dy: g.mul(dy, g.affine(g.exp(g.neg(g.mul(x, x))), 2 / math.sqrt(math.pi), 0.0)),
}

for _name, (_ref, _lower, (_lo, _hi)) in UNARY.items():
    _d = op(_name, ("x",))
    _d.shape(lambda x: x)
    _d.numpy(_ref)
    _d.onnx(lambda ctx, node, x, _lower=_lower: _lower(ctx, x))
    _d.vjp(lambda g, node, dy, _rule=UNARY_VJP[_name]: [_rule(g, node.inputs[0], node.id, dy)])
    examples(_d, lambda g, f, shape, _n=_name, _lo=_lo, _hi=_hi: g.apply(_n, f.param(g, "x", shape, _lo, _hi)), *SHAPES)


# -- step functions: derivative zero almost everywhere, so gradients stop here (and that is exact) ----
for _name, _ref, _lower in (
    ("sign", np.sign, lambda ctx, x: ctx.op("Sign", x)),
    ("heaviside", lambda x: (x > 0).astype(x.dtype), lambda ctx, x: ctx.cast(ctx.op("Greater", x, ctx.const(0.0)), TensorProto.FLOAT)),
):
    _d = op(_name, ("x",), differentiable=False)
    _d.shape(lambda x: x)
    _d.numpy(_ref)
    _d.onnx(lambda ctx, node, x, _lower=_lower: _lower(ctx, x))
    examples(_d, lambda g, f, shape, _n=_name: g.apply(_n, f.param(g, "x", shape)), *SHAPES)

# -- static affine map and scalar broadcasts (optimizer updates, loss scaling) -------------------------
affine = op("affine", ("x",), attrs=(float_attr("scale"), float_attr("shift")))
affine.shape(lambda x, *, scale, shift: x)


affine.numpy(lambda x, *, scale, shift: x * x.dtype.type(scale) + x.dtype.type(shift))


@affine.onnx
def _(ctx, node, x):
    a, b = float(node.attrs["scale"]), float(node.attrs["shift"])
    y = x if a == 1.0 else ctx.op("Mul", x, ctx.const(a))
    return y if b == 0.0 else ctx.op("Add", y, ctx.const(b))


affine.vjp(lambda g, node, dy: [g.affine(dy, node.attrs["scale"], 0.0)])
examples(
    affine,
    lambda g, f, shape, a, b: g.affine(f.param(g, "x", shape), a, b),
    {"shape": [3, 5], "a": -1.5, "b": 2.0},
    {"shape": [4], "a": 0.25, "b": 0.0},
)


# -- x * scale / count with a count that may be symbolic (means over a symbolic batch in gradients) ----
scale_by_count = op("scale_by_count", ("x",), attrs=(float_attr("scale"), dim_attr("count")))
scale_by_count.shape(lambda x, *, scale, count: x)


scale_by_count.numpy(lambda x, *, scale, count: x * x.dtype.type(scale / count))


@scale_by_count.onnx
def _(ctx, node, x):
    scale, count = float(node.attrs["scale"]), node.attrs["count"]
    if isinstance(count, int):
        return ctx.op("Mul", x, ctx.const(scale / count))
    y = x if scale == 1.0 else ctx.op("Mul", x, ctx.const(scale))
    return ctx.op("Div", y, ctx.cast(ctx.size(count), TensorProto.FLOAT))  # the count is read at run time


scale_by_count.vjp(lambda g, node, dy: [g.apply("scale_by_count", dy, **node.attrs)])
examples(
    scale_by_count,
    lambda g, f, shape, scale, count: g.apply("scale_by_count", f.param(g, "x", shape), scale=scale, count=count),
    {"shape": [3, 5], "scale": -1.5, "count": 4},
    {"shape": [6], "scale": 1.0, "count": 3},
)


def mean_scale(g, x: NodeId, scale: float, count: Dim) -> NodeId:
    """``x * scale / count`` as the gradient rules need it: an ``affine`` when the count is static."""
    if isinstance(count, int):
        return g.affine(x, scale * (1.0 / count), 0.0)
    return g.apply("scale_by_count", x, scale=float(scale), count=count)


def _scalar_op(name: str, np_fn, onnx_type: str, vjp) -> None:
    d = op(name, ("x", "s"))

    @d.shape
    def _(x: TensorType, s: TensorType) -> TensorType:
        require(s.shape == (1,), name, f"s must be a [1] scalar node, got {list(s.shape)}")
        return x

    d.numpy(lambda x, s: np_fn(x, s.reshape(-1)[0]))
    d.onnx(lambda ctx, node, x, s: ctx.op(onnx_type, x, s))  # ONNX broadcasts the [1] operand
    d.vjp(vjp)
    examples(d, lambda g, f, shape: g.apply(name, f.param(g, "x", shape), f.param(g, "s", [1], 0.5, 2.0)), *SHAPES)


_scalar_op("mul_scalar", np.multiply, "Mul", lambda g, node, dy: [g.mul_scalar(dy, node.inputs[1]), g.sum_all(g.mul(dy, node.inputs[0]))])
_scalar_op("add_scalar", np.add, "Add", lambda g, node, dy: [dy, g.sum_all(dy)])

# -- e-graph rules (the optimizer reads them here; each is exact in floating point) --------------------
OPS["neg"].rewrite("double_negation", "(neg (neg ?x))", "?x")
OPS["sub"].rewrite("add_neg_to_sub", "(add ?a (neg ?b))", "(sub ?a ?b)")
OPS["sub"].rewrite("neg_add_to_sub", "(add (neg ?b) ?a)", "(sub ?a ?b)")
OPS["sub"].rewrite("neg_of_sub", "(neg (sub ?a ?b))", "(sub ?b ?a)")
OPS["add"].rewrite("sub_neg_to_add", "(sub ?a (neg ?b))", "(add ?a ?b)")
OPS["relu"].rewrite("relu_idempotent", "(relu (relu ?x))", "(relu ?x)")
OPS["abs"].rewrite("abs_idempotent", "(abs (abs ?x))", "(abs ?x)")
OPS["abs"].rewrite("abs_of_neg", "(abs (neg ?x))", "(abs ?x)")
# Fusions: one kernel where the unfused form launches two and writes the intermediate.
OPS["silu"].rewrite("silu_from_sigmoid", "(mul ?x (sigmoid ?x))", "(silu ?x)")
OPS["silu"].rewrite("silu_from_sigmoid_commuted", "(mul (sigmoid ?x) ?x)", "(silu ?x)")
swiglu.rewrite("swiglu_from_silu", "(mul (silu ?g) ?u)", "(swiglu ?g ?u)")
swiglu.rewrite("swiglu_from_silu_commuted", "(mul ?u (silu ?g))", "(swiglu ?g ?u)")


class ElementwiseBuilders:
    def add(self, a: NodeId, b: NodeId) -> NodeId:
        """Elementwise ``a + b``; identical shapes."""
        return self.apply("add", a, b)

    def mul(self, a: NodeId, b: NodeId) -> NodeId:
        """Elementwise ``a * b``; identical shapes."""
        return self.apply("mul", a, b)

    def sub(self, a: NodeId, b: NodeId) -> NodeId:
        """Elementwise ``a - b``; identical shapes."""
        return self.apply("sub", a, b)

    def minimum(self, a: NodeId, b: NodeId) -> NodeId:
        """Elementwise ``min(a, b)``; identical shapes."""
        return self.apply("minimum", a, b)

    def affine(self, x: NodeId, scale: float, shift: float) -> NodeId:
        """``x * scale + shift`` with static numbers."""
        return self.apply("affine", x, scale=scale, shift=shift)

    def mul_scalar(self, x: NodeId, s: NodeId) -> NodeId:
        """``x * s[0]`` for a ``[1]`` node s (a runtime scalar such as a learning rate)."""
        return self.apply("mul_scalar", x, s)

    def add_scalar(self, x: NodeId, s: NodeId) -> NodeId:
        """``x + s[0]`` for a ``[1]`` node s."""
        return self.apply("add_scalar", x, s)

    def sign(self, x: NodeId) -> NodeId:
        """-1, 0 or 1 (no gradient: its derivative is zero almost everywhere)."""
        return self.apply("sign", x)

    def heaviside(self, x: NodeId) -> NodeId:
        """1.0 where ``x > 0`` else 0.0 (no gradient)."""
        return self.apply("heaviside", x)

    def div(self, a: NodeId, b: NodeId) -> NodeId:
        """Elementwise ``a / b`` (Meganeura: ``mul(a, recip(b))``); identical shapes."""
        return self.apply("div", a, b)

    def greater(self, a: NodeId, b: NodeId) -> NodeId:
        """1.0 where ``a > b`` else 0.0; identical shapes; no gradient."""
        return self.apply("greater", a, b)

    def bias_add(self, x: NodeId, bias: NodeId) -> NodeId:
        """``x [M, N] + bias [N]`` broadcast over rows."""
        return self.apply("bias_add", x, bias)

    def broadcast_add(self, x: NodeId, b: NodeId) -> NodeId:
        """``x [M, N] + b [1, N]`` broadcast over rows."""
        return self.apply("broadcast_add", x, b)

    def relu(self, x: NodeId) -> NodeId:
        """``max(0, x)``."""
        return self.apply("relu", x)

    def sigmoid(self, x: NodeId) -> NodeId:
        """``1 / (1 + exp(-x))``."""
        return self.apply("sigmoid", x)

    def neg(self, x: NodeId) -> NodeId:
        """``-x``."""
        return self.apply("neg", x)

    def abs(self, x: NodeId) -> NodeId:
        """``|x|``."""
        return self.apply("abs", x)

    def log(self, x: NodeId) -> NodeId:
        """Natural logarithm."""
        return self.apply("log", x)

    def recip(self, x: NodeId) -> NodeId:
        """``1 / x``."""
        return self.apply("recip", x)

    def silu(self, x: NodeId) -> NodeId:
        """``x * sigmoid(x)``."""
        return self.apply("silu", x)

    def exp(self, x: NodeId) -> NodeId:
        """``e ** x`` (Meganeura extra)."""
        return self.apply("exp", x)

    def tanh(self, x: NodeId) -> NodeId:
        """Hyperbolic tangent (Meganeura extra)."""
        return self.apply("tanh", x)

    def sqrt(self, x: NodeId) -> NodeId:
        """Square root (extra, used by gradients and norms)."""
        return self.apply("sqrt", x)

    def erf(self, x: NodeId) -> NodeId:
        """The error function (used by GELU's gradient)."""
        return self.apply("erf", x)

    def gelu(self, x: NodeId) -> NodeId:
        """Exact GELU ``0.5 * x * (1 + erf(x / sqrt(2)))`` (BERT's ``hidden_act="gelu"``; Meganeura extra)."""
        return self.apply("gelu", x)

    def swiglu(self, gate: NodeId, up: NodeId) -> NodeId:
        """``silu(gate) * up``; identical shapes."""
        return self.apply("swiglu", gate, up)

    def swiglu_packed(self, x: NodeId) -> NodeId:
        """``silu(x[..., :F]) * x[..., F:]`` for x ``[..., 2F]`` (gate|up merged): ``[..., F]``."""
        return self.apply("swiglu_packed", x)
