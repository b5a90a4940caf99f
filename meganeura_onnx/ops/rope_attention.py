"""The decode step's rope, cache writes and attention in one op: ``com.meganeura.RopeCachedAttention``.

``rope_cached_attention(q, k_new, v_new, k_cache, v_cache, kv_pos)`` is, in one kernel::

    k_all = cache_write(rope(k_new, kv_pos), k_cache, kv_pos)
    v_all = cache_write(v_new, v_cache, kv_pos)
    out = cached_attention(rope(q, kv_pos), k_all, v_all, kv_pos)

with the forms of ``cached_attention`` (one sequence: 2-D ``[T, width]`` rows, caches ``[max_seq, width]``
and kv_pos U32 ``[1]``; a batch: 3-D ``[B, T, width]``, ``[B, max_seq, width]`` and U32 ``[B]``). Row t
of sequence b sits at position ``kv_pos[b] + t`` for the rotation and the write. A LLaMA decode layer
then runs one kernel where it ran four (``Rope`` of q, ``RopeCacheWrite`` of k, ``CacheWrite`` of v,
``CachedAttention``); ``transforms.decode_fusion`` chooses it for decode steps on CUDA.

The ONNX node has three outputs: the attention output and both caches, each cache written in place
(the session binds one buffer as its input and output, as for ``CacheWrite``). The Graph IR has one
output per node, so the op is one IR node per output with an ``index`` attribute (0: attention, 1: the
K cache, 2: the V cache), all sharing their inputs; the lowering emits the one ONNX node once, as
``rms_norm_linear`` does, and nodes 1 and 2 are the caches' state (the op table's ``inplace_by_index``).

Numerics are the unfused ops': the rotated rows are rounded to the element type before the attention
reads them (as the ``Rope`` output is), angles in float32 from ``inv_freq``, attention accumulated in
float32. No gradient (KV caches appear in inference graphs only).

``qkv_rope_cache_write(qkv, k_cache, v_cache, kv_pos)`` (``com.meganeura.QKVRopeCacheWrite``) is the same
minus the attention, for a prefill whose q/k/v projections run as one product (``merge_projections``)::

    q, k, v = split(qkv, (H*hd, KVH*hd, KVH*hd))
    q_rot = rope(q, kv_pos)
    k_all = cache_write(rope(k, kv_pos), k_cache, kv_pos)
    v_all = cache_write(v, v_cache, kv_pos)

one kernel where there were four (``Split``, ``Rope``, ``RopeCacheWrite``, ``CacheWrite``), with three
outputs (``q_rot`` and both caches, written in place) as three IR nodes told apart by ``index``;
``transforms.qkv_rope_fusion`` makes it. ``q_rot`` is rounded to the element type as ``Rope``'s output is.
"""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .attention import check_heads
from .kv_cache import HEADS, _batch_form, cache_write, cache_write_body, cached_attention, cached_attention_body
from .lowering import CUSTOM_DOMAIN, function_body
from .onnx_util import dims
from .rope import HEAD_DIM, THETA, rope, rotate_body
from .table import CustomOp, Position, TensorArg, examples, int_attr, op, require, static_dim

# head_dim is both attention's (<= 1024) and rope's (even); one attribute.
ATTRS = (*HEADS[:2], HEAD_DIM, THETA)
OUTPUTS = ("out", "k_cache", "v_cache")
CACHES_IN_PLACE = {
    "inplace_pairs": (("k_cache", "k_cache_out"), ("v_cache", "v_cache_out")),
    "relations": ("num_heads % num_kv_heads == 0",),
}
"""The ONNX node's part both cache ops share: outputs 1 and 2 are the caches, written over inputs
``k_cache`` and ``v_cache``; the query heads a multiple of the KV heads."""
CACHE_OUTPUTS = {"inplace_by_index": {1: "k_cache", 2: "v_cache"}, "half_types": frozenset({"float16", "bfloat16"})}
"""The op table's part: IR nodes 1 and 2 (by ``index``) are the caches' state; float16 / bfloat16 kernels."""


