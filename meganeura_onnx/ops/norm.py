"""Normalisation: rms_norm and layer_norm per row of ``[M, N]``, group_norm over flat NCHW."""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .lowering import CUSTOM_DOMAIN, function_body
from .table import CustomOp, TensorArg, dims, examples, float_attr, int_attr, op, optional, rank, require, static_shape

# eps > 0: with eps = 0 a constant row divides by zero (the numpy reference and ORT give inf/NaN).
EPS = float_attr("eps", 0, lo_open=True, doc="added to the variance")
SCALE = {"weight": "ones"}  # the default init of a normalisation scale
rms_norm = op("rms_norm", ("x", "weight"), attrs=(EPS,), init_roles=SCALE)
layer_norm = op("layer_norm", ("x", "weight", "bias"), attrs=(EPS,), init_roles=SCALE)
group_norm = op("group_norm", ("x", "weight", "bias"), attrs=(*dims("batch", "channels", "spatial", "num_groups"), EPS), init_roles=SCALE)


def _row_params(name: str, x: TensorType, eps: float, **params: TensorType) -> TensorType:
    rank(name, x, 2, "x")
    for arg, t in params.items():
        require(t.shape == (x.shape[1],), name, f"{arg} must have shape [{x.shape[1]}] for x {list(x.shape)}, got {list(t.shape)}")
    return x


rms_norm.shape(lambda x, weight, *, eps: _row_params("rms_norm", x, eps, weight=weight))
layer_norm.shape(lambda x, weight, bias, *, eps: _row_params("layer_norm", x, eps, weight=weight, bias=bias))


@rms_norm.numpy
def _(x, w, *, eps):
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + x.dtype.type(eps)) * w).astype(x.dtype)


@rms_norm.onnx
def _(ctx, node, x, w):
    if ctx.opset >= 23:
        return ctx.op("RMSNormalization", x, w, axis=-1, epsilon=float(node.attrs["eps"]))
    # Exactly the pattern ORT's SimplifiedLayerNormFusion rewrites into one kernel:
    # Pow(x, 2) -> ReduceMean -> Add(eps) -> Sqrt -> Div(x, .) -> Mul(weight). (7 kernels otherwise.)
    ms = ctx.op("ReduceMean", ctx.op("Pow", x, ctx.const(2.0)), ctx.ints([-1]), keepdims=1)
    rms = ctx.op("Sqrt", ctx.op("Add", ms, ctx.const(node.attrs["eps"])))
    return ctx.op("Mul", ctx.op("Div", x, rms), w)


@layer_norm.numpy
def _(x, w, b, *, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + x.dtype.type(eps)) * w + b).astype(x.dtype)


layer_norm.onnx(lambda ctx, node, x, w, b: ctx.op("LayerNormalization", x, w, b, axis=-1, epsilon=float(node.attrs["eps"])))

examples(
    rms_norm,
    lambda g, f, m, n, eps: g.rms_norm(f.param(g, "x", [m, n]), f.param(g, "weight", [n]), eps),
    {"m": 3, "n": 8, "eps": 1e-5},
    {"m": 5, "n": 3, "eps": 1e-2},
)
examples(
    layer_norm,
    lambda g, f, m, n, eps: g.layer_norm(f.param(g, "x", [m, n]), f.param(g, "weight", [n]), f.param(g, "bias", [n]), eps),
    {"m": 3, "n": 8, "eps": 1e-5},
    {"m": 5, "n": 3, "eps": 1e-2},
)


@group_norm.shape
def _(
    x: TensorType, weight: TensorType, bias: TensorType, *, batch: int, channels: int, spatial: int, num_groups: int, eps: float
) -> TensorType:
    name = "group_norm"
    static_shape(name, x, "x")
    require(channels % num_groups == 0, name, f"channels ({channels}) must be a multiple of num_groups ({num_groups})")
    want = batch * channels * spatial
    require(
        x.num_elements() == want,
        name,
        f"x must hold batch*channels*spatial = {batch}*{channels}*{spatial} = {want} elements, got shape {list(x.shape)}",
    )
    for arg, t in (("weight", weight), ("bias", bias)):
        require(t.shape == (channels,), name, f"{arg} must have shape [{channels}], got {list(t.shape)}")
    return x


@group_norm.numpy
def _(x, w, b, *, batch, channels, spatial, num_groups, eps):
    xg = x.reshape(batch, num_groups, -1)
    mu = xg.mean(axis=-1, keepdims=True)
    var = ((xg - mu) ** 2).mean(axis=-1, keepdims=True)
    y = ((xg - mu) / np.sqrt(var + x.dtype.type(eps))).reshape(batch, channels, spatial)
    return (y * w[:, None] + b[:, None]).reshape(x.shape).astype(x.dtype)


