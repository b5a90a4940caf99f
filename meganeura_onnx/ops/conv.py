"""Convolution family on flat NCHW tensors (dimensions passed explicitly, as in Meganeura)."""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .table import examples, op, positive_int, require

conv2d = op("conv2d", ("x", "kernel"))
concat = op("concat", ("a", "b"))
split_a = op("split_a", ("x",))
split_b = op("split_b", ("x",))
upsample_2x = op("upsample_2x", ("x",))


def _elements(name: str, arg: str, t: TensorType, want: int, formula: str) -> None:
    require(t.num_elements() == want, name, f"{arg} must hold {formula} = {want} elements, got shape {list(t.shape)}")


def _ints(name: str, **values: int) -> None:
    for arg, v in values.items():
        positive_int(name, v, arg)


def conv_out_hw(in_h: int, in_w: int, kernel_h: int, kernel_w: int, stride: int, padding: int) -> tuple[int, int]:
    return (in_h + 2 * padding - kernel_h) // stride + 1, (in_w + 2 * padding - kernel_w) // stride + 1


@conv2d.shape
def _(x, kernel, *, batch, in_channels, in_h, in_w, out_channels, kernel_h, kernel_w, stride, padding):
    _ints(
        "conv2d",
        batch=batch,
        in_channels=in_channels,
        in_h=in_h,
        in_w=in_w,
        out_channels=out_channels,
        kernel_h=kernel_h,
        kernel_w=kernel_w,
        stride=stride,
    )
    require(isinstance(padding, int) and padding >= 0, "conv2d", f"padding must be a non-negative int, got {padding!r}")
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
    _ints("concat", batch=batch, channels_a=channels_a, channels_b=channels_b, spatial=spatial)
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
        _ints(name, batch=batch, channels_a=channels_a, channels_b=channels_b, spatial=spatial)
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
        lambda g, f, n, ca, cb, s: g._emit(name, f.param(g, "x", [n * (ca + cb) * s]), batch=n, channels_a=ca, channels_b=cb, spatial=s),
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
    _ints("upsample_2x", batch=batch, channels=channels, in_h=in_h, in_w=in_w)
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
        return self._emit(
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
        return self._emit("concat", a, b, batch=batch, channels_a=channels_a, channels_b=channels_b, spatial=spatial)

    def split_a(self, x: NodeId, batch: int, channels_a: int, channels_b: int, spatial: int) -> NodeId:
        """The first ``channels_a`` channels of a flat NCHW tensor."""
        return self._emit("split_a", x, batch=batch, channels_a=channels_a, channels_b=channels_b, spatial=spatial)

    def split_b(self, x: NodeId, batch: int, channels_a: int, channels_b: int, spatial: int) -> NodeId:
        """The last ``channels_b`` channels of a flat NCHW tensor."""
        return self._emit("split_b", x, batch=batch, channels_a=channels_a, channels_b=channels_b, spatial=spatial)

    def upsample_2x(self, x: NodeId, batch: int, channels: int, in_h: int, in_w: int) -> NodeId:
        """Nearest-neighbour 2x upsampling ``[N, C, H, W] -> [N, C, 2H, 2W]`` (flat)."""
        return self._emit("upsample_2x", x, batch=batch, channels=channels, in_h=in_h, in_w=in_w)