def _head_attrs(a: dict) -> tuple:
    """The attributes that tell two nodes on the same inputs apart: the index nodes of one op share its
    ONNX node only when these agree too."""
    return tuple(a[k] for k in ("num_heads", "num_kv_heads", "head_dim", "theta"))


rope_cached_attention = op(
    "rope_cached_attention",
    ("q", "k_new", "v_new", "k_cache", "v_cache", "kv_pos"),
    u32=("kv_pos",),
    differentiable=False,
    attrs=(*ATTRS, int_attr("index", 0, 2, doc="which output this node is: 0 attention, 1 the K cache, 2 the V cache")),
    custom=CustomOp(
        "RopeCachedAttention",
        tuple(TensorArg(n) for n in ("q", "k_new", "v_new", "k_cache", "v_cache")) + (TensorArg("kv_pos", "index"),),
        (TensorArg("out"), TensorArg("k_cache_out"), TensorArg("v_cache_out")),
        ATTRS,
        **CACHES_IN_PLACE,
    ),
    **CACHE_OUTPUTS,
    positions=(Position("kv_pos", rows="q", within="k_cache"),),
)


@rope_cached_attention.shape
def _(
    q: TensorType,
    k_new: TensorType,
    v_new: TensorType,
    k_cache: TensorType,
    v_cache: TensorType,
    kv_pos: TensorType,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    theta: float,
    index: int,
) -> TensorType:
    name = "rope_cached_attention"
    try:  # cached_attention's and cache_write's checks, under this op's name
        cached_attention.shape_rule(q, k_cache, v_cache, kv_pos, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim)
        cache_write.shape_rule(k_new, k_cache, kv_pos)
    except ValueError as e:
        raise ValueError(f"{name}: {str(e).split(': ', 1)[1]}") from None
    rows = (*q.shape[:-1], num_kv_heads * head_dim)
    require(
        k_new.shape == rows and v_new.shape == rows,
        name,
        f"k_new and v_new must both be {list(rows)} (q's rows, {num_kv_heads}*{head_dim} wide), got {list(k_new.shape)} and {list(v_new.shape)}",
    )
    return (q, k_cache, v_cache)[index]


def rope_cached_attention_ref(q, k_new, v_new, k_cache, v_cache, kv_pos, *, num_heads, num_kv_heads, head_dim, theta):
    """(out, k_cache', v_cache') by the unfused ops' numpy references."""
    rot = {"theta": theta, "head_dim": head_dim, "offset_static": 0}
    k_all = cache_write.numpy_ref(rope.numpy_ref(k_new, kv_pos, **rot), k_cache, kv_pos)
    v_all = cache_write.numpy_ref(v_new, v_cache, kv_pos)
    heads = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim}
    return cached_attention.numpy_ref(rope.numpy_ref(q, kv_pos, **rot), k_all, v_all, kv_pos, **heads), k_all, v_all


@rope_cached_attention.numpy
def _(q, k_new, v_new, k_cache, v_cache, kv_pos, *, index, **attrs):
    return rope_cached_attention_ref(q, k_new, v_new, k_cache, v_cache, kv_pos, **attrs)[index]


@rope_cached_attention.function_body
def rope_cached_attention_function(opset: int):
    """``Rope``'s, ``CacheWrite``'s and ``CachedAttention``'s bodies in sequence."""

    def body(ctx, q, k_new, v_new, k_cache, v_cache, kv_pos):
        starts = ctx.op("Reshape", ctx.to_int64(kv_pos), ctx.ints([-1]))  # [n]: sequence b's row 0
        k_all = cache_write_body(ctx, rotate_body(ctx, k_new, starts), k_cache, kv_pos)
        v_all = cache_write_body(ctx, v_new, v_cache, kv_pos)
        return [cached_attention_body(ctx, rotate_body(ctx, q, starts), k_all, v_all, kv_pos), k_all, v_all]

    return function_body(rope_cached_attention.custom, body, opset)