@group_norm.onnx
def _(ctx, node, x, w, b):
    a = node.attrs
    xg = ctx.reshape(x, [a["batch"], a["num_groups"], -1])
    mu = ctx.op("ReduceMean", xg, ctx.ints([-1]), keepdims=1)
    d = ctx.op("Sub", xg, mu)
    var = ctx.op("ReduceMean", ctx.op("Mul", d, d), ctx.ints([-1]), keepdims=1)
    y = ctx.op("Div", d, ctx.op("Sqrt", ctx.op("Add", var, ctx.const(a["eps"]))))
    y = ctx.reshape(y, [a["batch"], a["channels"], a["spatial"]])
    y = ctx.op("Add", ctx.op("Mul", y, ctx.reshape(w, [-1, 1])), ctx.reshape(b, [-1, 1]))
    return ctx.reshape(y, list(node.ty.shape))


def _ex_gn(g, f, n, c, s, groups):
    x = f.param(g, "x", [n * c * s])
    return g.group_norm(x, f.param(g, "weight", [c]), f.param(g, "bias", [c]), n, c, s, groups, 1e-5)


examples(group_norm, _ex_gn, {"n": 2, "c": 4, "s": 6, "groups": 2}, {"n": 1, "c": 6, "s": 4, "groups": 3})


# -- gradients ------------------------------------------------------------------------------------
# All three norms share one row-wise core: xhat = (x - mean) * r with r = 1/sqrt(var + eps) (no
# centring for rms_norm). With gx the gradient wrt xhat, the gradient wrt x is
#   dx = r * (gx - mean_row(gx) - xhat * mean_row(gx * xhat))     (no mean_row(gx) term for RMS).
# xhat and r are recomputed from x rather than kept from the forward pass.
def _normalize_rows(g, x: NodeId, eps: float, center: bool) -> tuple[NodeId, NodeId]:
    m, n = g.node(x).ty.shape
    if center:
        x = g.sub(x, g.broadcast_to(g.affine(g.row_sum(x), 1.0 / n, 0.0), [m, n]))
    var = g.affine(g.row_sum(g.mul(x, x)), 1.0 / n, float(eps))
    r = g.broadcast_to(g.recip(g.sqrt(var)), [m, n])
    return g.mul(x, r), r


def _rows_backward(g, xhat: NodeId, r: NodeId, gx: NodeId, center: bool) -> NodeId:
    m, n = g.node(xhat).ty.shape

    def row_mean(v: NodeId) -> NodeId:
        return g.broadcast_to(g.affine(g.row_sum(v), 1.0 / n, 0.0), [m, n])

    t = g.sub(gx, g.mul(xhat, row_mean(g.mul(gx, xhat))))
    if center:
        t = g.sub(t, row_mean(gx))
    return g.mul(r, t)


@rms_norm.vjp
def _(g, node, dy):
    x, w = node.inputs
    eps = node.attrs["eps"]
    return [g.apply("rms_norm_grad", x, w, dy, eps=eps, index=k) for k in (0, 1)]


# rms_norm's backward as one com.meganeura.RMSNormGrad kernel with two outputs: with r = 1 / sqrt(mean(x^2) + eps)
# recomputed per row (float32 math in every element type) and gx = dy * weight,
#   dx = r * gx - x * r^3 * mean(gx * x)          (the _rows_backward formula without centring)
#   dweight = sum over rows of dy * x * r          (= dy * xhat, the weight's gradient)
# from one pass over x and dy instead of about fifteen nodes that recompute xhat. dweight is a
# reduction over every row, accumulated and written in float32 whatever type the op runs in (the
# kernels reduce in two fixed-order stages: deterministic, no atomics). As swiglu_grad, one IR node
# per output (``index`` 0: dx, 1: dweight) sharing their inputs, lowered to the single ONNX node.
rms_norm_grad = op(
    "rms_norm_grad",
    ("x", "weight", "dy"),
    differentiable=False,
    attrs=(EPS, optional(int_attr("index", 0, 1, doc="0: dx, 1: dweight (sum over rows of dy * xhat)"), 0)),
    custom=CustomOp(
        "RMSNormGrad",
        (TensorArg("x"), TensorArg("weight"), TensorArg("dy")),
        (TensorArg("dx"), TensorArg("dweight", "float32", optional=True)),
        (float_attr("epsilon", 0, lo_open=True, doc="added to the mean square"),),
    ),
    half_types=frozenset({"float16", "bfloat16"}),
)


@rms_norm_grad.shape
def _(x: TensorType, weight: TensorType, dy: TensorType, *, eps: float, index: int = 0) -> TensorType:
    _row_params("rms_norm_grad", x, eps, weight=weight)
    require(dy.shape == x.shape, "rms_norm_grad", f"dy must have the shape of x {list(x.shape)}, got {list(dy.shape)}")
    return x if index == 0 else weight


