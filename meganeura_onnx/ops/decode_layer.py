"""A LLaMA decoder layer's decode step in one op: ``com.meganeura.DecodeLayer``.

``decode_layer(x, attn_norm, w_q, w_k, w_v, w_o, mlp_norm, w_gate, w_up, w_down, k_cache, v_cache,
kv_pos)`` is exactly the composition of the decode-step ops a layer otherwise runs as five kernels::

    q, k, v  = rms_norm_linear(x, attn_norm, [w_q, w_k, w_v], eps, trans_b)
    a, K, V  = rope_cached_attention(q, k, v, k_cache, v_cache, kv_pos, heads, head_dim, theta)
    x1       = linear_residual(a, w_o, x, trans_b)
    h        = rms_norm_swiglu(x1, mlp_norm, w_gate, w_up, eps, trans_b)
    y        = linear_residual(h, w_down, x1, trans_b)

with every intermediate rounded to the element type where those ops round it. x is ``[R, D]``; with
caches ``[max_seq, KVH*hd]`` (one sequence, kv_pos U32 ``[1]``) its R rows are that sequence's rows at
positions ``kv_pos + t``; with caches ``[B, max_seq, KVH*hd]`` (a batch, kv_pos U32 ``[B]``) they are B
sequences' S = R / B rows stacked, row t of sequence b at position ``kv_pos[b] + t`` (the attention sees
q/k/v as ``[B, S, width]``). Weights are ``[out, in]`` with ``trans_b`` (torch's Linear layout), else
``[in, out]``.

As ``rope_cached_attention``, the ONNX node has three outputs (y and both caches, each cache written in
place) and the Graph IR one IR node per output with an ``index`` attribute (0: y, 1: the K cache, 2: the
V cache); the lowering emits the ONNX node once. ``transforms.decode_layer_fusion`` makes it from the
five fused ops in CUDA decode steps. No gradient (KV caches appear in inference graphs only).
"""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .decode_linear import HALF, ONNX_ATTRS, TRANS_B, _gemm, _projection, linear_residual, rms_norm_linear, rms_norm_swiglu
from .kv_cache import HEADS, cache_write_body, cached_attention_body
from .lowering import CUSTOM_DOMAIN, function_body
from .norm import EPS
from .rope import HEAD_DIM, THETA, rotate_body
from .rope_attention import rope_cached_attention, rope_cached_attention_ref
from .table import CustomOp, Position, TensorArg, examples, int_attr, op, optional, rank, require

INPUTS = ("x", "attn_norm", "w_q", "w_k", "w_v", "w_o", "mlp_norm", "w_gate", "w_up", "w_down", "k_cache", "v_cache", "kv_pos")
OUTPUTS = ("y", "k_cache_out", "v_cache_out")
ATTENTION_ATTRS = (*HEADS[:2], HEAD_DIM, THETA)
# ONNX: the attention's four, the norms' epsilon and trans_b (default 1: torch's layout); check_positions
# is added by op() as for every op with positions.
ONNX_ATTRS_ALL = (*ATTENTION_ATTRS, ONNX_ATTRS[0], optional(ONNX_ATTRS[1], 1))

decode_layer = op(
    "decode_layer",
    INPUTS,
    u32=("kv_pos",),
    differentiable=False,
    attrs=(*ATTENTION_ATTRS, EPS, TRANS_B, int_attr("index", 0, 2, doc="which output this node is: 0 y, 1 the K cache, 2 the V cache")),
    custom=CustomOp(
        "DecodeLayer",
        tuple(TensorArg(n) for n in INPUTS[:-1]) + (TensorArg("kv_pos", "index"),),
        tuple(TensorArg(n) for n in OUTPUTS),
        ONNX_ATTRS_ALL,
        inplace_pairs=(("k_cache", "k_cache_out"), ("v_cache", "v_cache_out")),
        relations=("num_heads % num_kv_heads == 0",),
    ),
    inplace_by_index={1: "k_cache", 2: "v_cache"},
    positions=(Position("kv_pos", rows="x", within="k_cache", sequences="k_cache"),),
    half_types=HALF,
)


def _norm_weight(name: str, arg: str, t: TensorType, x: TensorType) -> None:
    require(t.shape == (x.shape[1],), name, f"{arg} must be [{x.shape[1]}] (x is {list(x.shape)}), got {list(t.shape)}")