@rope_cached_attention.onnx
def _(ctx, node, q, k_new, v_new, k_cache, v_cache, kv_pos):
    a = node.attrs

    def emit():
        ctx.use_function(rope_cached_attention_function(ctx.opset))
        return ctx.op(
            "RopeCachedAttention",
            q,
            k_new,
            v_new,
            k_cache,
            v_cache,
            kv_pos,
            domain=CUSTOM_DOMAIN,
            outputs=len(OUTPUTS),
            num_heads=a["num_heads"],
            num_kv_heads=a["num_kv_heads"],
            head_dim=a["head_dim"],
            theta=float(a["theta"]),
        )

    return ctx.shared_node(("RopeCachedAttention", q, k_new, v_new, k_cache, v_cache, kv_pos, *_head_attrs(a)), emit)[a["index"]]


def _ex(g, f, max_seq, t, h, kvh, hd, kv_pos, index=0):
    lead = [] if isinstance(kv_pos, int) else [len(kv_pos)]
    positions = [kv_pos] if isinstance(kv_pos, int) else list(kv_pos)
    pos = g.input_u32("kv_pos", [len(positions)])
    f.inputs["kv_pos"] = np.array(positions, dtype=np.uint32)
    q = f.param(g, "q", [*lead, t, h * hd])
    k_new, v_new = f.param(g, "k_new", [*lead, t, kvh * hd]), f.param(g, "v_new", [*lead, t, kvh * hd])
    k_cache, v_cache = f.input(g, "k_cache", [*lead, max_seq, kvh * hd]), f.input(g, "v_cache", [*lead, max_seq, kvh * hd])
    return g.rope_cached_attention(q, k_new, v_new, k_cache, v_cache, pos, h, kvh, hd, 10000.0)[index]


examples(
    rope_cached_attention,
    _ex,
    {"max_seq": 8, "t": 1, "h": 4, "kvh": 2, "hd": 8, "kv_pos": 0},
    {"max_seq": 8, "t": 1, "h": 6, "kvh": 2, "hd": 8, "kv_pos": 7},
    {"max_seq": 10, "t": 3, "h": 2, "kvh": 1, "hd": 16, "kv_pos": 4},
    {"max_seq": 8, "t": 1, "h": 4, "kvh": 2, "hd": 8, "kv_pos": [7, 0, 3]},  # a batch, one position per sequence
    {"max_seq": 8, "t": 1, "h": 4, "kvh": 2, "hd": 8, "kv_pos": 5, "index": 1},  # the K cache after the step
    {"max_seq": 9, "t": 2, "h": 2, "kvh": 1, "hd": 16, "kv_pos": [6, 1], "index": 2},  # the V caches of a batch
)


QKV_OUTPUTS = ("q_rot", "k_cache", "v_cache")

qkv_rope_cache_write = op(
    "qkv_rope_cache_write",
    ("qkv", "k_cache", "v_cache", "kv_pos"),
    u32=("kv_pos",),
    differentiable=False,
    attrs=(*ATTRS, int_attr("index", 0, 2, doc="which output this node is: 0 the rotated q, 1 the K cache, 2 the V cache")),
    custom=CustomOp(
        "QKVRopeCacheWrite",
        (TensorArg("qkv"), TensorArg("k_cache"), TensorArg("v_cache"), TensorArg("kv_pos", "index")),
        (TensorArg("q_rot"), TensorArg("k_cache_out"), TensorArg("v_cache_out")),
        ATTRS,
        **CACHES_IN_PLACE,  # (the kernels check the head attributes as the attention's)
    ),
    **CACHE_OUTPUTS,
    positions=(Position("kv_pos", rows="qkv", within="k_cache"),),
)


