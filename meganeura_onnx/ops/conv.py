"""Convolution family on flat NCHW tensors (dimensions passed explicitly, as in Meganeura)."""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .table import dims, examples, int_attr, op, require, static_shape

CONV = (*dims("batch", "in_channels", "in_h", "in_w", "out_channels", "kernel_h", "kernel_w", "stride"), int_attr("padding", 0))
CHANNEL_PAIR = dims("batch", "channels_a", "channels_b", "spatial")
IMAGE = dims("batch", "channels", "in_h", "in_w")
conv2d = op("conv2d", ("x", "kernel"), attrs=CONV)
concat = op("concat", ("a", "b"), attrs=CHANNEL_PAIR)
split_a = op("split_a", ("x",), attrs=CHANNEL_PAIR)
split_b = op("split_b", ("x",), attrs=CHANNEL_PAIR)
upsample_2x = op("upsample_2x", ("x",), attrs=IMAGE)


def _elements(name: str, arg: str, t: TensorType, want: int, formula: str) -> None:
    static_shape(name, t, arg)  # flat NCHW ops take their sizes as static ints
    require(t.num_elements() == want, name, f"{arg} must hold {formula} = {want} elements, got shape {list(t.shape)}")


def conv_out_hw(in_h: int, in_w: int, kernel_h: int, kernel_w: int, stride: int, padding: int) -> tuple[int, int]:
    return (in_h + 2 * padding - kernel_h) // stride + 1, (in_w + 2 * padding - kernel_w) // stride + 1


@conv2d.shape
def _(x, kernel, *, batch, in_channels, in_h, in_w, out_channels, kernel_h, kernel_w, stride, padding):
    _elements("conv2d", "x", x, batch * in_channels * in_h * in_w, "batch*in_channels*in_h*in_w")
    _elements("conv2d", "kernel", kernel, out_channels * in_channels * kernel_h * kernel_w, "out_channels*in_channels*kernel_h*kernel_w")
    oh, ow = conv_out_hw(in_h, in_w, kernel_h, kernel_w, stride, padding)
    require(
        oh > 0 and ow > 0, "conv2d", f"the kernel {kernel_h}x{kernel_w} does not fit the padded input {in_h}x{in_w} (padding {padding})"
    )
    return TensorType((batch * out_channels * oh * ow,))