def _width(name: str, arg: str, t: TensorType, want: int, what: str) -> None:
    require(t.shape[1] == want, name, f"{arg} must give {want} columns ({what}), got {t.shape[1]} from its shape")


def _attention_rows(name: str, x: TensorType, k_cache: TensorType, widths: tuple[int, int]) -> tuple[TensorType, TensorType]:
    """q and k/v as the attention sees them: ``[R, width]`` (2-D caches) or ``[B, S, width]`` (3-D)."""
    require(k_cache.rank() in (2, 3), name, f"k_cache must be [max_seq, width] or [B, max_seq, width], got {list(k_cache.shape)}")
    rows = x.shape[0]
    if k_cache.rank() == 2:
        return TensorType((rows, widths[0])), TensorType((rows, widths[1]))
    b = k_cache.shape[0]
    ok = isinstance(rows, int) and isinstance(b, int) and b > 0 and rows % b == 0
    require(ok, name, f"x's rows must be B*S for the batch of B = {b} caches (k_cache {list(k_cache.shape)}), got x {list(x.shape)}")
    return TensorType((b, rows // b, widths[0])), TensorType((b, rows // b, widths[1]))


@decode_layer.shape
def _(
    x: TensorType,
    attn_norm: TensorType,
    w_q: TensorType,
    w_k: TensorType,
    w_v: TensorType,
    w_o: TensorType,
    mlp_norm: TensorType,
    w_gate: TensorType,
    w_up: TensorType,
    w_down: TensorType,
    k_cache: TensorType,
    v_cache: TensorType,
    kv_pos: TensorType,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    theta: float,
    eps: float,
    trans_b: bool,
    index: int,
) -> TensorType:
    name = "decode_layer"
    rank(name, x, 2, "x")
    _norm_weight(name, "attn_norm", attn_norm, x)
    _norm_weight(name, "mlp_norm", mlp_norm, x)
    qw, kvw = num_heads * head_dim, num_kv_heads * head_dim
    _width(name, "w_q", _projection(name, x, w_q, "w_q", trans_b), qw, f"num_heads {num_heads} * head_dim {head_dim}")
    for arg, w in (("w_k", w_k), ("w_v", w_v)):
        _width(name, arg, _projection(name, x, w, arg, trans_b), kvw, f"num_kv_heads {num_kv_heads} * head_dim {head_dim}")
    a = TensorType((x.shape[0], qw))
    _width(name, "w_o", _projection(name, a, w_o, "w_o", trans_b), x.shape[1], "x's width")
    gate, up = _projection(name, x, w_gate, "w_gate", trans_b), _projection(name, x, w_up, "w_up", trans_b)
    require(gate.shape == up.shape, name, f"w_gate and w_up must give one output width, got {list(gate.shape)} and {list(up.shape)}")
    _width(name, "w_down", _projection(name, gate, w_down, "w_down", trans_b), x.shape[1], "x's width")
    q, kv = _attention_rows(name, x, k_cache, (qw, kvw))
    try:  # rope_cached_attention's cache and kv_pos checks, under this op's name
        rope_cached_attention.shape_rule(
            q, kv, kv, k_cache, v_cache, kv_pos, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, theta=theta, index=0
        )
    except ValueError as e:
        raise ValueError(f"{name}: {str(e).split(': ', 1)[1]}") from None
    return (x, k_cache, v_cache)[index]


def decode_layer_ref(x, attn_norm, w_q, w_k, w_v, w_o, mlp_norm, w_gate, w_up, w_down, k_cache, v_cache, kv_pos, **attrs):
    """(y, k_cache', v_cache') by the five ops' numpy references in sequence."""
    eps, trans_b = attrs.pop("eps"), attrs.pop("trans_b")
    q, k, v = (rms_norm_linear.numpy_ref(x, attn_norm, w_q, w_k, w_v, eps=eps, trans_b=trans_b, index=i) for i in range(3))
    if k_cache.ndim == 3:  # a batch: the rows of B sequences as [B, S, width]
        q, k, v = (t.reshape(k_cache.shape[0], -1, t.shape[-1]) for t in (q, k, v))
    a, kc, vc = rope_cached_attention_ref(q, k, v, k_cache, v_cache, kv_pos, **attrs)
    x1 = linear_residual.numpy_ref(a.reshape(x.shape[0], -1), w_o, x, trans_b=trans_b)
    h = rms_norm_swiglu.numpy_ref(x1, mlp_norm, w_gate, w_up, eps=eps, trans_b=trans_b)
    return linear_residual.numpy_ref(h, w_down, x1, trans_b=trans_b), kc, vc


@decode_layer.numpy
def _(*inputs, index, **attrs):
    return decode_layer_ref(*inputs, **attrs)[index]


@decode_layer.function_body
def decode_layer_function(opset: int):
    """``RMSNormLinear``'s, ``RopeCachedAttention``'s, ``LinearResidual``'s and ``RMSNormSwiGLU``'s bodies in
    sequence; q/k/v reshaped to ``[B, S, width]`` for 3-D caches (their leading dimension), kept 2-D else.
    The norms' epsilon takes x's element type (CastLike), so the body also runs on half tensors where the
    runtime has half kernels for its ops (a kernel library without DecodeLayer under the precision pass)."""

    def _normalized(ctx, x, weight):
        ms = ctx.op("ReduceMean", ctx.op("Mul", x, x), ctx.ints([-1]), keepdims=1)
        rms = ctx.op("Sqrt", ctx.op("Add", ms, ctx.op("CastLike", ctx.attr_ref("epsilon", "float"), ms)))
        return ctx.op("Mul", ctx.op("Div", x, rms), weight)

    def body(ctx, x, attn_norm, w_q, w_k, w_v, w_o, mlp_norm, w_gate, w_up, w_down, k_cache, v_cache, kv_pos):
        xn = _normalized(ctx, x, attn_norm)
        lead = ctx.op("Concat", ctx.op("Shape", k_cache, end=-2), ctx.ints([-1]), axis=0)  # [] or [B], then -1 rows

        def seqs(t: str) -> str:
            return ctx.op("Reshape", t, ctx.op("Concat", lead, ctx.op("Shape", t, start=-1), axis=0))

        q, k, v = (seqs(_gemm(ctx, xn, w)) for w in (w_q, w_k, w_v))
        starts = ctx.op("Reshape", ctx.to_int64(kv_pos), ctx.ints([-1]))  # [n]: sequence b's row 0
        k_all = cache_write_body(ctx, rotate_body(ctx, k, starts), k_cache, kv_pos)
        v_all = cache_write_body(ctx, v, v_cache, kv_pos)
        a = cached_attention_body(ctx, rotate_body(ctx, q, starts), k_all, v_all, kv_pos)
        a = ctx.op("Reshape", a, ctx.op("Concat", ctx.op("Shape", x, end=1), ctx.ints([-1]), axis=0))  # [R, H*hd]
        x1 = _gemm(ctx, a, w_o, x)
        xn1 = _normalized(ctx, x1, mlp_norm)
        gate = _gemm(ctx, xn1, w_gate)
        h = ctx.op("Mul", ctx.op("Mul", gate, ctx.op("Sigmoid", gate)), _gemm(ctx, xn1, w_up))
        return [_gemm(ctx, h, w_down, x1), k_all, v_all]

    return function_body(decode_layer.custom, body, opset)


@decode_layer.onnx
def _(ctx, node, *ins):
    a = node.attrs

    def emit():
        ctx.use_function(decode_layer_function(ctx.opset))
        return ctx.op(
            "DecodeLayer",
            *ins[:-1],
            ins[-1],
            domain=CUSTOM_DOMAIN,
            outputs=len(OUTPUTS),
            num_heads=a["num_heads"],
            num_kv_heads=a["num_kv_heads"],
            head_dim=a["head_dim"],
            theta=float(a["theta"]),
            epsilon=float(a["eps"]),
            trans_b=int(bool(a["trans_b"])),
        )

    return ctx.shared_node(("DecodeLayer", *ins, a["eps"], a["trans_b"]), emit)[a["index"]]


def _ex(g, f, max_seq, t, d, h, kvh, hd, inter, kv_pos, trans_b=True, index=0):
    """One layer: x ``[B*t, d]`` (B = len(kv_pos) for a list, 2-D caches for an int), weights scaled to
    outputs of order one."""
    lead = [] if isinstance(kv_pos, int) else [len(kv_pos)]
    positions = [kv_pos] if isinstance(kv_pos, int) else list(kv_pos)
    pos = g.input_u32("kv_pos", [len(positions)])
    f.inputs["kv_pos"] = np.array(positions, dtype=np.uint32)
    rows = t if isinstance(t, str) else len(positions) * t

    def weight(name, n_in, n_out):
        s = 1.0 / np.sqrt(n_in)
        return f.param(g, name, [n_out, n_in] if trans_b else [n_in, n_out], -s, s)

    x = f.param(g, "x", [rows, d], -2, 2)
    norms = f.param(g, "attn_norm", [d], 0.5, 1.5), f.param(g, "mlp_norm", [d], 0.5, 1.5)
    wq, wk, wv = weight("w_q", d, h * hd), weight("w_k", d, kvh * hd), weight("w_v", d, kvh * hd)
    wo, wg, wu, wd = weight("w_o", h * hd, d), weight("w_gate", d, inter), weight("w_up", d, inter), weight("w_down", inter, d)
    caches = [f.input(g, n, [*lead, max_seq, kvh * hd]) for n in ("k_cache", "v_cache")]
    outs = g.decode_layer(x, norms[0], wq, wk, wv, wo, norms[1], wg, wu, wd, *caches, pos, h, kvh, hd, 10000.0, 1e-5, trans_b)
    return outs[index]


examples(
    decode_layer,
    _ex,
    {"max_seq": 8, "t": 1, "d": 16, "h": 4, "kvh": 2, "hd": 8, "inter": 24, "kv_pos": 0},
    {"max_seq": 8, "t": 1, "d": 12, "h": 3, "kvh": 1, "hd": 8, "inter": 20, "kv_pos": 7, "trans_b": False},
    {"max_seq": 10, "t": 3, "d": 16, "h": 2, "kvh": 1, "hd": 16, "inter": 24, "kv_pos": 4},
    {"max_seq": 8, "t": 1, "d": 16, "h": 4, "kvh": 2, "hd": 8, "inter": 24, "kv_pos": [7, 0, 3]},  # a batch at its own positions
    {"max_seq": 8, "t": 1, "d": 16, "h": 4, "kvh": 2, "hd": 8, "inter": 24, "kv_pos": 5, "index": 1},  # the K cache after the step
    {"max_seq": 9, "t": 2, "d": 16, "h": 2, "kvh": 1, "hd": 16, "inter": 24, "kv_pos": [6, 1], "index": 2},  # V caches of a batch
)


class DecodeLayerBuilders:
    def decode_layer(
        self,
        x: NodeId,
        attn_norm: NodeId,
        w_q: NodeId,
        w_k: NodeId,
        w_v: NodeId,
        w_o: NodeId,
        mlp_norm: NodeId,
        w_gate: NodeId,
        w_up: NodeId,
        w_down: NodeId,
        k_cache: NodeId,
        v_cache: NodeId,
        kv_pos: NodeId,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        theta: float,
        eps: float,
        trans_b: bool = True,
    ) -> tuple[NodeId, NodeId, NodeId]:
        """One LLaMA decoder layer's decode step: (y, k_cache', v_cache').

        x ``[R, D]``; norms ``[D]``; weights ``[out, in]`` with ``trans_b`` (else ``[in, out]``): w_q
        ``H*hd x D``, w_k/w_v ``KVH*hd x D``, w_o ``D x H*hd``, w_gate/w_up ``I x D``, w_down ``D x I``;
        caches ``[max_seq, KVH*hd]`` with kv_pos U32 ``[1]``, or ``[B, max_seq, KVH*hd]`` with kv_pos U32
        ``[B]`` (x's rows are then B sequences' R/B rows stacked). The same as ``rms_norm_linear`` (q, k, v)
        -> ``rope_cached_attention`` -> ``linear_residual`` (o_proj, + x) -> ``rms_norm_swiglu`` ->
        ``linear_residual`` (down_proj); both caches are written in place."""
        attrs = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim, "theta": theta, "eps": eps, "trans_b": trans_b}
        ins = (x, attn_norm, w_q, w_k, w_v, w_o, mlp_norm, w_gate, w_up, w_down, k_cache, v_cache, kv_pos)
        return tuple(self.apply("decode_layer", *ins, **attrs, index=i) for i in range(len(OUTPUTS)))  # type: ignore[return-value]