@qkv_rope_cache_write.shape
def _(
    qkv: TensorType,
    k_cache: TensorType,
    v_cache: TensorType,
    kv_pos: TensorType,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    theta: float,
    index: int,
) -> TensorType:
    name = "qkv_rope_cache_write"
    q_width, kv_width = num_heads * head_dim, num_kv_heads * head_dim
    check_heads(name, num_heads, num_kv_heads, head_dim)
    _batch_form(name, "qkv", qkv, "k_cache", k_cache, kv_pos)
    width = static_dim(name, qkv, qkv.rank() - 1, "qkv")
    require(
        width == q_width + 2 * kv_width,
        name,
        f"qkv must be {num_heads}*{head_dim} + 2*{num_kv_heads}*{head_dim} = {q_width + 2 * kv_width} wide (q, k, v side by side), "
        f"got {list(qkv.shape)}",
    )
    require(
        k_cache.shape[-1] == kv_width and v_cache.shape == k_cache.shape,
        name,
        f"k_cache and v_cache must both be [..., max_seq, {num_kv_heads}*{head_dim}], got {list(k_cache.shape)} and {list(v_cache.shape)}",
    )
    q_rot = TensorType((*qkv.shape[:-1], q_width), qkv.dtype)
    return (q_rot, k_cache, v_cache)[index]


def qkv_rope_cache_write_ref(qkv, k_cache, v_cache, kv_pos, *, num_heads, num_kv_heads, head_dim, theta):
    """(q_rot, k_cache', v_cache') by the unfused ops' numpy references."""
    q_width, kv_width = num_heads * head_dim, num_kv_heads * head_dim
    q, k, v = np.split(qkv, [q_width, q_width + kv_width], axis=-1)
    rot = {"theta": theta, "head_dim": head_dim, "offset_static": 0}
    k_all = cache_write.numpy_ref(rope.numpy_ref(k, kv_pos, **rot), k_cache, kv_pos)
    return rope.numpy_ref(q, kv_pos, **rot), k_all, cache_write.numpy_ref(v, v_cache, kv_pos)


@qkv_rope_cache_write.numpy
def _(qkv, k_cache, v_cache, kv_pos, *, index, **attrs):
    return qkv_rope_cache_write_ref(qkv, k_cache, v_cache, kv_pos, **attrs)[index]


@qkv_rope_cache_write.function_body
def qkv_rope_cache_write_function(opset: int):
    """``Split``, then ``Rope``'s and ``CacheWrite``'s bodies."""

    def body(ctx, qkv, k_cache, v_cache, kv_pos):
        hd = ctx.attr_ref("head_dim", "int")
        heads, kv_heads = ctx.attr_ref("num_heads", "int"), ctx.attr_ref("num_kv_heads", "int")
        kv_width = ctx.op("Mul", kv_heads, hd)
        q, k, v = ctx.op("Split", qkv, dims(ctx, ctx.op("Mul", heads, hd), kv_width, kv_width), axis=-1, outputs=3)
        starts = ctx.op("Reshape", ctx.to_int64(kv_pos), ctx.ints([-1]))  # [n]: sequence b's row 0
        k_all = cache_write_body(ctx, rotate_body(ctx, k, starts), k_cache, kv_pos)
        return [rotate_body(ctx, q, starts), k_all, cache_write_body(ctx, v, v_cache, kv_pos)]

    return function_body(qkv_rope_cache_write.custom, body, opset)


@qkv_rope_cache_write.onnx
def _(ctx, node, qkv, k_cache, v_cache, kv_pos):
    a = node.attrs

    def emit():
        ctx.use_function(qkv_rope_cache_write_function(ctx.opset))
        heads = {k: a[k] for k in ("num_heads", "num_kv_heads", "head_dim")}
        return ctx.op(
            "QKVRopeCacheWrite",
            qkv,
            k_cache,
            v_cache,
            kv_pos,
            domain=CUSTOM_DOMAIN,
            outputs=len(QKV_OUTPUTS),
            **heads,
            theta=float(a["theta"]),
        )

    return ctx.shared_node(("QKVRopeCacheWrite", qkv, k_cache, v_cache, kv_pos, *_head_attrs(a)), emit)[a["index"]]