def rms_norm_grad_ref(x: np.ndarray, w: np.ndarray, dy: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dweight) of ``rms_norm(x, w, eps)`` for the cotangent dy."""
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    gx = dy * w
    return r * gx - x * r**3 * np.mean(gx * x, axis=-1, keepdims=True), np.sum(dy * x * r, axis=0)


rms_norm_grad.numpy(lambda x, w, dy, *, eps, index=0: rms_norm_grad_ref(x, w, dy, eps)[index].astype(x.dtype))


@rms_norm_grad.function_body
def rms_norm_grad_function(opset: int):
    def body(ctx, x, w, dy):
        axis = ctx.ints([-1])
        ms = ctx.op("ReduceMean", ctx.op("Mul", x, x), axis, keepdims=1)
        r = ctx.op("Reciprocal", ctx.op("Sqrt", ctx.op("Add", ms, ctx.attr_ref("epsilon", "float"))))
        gx = ctx.op("Mul", dy, w)
        m = ctx.op("ReduceMean", ctx.op("Mul", gx, x), axis, keepdims=1)
        r3m = ctx.op("Mul", ctx.op("Mul", ctx.op("Mul", r, r), r), m)
        dx = ctx.op("Sub", ctx.op("Mul", r, gx), ctx.op("Mul", x, r3m))
        dw = ctx.op("ReduceSum", ctx.op("Mul", dy, ctx.op("Mul", x, r)), ctx.ints([0]), keepdims=0)
        return [dx, dw]  # function bodies run in float32 (the precision pass casts around them)

    return function_body(rms_norm_grad.custom, body, opset)


@rms_norm_grad.onnx
def _(ctx, node, x, w, dy):
    eps = float(node.attrs["eps"])

    def emit():
        ctx.use_function(rms_norm_grad_function(ctx.opset))
        return ctx.op("RMSNormGrad", x, w, dy, domain=CUSTOM_DOMAIN, outputs=2, epsilon=eps)

    return ctx.shared_node(("RMSNormGrad", x, w, dy, eps), emit)[node.attrs.get("index", 0)]


def _ex_rms_grad(g, f, m, n, eps, index=0):
    x, w = f.param(g, "x", [m, n]), f.param(g, "weight", [n], 0.5, 1.5)
    return g.apply("rms_norm_grad", x, w, f.input(g, "dy", [m, n]), eps=eps, index=index)


examples(rms_norm_grad, _ex_rms_grad, {"m": 3, "n": 8, "eps": 1e-5}, {"m": 5, "n": 3, "eps": 1e-2, "index": 1})


@layer_norm.vjp
def _(g, node, dy):
    x, w, _b = node.inputs
    xhat, r = _normalize_rows(g, x, node.attrs["eps"], center=True)
    gx = g.mul(dy, g.broadcast_to(w, g.node(x).ty.shape))
    return [_rows_backward(g, xhat, r, gx, center=True), g.col_sum(g.mul(dy, xhat)), g.col_sum(dy)]


@group_norm.vjp
def _(g, node, dy):
    x, w, _b = node.inputs
    a = node.attrs
    batch, c, s, groups = a["batch"], a["channels"], a["spatial"], a["num_groups"]
    # Rows of [batch*groups, (channels/groups)*spatial] are normalised; rows of [batch*channels,
    # spatial] see one weight each.
    xhat_g, r = _normalize_rows(g, g.reshape(x, [batch * groups, c // groups * s]), a["eps"], center=True)
    xhat = g.reshape(xhat_g, [batch * c, s])
    dy2 = g.reshape(dy, [batch * c, s])
    w_rows = g.reshape(g.broadcast_to(g.reshape(w, [1, c]), [batch, c]), [batch * c, 1])
    gx = g.reshape(g.mul(dy2, g.broadcast_to(w_rows, [batch * c, s])), [batch * groups, c // groups * s])
    dx = g.reshape(_rows_backward(g, xhat_g, r, gx, center=True), g.node(x).ty.shape)

    def per_channel(v: NodeId) -> NodeId:  # [batch*c, s] -> [c]
        return g.col_sum(g.reshape(g.row_sum(v), [batch, c]))

    return [dx, per_channel(g.mul(dy2, xhat)), per_channel(dy2)]


class NormBuilders:
    def rms_norm(self, x: NodeId, weight: NodeId, eps: float) -> NodeId:
        """``x / sqrt(mean(x^2) + eps) * weight`` per row; x ``[M, N]``, weight ``[N]``."""
        return self.apply("rms_norm", x, weight, eps=eps)

    def layer_norm(self, x: NodeId, weight: NodeId, bias: NodeId, eps: float) -> NodeId:
        """``(x - mean) / sqrt(var + eps) * weight + bias`` per row (biased variance)."""
        return self.apply("layer_norm", x, weight, bias, eps=eps)

    def group_norm(
        self, x: NodeId, weight: NodeId, bias: NodeId, batch: int, channels: int, spatial: int, num_groups: int, eps: float
    ) -> NodeId:
        """Group normalisation of flat NCHW x (``batch*channels*spatial`` elements, spatial = H*W)."""
        return self.apply("group_norm", x, weight, bias, batch=batch, channels=channels, spatial=spatial, num_groups=num_groups, eps=eps)