@conv2d.numpy
def _(x, kernel, *, batch, in_channels, in_h, in_w, out_channels, kernel_h, kernel_w, stride, padding):
    xs = np.pad(x.reshape(batch, in_channels, in_h, in_w), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    k = kernel.reshape(out_channels, in_channels, kernel_h, kernel_w)
    oh, ow = conv_out_hw(in_h, in_w, kernel_h, kernel_w, stride, padding)
    out = np.zeros((batch, out_channels, oh, ow), dtype=x.dtype)
    for i in range(kernel_h):
        for j in range(kernel_w):
            patch = xs[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += np.einsum("nchw,oc->nohw", patch, k[:, :, i, j])
    return out.reshape(-1)


@conv2d.onnx
def _(ctx, node, x, kernel):
    a = node.attrs
    x4 = ctx.reshape(x, [a["batch"], a["in_channels"], a["in_h"], a["in_w"]])
    k4 = ctx.reshape(kernel, [a["out_channels"], a["in_channels"], a["kernel_h"], a["kernel_w"]])
    p = a["padding"]
    y = ctx.op("Conv", x4, k4, strides=[a["stride"]] * 2, pads=[p, p, p, p], kernel_shape=[a["kernel_h"], a["kernel_w"]])
    return ctx.reshape(y, [-1])


def _ex_conv(g, f, n, c, h, w, o, k, stride, padding):
    x = f.param(g, "x", [n * c * h * w])
    kern = f.param(g, "kernel", [o * c * k * k])
    return g.conv2d(x, kern, n, c, h, w, o, k, k, stride, padding)


examples(
    conv2d,
    _ex_conv,
    {"n": 2, "c": 3, "h": 5, "w": 4, "o": 2, "k": 3, "stride": 1, "padding": 1},
    {"n": 1, "c": 2, "h": 7, "w": 6, "o": 3, "k": 2, "stride": 2, "padding": 0},
)


@concat.shape
def _(a, b, *, batch, channels_a, channels_b, spatial):
    _elements("concat", "a", a, batch * channels_a * spatial, "batch*channels_a*spatial")
    _elements("concat", "b", b, batch * channels_b * spatial, "batch*channels_b*spatial")
    return TensorType((batch * (channels_a + channels_b) * spatial,))


concat.numpy(
    lambda a, b, *, batch, channels_a, channels_b, spatial: np.concatenate(
        [a.reshape(batch, channels_a, spatial), b.reshape(batch, channels_b, spatial)], axis=1
    ).reshape(-1)
)


@concat.onnx
def _(ctx, node, a, b):
    n, s = node.attrs["batch"], node.attrs["spatial"]
    return ctx.reshape(ctx.op("Concat", ctx.reshape(a, [n, -1, s]), ctx.reshape(b, [n, -1, s]), axis=1), [-1])


def _split(d, first: bool):
    name = d.name

    @d.shape
    def _(x, *, batch, channels_a, channels_b, spatial):
        _elements(name, "x", x, batch * (channels_a + channels_b) * spatial, "batch*(channels_a+channels_b)*spatial")
        return TensorType((batch * (channels_a if first else channels_b) * spatial,))

    @d.numpy
    def _(x, *, batch, channels_a, channels_b, spatial):
        x3 = x.reshape(batch, channels_a + channels_b, spatial)
        return (x3[:, :channels_a] if first else x3[:, channels_a:]).reshape(-1)

    @d.onnx
    def _(ctx, node, x):
        a = node.attrs
        lo, hi = (0, a["channels_a"]) if first else (a["channels_a"], a["channels_a"] + a["channels_b"])
        x3 = ctx.reshape(x, [a["batch"], a["channels_a"] + a["channels_b"], a["spatial"]])
        return ctx.reshape(ctx.op("Slice", x3, ctx.ints([lo]), ctx.ints([hi]), ctx.ints([1])), [-1])

    examples(
        d,
        lambda g, f, n, ca, cb, s: g.apply(name, f.param(g, "x", [n * (ca + cb) * s]), batch=n, channels_a=ca, channels_b=cb, spatial=s),
        {"n": 2, "ca": 3, "cb": 1, "s": 4},
        {"n": 1, "ca": 2, "cb": 5, "s": 3},
    )


_split(split_a, True)
_split(split_b, False)
examples(
    concat,
    lambda g, f, n, ca, cb, s: g.concat(f.param(g, "a", [n * ca * s]), f.param(g, "b", [n * cb * s]), n, ca, cb, s),
    {"n": 2, "ca": 3, "cb": 1, "s": 4},
    {"n": 1, "ca": 2, "cb": 5, "s": 3},
)


@upsample_2x.shape
def _(x, *, batch, channels, in_h, in_w):
    _elements("upsample_2x", "x", x, batch * channels * in_h * in_w, "batch*channels*in_h*in_w")
    return TensorType((batch * channels * in_h * in_w * 4,))


upsample_2x.numpy(
    lambda x, *, batch, channels, in_h, in_w: x.reshape(batch, channels, in_h, in_w).repeat(2, axis=2).repeat(2, axis=3).reshape(-1)
)


@upsample_2x.onnx
def _(ctx, node, x):
    a = node.attrs
    n, c, h, w = a["batch"], a["channels"], a["in_h"], a["in_w"]
    x6 = ctx.reshape(x, [n, c, h, 1, w, 1])
    return ctx.reshape(ctx.op("Expand", x6, ctx.ints([1, 1, 1, 2, 1, 2])), [-1])


examples(
    upsample_2x,
    lambda g, f, n, c, h, w: g.upsample_2x(f.param(g, "x", [n * c * h * w]), n, c, h, w),
    {"n": 2, "c": 3, "h": 2, "w": 3},
    {"n": 1, "c": 1, "h": 4, "w": 1},
)


# -- gradients ------------------------------------------------------------------------------------
conv2d_grad_input = op("conv2d_grad_input", ("dy", "kernel"), differentiable=False, attrs=CONV)
conv2d_grad_kernel = op("conv2d_grad_kernel", ("x", "dy"), differentiable=False, attrs=CONV)
sum_pool_2x = op("sum_pool_2x", ("x",), attrs=IMAGE)
CONV_ATTRS = ("batch", "in_channels", "in_h", "in_w", "out_channels", "kernel_h", "kernel_w", "stride", "padding")


def _like(g, v: NodeId, x: NodeId) -> NodeId:
    """v reshaped to x's shape (flat NCHW operands may be given in any shape with the right size)."""
    shape = g.node(x).ty.shape
    return v if g.node(v).ty.shape == shape else g.reshape(v, shape)


@conv2d.vjp
def _(g, node, dy):
    x, kernel = node.inputs
    a = {k: node.attrs[k] for k in CONV_ATTRS}
    dx = g.apply("conv2d_grad_input", dy, kernel, **a)
    dk = g.apply("conv2d_grad_kernel", x, dy, **a)
    return [_like(g, dx, x), _like(g, dk, kernel)]


def _dy_check(name: str, dy: TensorType, a: dict) -> tuple[int, int]:
    oh, ow = conv_out_hw(a["in_h"], a["in_w"], a["kernel_h"], a["kernel_w"], a["stride"], a["padding"])
    _elements(name, "dy", dy, a["batch"] * a["out_channels"] * oh * ow, "batch*out_channels*out_h*out_w")
    return oh, ow


@conv2d_grad_input.shape
def _(dy, kernel, **a):
    _dy_check("conv2d_grad_input", dy, a)
    _elements(
        "conv2d_grad_input",
        "kernel",
        kernel,
        a["out_channels"] * a["in_channels"] * a["kernel_h"] * a["kernel_w"],
        "out_channels*in_channels*kernel_h*kernel_w",
    )
    return TensorType((a["batch"] * a["in_channels"] * a["in_h"] * a["in_w"],))


@conv2d_grad_kernel.shape
def _(x, dy, **a):
    _dy_check("conv2d_grad_kernel", dy, a)
    _elements("conv2d_grad_kernel", "x", x, a["batch"] * a["in_channels"] * a["in_h"] * a["in_w"], "batch*in_channels*in_h*in_w")
    return TensorType((a["out_channels"] * a["in_channels"] * a["kernel_h"] * a["kernel_w"],))


def _windows(a: dict):
    """(i, j, slice of the padded input seen by kernel tap (i, j)) for every tap."""
    oh, ow = conv_out_hw(a["in_h"], a["in_w"], a["kernel_h"], a["kernel_w"], a["stride"], a["padding"])
    s = a["stride"]
    for i in range(a["kernel_h"]):
        for j in range(a["kernel_w"]):
            yield i, j, (slice(None), slice(None), slice(i, i + s * oh, s), slice(j, j + s * ow, s))


@conv2d_grad_input.numpy
def _(dy, kernel, **a):
    n, c, h, w, p = a["batch"], a["in_channels"], a["in_h"], a["in_w"], a["padding"]
    oh, ow = conv_out_hw(h, w, a["kernel_h"], a["kernel_w"], a["stride"], p)
    dy4 = dy.reshape(n, a["out_channels"], oh, ow)
    k = kernel.reshape(a["out_channels"], c, a["kernel_h"], a["kernel_w"])
    dxp = np.zeros((n, c, h + 2 * p, w + 2 * p), dtype=dy.dtype)
    for i, j, win in _windows(a):
        dxp[win] += np.einsum("nohw,oc->nchw", dy4, k[:, :, i, j])
    return dxp[:, :, p : p + h, p : p + w].reshape(-1)


@conv2d_grad_kernel.numpy
def _(x, dy, **a):
    n, c, h, w, p = a["batch"], a["in_channels"], a["in_h"], a["in_w"], a["padding"]
    oh, ow = conv_out_hw(h, w, a["kernel_h"], a["kernel_w"], a["stride"], p)
    xs = np.pad(x.reshape(n, c, h, w), ((0, 0), (0, 0), (p, p), (p, p)))
    dy4 = dy.reshape(n, a["out_channels"], oh, ow)
    dk = np.zeros((a["out_channels"], c, a["kernel_h"], a["kernel_w"]), dtype=x.dtype)
    for i, j, win in _windows(a):
        dk[:, :, i, j] = np.einsum("nchw,nohw->oc", xs[win], dy4)
    return dk.reshape(-1)


@conv2d_grad_input.onnx
def _(ctx, node, dy, kernel):
    a = node.attrs
    oh, ow = conv_out_hw(a["in_h"], a["in_w"], a["kernel_h"], a["kernel_w"], a["stride"], a["padding"])
    s, p = a["stride"], a["padding"]
    dy4 = ctx.reshape(dy, [a["batch"], a["out_channels"], oh, ow])
    k4 = ctx.reshape(kernel, [a["out_channels"], a["in_channels"], a["kernel_h"], a["kernel_w"]])
    # output_padding restores the rows/columns a strided forward conv never reached.
    extra = [(a["in_h"] + 2 * p - a["kernel_h"]) % s, (a["in_w"] + 2 * p - a["kernel_w"]) % s]
    y = ctx.op(
        "ConvTranspose", dy4, k4, strides=[s, s], pads=[p, p, p, p], output_padding=extra, kernel_shape=[a["kernel_h"], a["kernel_w"]]
    )
    return ctx.reshape(y, [-1])


@conv2d_grad_kernel.onnx
def _(ctx, node, x, dy):
    a = node.attrs
    oh, ow = conv_out_hw(a["in_h"], a["in_w"], a["kernel_h"], a["kernel_w"], a["stride"], a["padding"])
    s, p = a["stride"], a["padding"]
    # dK[o, c] = conv of x (batch as channels) with dy (batch as channels) dilated by the stride.
    xt = ctx.op("Transpose", ctx.reshape(x, [a["batch"], a["in_channels"], a["in_h"], a["in_w"]]), perm=[1, 0, 2, 3])
    dyt = ctx.op("Transpose", ctx.reshape(dy, [a["batch"], a["out_channels"], oh, ow]), perm=[1, 0, 2, 3])
    full = ctx.op("Conv", xt, dyt, pads=[p, p, p, p], dilations=[s, s], strides=[1, 1])  # [C, O, >=kH, >=kW]
    dk = ctx.op("Slice", full, ctx.ints([0, 0]), ctx.ints([a["kernel_h"], a["kernel_w"]]), ctx.ints([2, 3]))
    return ctx.reshape(ctx.op("Transpose", dk, perm=[1, 0, 2, 3]), [-1])


def _ex_conv_grad(g, f, which, n, c, h, w, o, k, stride, padding):
    a = {
        "batch": n,
        "in_channels": c,
        "in_h": h,
        "in_w": w,
        "out_channels": o,
        "kernel_h": k,
        "kernel_w": k,
        "stride": stride,
        "padding": padding,
    }
    oh, ow = conv_out_hw(h, w, k, k, stride, padding)
    dy = f.param(g, "dy", [n * o * oh * ow])
    if which == "input":
        return g.apply("conv2d_grad_input", dy, f.param(g, "kernel", [o * c * k * k]), **a)
    return g.apply("conv2d_grad_kernel", f.param(g, "x", [n * c * h * w]), dy, **a)


for _which, _d in (("input", conv2d_grad_input), ("kernel", conv2d_grad_kernel)):
    examples(
        _d,
        lambda g, f, _which=_which, **kw: _ex_conv_grad(g, f, _which, **kw),
        {"n": 2, "c": 3, "h": 5, "w": 4, "o": 2, "k": 3, "stride": 1, "padding": 1},
        {"n": 1, "c": 2, "h": 7, "w": 6, "o": 3, "k": 2, "stride": 2, "padding": 0},
        {"n": 1, "c": 1, "h": 6, "w": 5, "o": 2, "k": 3, "stride": 2, "padding": 1},
    )

concat.vjp(
    lambda g, node, dy: [_like(g, g.split_a(dy, **node.attrs), node.inputs[0]), _like(g, g.split_b(dy, **node.attrs), node.inputs[1])]
)


def _split_vjp(first: bool):
    def rule(g, node, dy):
        a = node.attrs
        other = g.zeros([a["batch"] * (a["channels_b"] if first else a["channels_a"]) * a["spatial"]])
        dx = g.concat(dy, other, **a) if first else g.concat(other, dy, **a)
        return [_like(g, dx, node.inputs[0])]

    return rule


split_a.vjp(_split_vjp(True))
split_b.vjp(_split_vjp(False))
upsample_2x.vjp(lambda g, node, dy: [_like(g, g.sum_pool_2x(dy, **node.attrs), node.inputs[0])])


@sum_pool_2x.shape
def _(x, *, batch, channels, in_h, in_w):
    _elements("sum_pool_2x", "x", x, batch * channels * in_h * in_w * 4, "batch*channels*(2*in_h)*(2*in_w)")
    return TensorType((batch * channels * in_h * in_w,))


sum_pool_2x.numpy(lambda x, *, batch, channels, in_h, in_w: x.reshape(batch, channels, in_h, 2, in_w, 2).sum(axis=(3, 5)).reshape(-1))
sum_pool_2x.onnx(
    lambda ctx, node, x: ctx.reshape(
        ctx.op(
            "ReduceSum",
            ctx.reshape(x, [node.attrs["batch"], node.attrs["channels"], node.attrs["in_h"], 2, node.attrs["in_w"], 2]),
            ctx.ints([3, 5]),
            keepdims=0,
        ),
        [-1],
    )
)
sum_pool_2x.vjp(lambda g, node, dy: [_like(g, g.upsample_2x(dy, **node.attrs), node.inputs[0])])
examples(
    sum_pool_2x,
    lambda g, f, n, c, h, w: g.sum_pool_2x(f.param(g, "x", [n * c * h * w * 4]), n, c, h, w),
    {"n": 2, "c": 3, "h": 2, "w": 3},
    {"n": 1, "c": 1, "h": 4, "w": 1},
)


class ConvBuilders:
    def conv2d(
        self,
        x: NodeId,
        kernel: NodeId,
        batch: int,
        in_channels: int,
        in_h: int,
        in_w: int,
        out_channels: int,
        kernel_h: int,
        kernel_w: int,
        stride: int,
        padding: int,
    ) -> NodeId:
        """2-D convolution of flat NCHW x with flat kernel ``[C_out*C_in*kH*kW]``; zero padding on
        each edge; -> flat ``[N*C_out*oH*oW]``, ``oH = (in_h + 2*padding - kH) // stride + 1``."""
        return self.apply(
            "conv2d",
            x,
            kernel,
            batch=batch,
            in_channels=in_channels,
            in_h=in_h,
            in_w=in_w,
            out_channels=out_channels,
            kernel_h=kernel_h,
            kernel_w=kernel_w,
            stride=stride,
            padding=padding,
        )

    def concat(self, a: NodeId, b: NodeId, batch: int, channels_a: int, channels_b: int, spatial: int) -> NodeId:
        """Concatenate flat NCHW tensors along channels -> ``[N*(Ca+Cb)*H*W]``."""
        return self.apply("concat", a, b, batch=batch, channels_a=channels_a, channels_b=channels_b, spatial=spatial)

    def split_a(self, x: NodeId, batch: int, channels_a: int, channels_b: int, spatial: int) -> NodeId:
        """The first ``channels_a`` channels of a flat NCHW tensor."""
        return self.apply("split_a", x, batch=batch, channels_a=channels_a, channels_b=channels_b, spatial=spatial)

    def split_b(self, x: NodeId, batch: int, channels_a: int, channels_b: int, spatial: int) -> NodeId:
        """The last ``channels_b`` channels of a flat NCHW tensor."""
        return self.apply("split_b", x, batch=batch, channels_a=channels_a, channels_b=channels_b, spatial=spatial)

    def upsample_2x(self, x: NodeId, batch: int, channels: int, in_h: int, in_w: int) -> NodeId:
        """Nearest-neighbour 2x upsampling ``[N, C, H, W] -> [N, C, 2H, 2W]`` (flat)."""
        return self.apply("upsample_2x", x, batch=batch, channels=channels, in_h=in_h, in_w=in_w)

    def sum_pool_2x(self, x: NodeId, batch: int, channels: int, in_h: int, in_w: int) -> NodeId:
        """Sum of each 2x2 block, ``[N, C, 2H, 2W] -> [N, C, H, W]`` (flat; H, W = in_h, in_w):
        the transpose of :meth:`upsample_2x`."""
        return self.apply("sum_pool_2x", x, batch=batch, channels=channels, in_h=in_h, in_w=in_w)