def _ex_qkv(g, f, max_seq, t, h, kvh, hd, kv_pos, index=0):
    lead = [] if isinstance(kv_pos, int) else [len(kv_pos)]
    positions = [kv_pos] if isinstance(kv_pos, int) else list(kv_pos)
    pos = g.input_u32("kv_pos", [len(positions)])
    f.inputs["kv_pos"] = np.array(positions, dtype=np.uint32)
    qkv = f.param(g, "qkv", [*lead, t, (h + 2 * kvh) * hd])
    k_cache, v_cache = f.input(g, "k_cache", [*lead, max_seq, kvh * hd]), f.input(g, "v_cache", [*lead, max_seq, kvh * hd])
    return g.qkv_rope_cache_write(qkv, k_cache, v_cache, pos, h, kvh, hd, 10000.0)[index]


examples(
    qkv_rope_cache_write,
    _ex_qkv,
    {"max_seq": 8, "t": 5, "h": 4, "kvh": 2, "hd": 8, "kv_pos": 0},
    {"max_seq": 12, "t": 4, "h": 3, "kvh": 1, "hd": 16, "kv_pos": 8},
    {"max_seq": 10, "t": 3, "h": 2, "kvh": 2, "hd": 4, "kv_pos": 4, "index": 1},  # the K cache after the prefill
    {"max_seq": 8, "t": 3, "h": 4, "kvh": 2, "hd": 8, "kv_pos": [5, 0, 2]},  # a batch, one position per sequence
    {"max_seq": 9, "t": 2, "h": 2, "kvh": 1, "hd": 16, "kv_pos": [6, 1], "index": 2},  # the V caches of a batch
    {"max_seq": 9, "t": 4, "h": 2, "kvh": 1, "hd": 8, "kv_pos": [3, 5], "index": 1},
)


class RopeAttentionBuilders:
    def rope_cached_attention(
        self,
        q: NodeId,
        k_new: NodeId,
        v_new: NodeId,
        k_cache: NodeId,
        v_cache: NodeId,
        kv_pos: NodeId,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        theta: float,
    ) -> tuple[NodeId, NodeId, NodeId]:
        """One decode attention step with its rope and cache writes: (out, k_cache', v_cache').

        q ``[T, H*hd]``, k_new/v_new ``[T, KVH*hd]`` (not yet rotated), caches ``[max_seq, KVH*hd]``,
        kv_pos U32 ``[1]``; or the batched forms ``[B, T, ...]``, ``[B, max_seq, ...]`` and U32 ``[B]``.
        The same as ``cached_attention(rope(q), cache_write(rope(k_new), k_cache), cache_write(v_new,
        v_cache))`` with rows at positions ``kv_pos[b] + t``; both caches are written in place."""
        attrs = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim, "theta": theta}
        ins = (q, k_new, v_new, k_cache, v_cache, kv_pos)
        return tuple(self.apply("rope_cached_attention", *ins, **attrs, index=i) for i in range(len(OUTPUTS)))  # type: ignore[return-value]

    def qkv_rope_cache_write(
        self,
        qkv: NodeId,
        k_cache: NodeId,
        v_cache: NodeId,
        kv_pos: NodeId,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        theta: float,
    ) -> tuple[NodeId, NodeId, NodeId]:
        """A prefill's merged q/k/v product placed in one op: (q_rot, k_cache', v_cache').

        qkv ``[T, (H + 2*KVH)*hd]`` (q, k, v side by side), caches ``[max_seq, KVH*hd]``, kv_pos U32
        ``[1]``; or the batched forms ``[B, T, ...]``, ``[B, max_seq, ...]`` and U32 ``[B]``. The same as
        ``rope(q)``, ``cache_write(rope(k), k_cache)`` and ``cache_write(v, v_cache)`` of the split pieces,
        rows at positions ``kv_pos[b] + t``; both caches are written in place."""
        attrs = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim, "theta": theta}
        ins = (qkv, k_cache, v_cache, kv_pos)
        return tuple(self.apply("qkv_rope_cache_write", *ins, **attrs, index=i) for i in range(len(QKV_OUTPUTS)))  # type: ignore[return-value]
