"""KV cache ops, exported as ``com.meganeura.CacheWrite`` and ``com.meganeura.CachedAttention``.

``kv_pos`` follows Meganeura's implementation (DESIGN §3): the same node is passed to
``cache_write`` and ``cached_attention``; query row t is the token at position ``kv_pos + t`` and
attends to cache rows ``[0, kv_pos + t]`` inclusive, so a decode step sees the token it just wrote.
A cache whose ``cache`` operand is a graph input persists across ``Session.step()`` calls.
"""

from __future__ import annotations

import numpy as np

from ..ir import NodeId, TensorType
from .attention import attention_ref, check_heads
from .lowering import CUSTOM_DOMAIN, function_body
from .onnx_util import arange, attend, dim, scalar_of
from .table import CustomOp, Position, TensorArg, examples, int_attr, op, rank, require

cache_write = op(
    "cache_write",
    ("new_kv", "cache", "kv_pos"),
    u32=("kv_pos",),
    differentiable=False,
    custom=CustomOp(
        "CacheWrite",
        (TensorArg("new_kv"), TensorArg("cache"), TensorArg("kv_pos", "index")),
        (TensorArg("updated"),),
        inplace_input="cache",
    ),
    inplace_input="cache",
    positions=(Position("kv_pos", rows="new_kv", within="cache"),),
)
# The kernels keep one head's partial sums in registers/shared memory: head_dim <= 1024.
HEADS = (int_attr("num_heads", 1), int_attr("num_kv_heads", 1), int_attr("head_dim", 1, 1024))
cached_attention = op(
    "cached_attention",
    ("q", "k_cache", "v_cache", "kv_pos"),
    u32=("kv_pos",),
    differentiable=False,
    attrs=HEADS,
    custom=CustomOp(
        "CachedAttention",
        (TensorArg("q"), TensorArg("k_cache"), TensorArg("v_cache"), TensorArg("kv_pos", "index")),
        (TensorArg("out"),),
        HEADS,
        relations=("num_heads % num_kv_heads == 0",),
    ),
    positions=(Position("kv_pos", rows="q", within="k_cache"),),
)


def _kv_pos(name: str, t: TensorType) -> None:
    require(t.elements() == 1, name, f"kv_pos must be a U32 [1] node, got {list(t.shape)}")


def check_kv_pos(name: str, kv_pos: int, rows: int, max_seq: int) -> None:
    if not 0 <= kv_pos <= max_seq - rows:
        raise ValueError(f"{name}: kv_pos {kv_pos} + {rows} rows exceeds the cache length {max_seq}")


@cache_write.shape
def _(new_kv: TensorType, cache: TensorType, kv_pos: TensorType) -> TensorType:
    rank("cache_write", new_kv, 2, "new_kv")
    rank("cache_write", cache, 2, "cache")
    _kv_pos("cache_write", kv_pos)
    require(
        new_kv.shape[1] == cache.shape[1],
        "cache_write",
        f"new_kv {list(new_kv.shape)} and cache {list(cache.shape)} must have the same width",
    )
    # A symbolic row count is checked at run time (the kernels and the session's position limits).
    fits = not (isinstance(new_kv.shape[0], int) and isinstance(cache.shape[0], int)) or new_kv.shape[0] <= cache.shape[0]
    require(fits, "cache_write", f"new_kv has {new_kv.shape[0]} rows, more than the cache's {cache.shape[0]}")
    return cache


@cache_write.numpy
def _(new_kv, cache, kv_pos):
    p = int(kv_pos.reshape(-1)[0])
    check_kv_pos("cache_write", p, new_kv.shape[0], cache.shape[0])
    out = cache.copy()
    out[p : p + new_kv.shape[0]] = new_kv
    return out


@cache_write.function_body
def cache_write_function(opset: int):
    def body(ctx, new, cache, kv_pos):
        rows = arange(ctx, dim(ctx, new, 0), scalar_of(ctx, kv_pos))
        return ctx.op("ScatterND", cache, ctx.op("Unsqueeze", rows, ctx.ints([1])), new)

    return function_body(cache_write.custom, body, opset)


@cache_write.onnx
def _(ctx, node, new_kv, cache, kv_pos):
    ctx.use_function(cache_write_function(ctx.opset))
    return ctx.op("CacheWrite", new_kv, cache, ctx.to_int64(kv_pos), domain=CUSTOM_DOMAIN)


@cached_attention.shape
def _(q: TensorType, k: TensorType, v: TensorType, kv_pos: TensorType, *, num_heads: int, num_kv_heads: int, head_dim: int) -> TensorType:
    name = "cached_attention"
    check_heads(name, num_heads, num_kv_heads, head_dim)
    for arg, t in (("q", q), ("k_cache", k), ("v_cache", v)):
        rank(name, t, 2, arg)
    _kv_pos(name, kv_pos)
    require(q.shape[1] == num_heads * head_dim, name, f"q must be [T, {num_heads}*{head_dim}], got {list(q.shape)}")
    require(
        k.shape[1] == num_kv_heads * head_dim and v.shape == k.shape,
        name,
        f"k_cache and v_cache must both be [max_seq, {num_kv_heads}*{head_dim}], got {list(k.shape)} and {list(v.shape)}",
    )
    fits = not (isinstance(q.shape[0], int) and isinstance(k.shape[0], int)) or q.shape[0] <= k.shape[0]
    require(fits, name, f"q has {q.shape[0]} rows, more than the cache's {k.shape[0]}")
    return q


@cached_attention.numpy
def _(q, k, v, kv_pos, *, num_heads, num_kv_heads, head_dim):
    p = int(kv_pos.reshape(-1)[0])
    check_kv_pos("cached_attention", p, q.shape[0], k.shape[0])
    return attention_ref(q, k, v, num_heads, num_kv_heads, head_dim, p + np.arange(q.shape[0]))


@cached_attention.function_body
def cached_attention_function(opset: int):
    def body(ctx, q, k, v, kv_pos):
        hd = ctx.attr_ref("head_dim", "int")
        rep = ctx.op("Div", ctx.attr_ref("num_heads", "int"), ctx.attr_ref("num_kv_heads", "int"))
        qpos = arange(ctx, dim(ctx, q, 0), scalar_of(ctx, kv_pos))
        kpos = arange(ctx, dim(ctx, k, 0))
        return attend(ctx, q, k, v, hd, rep, (qpos, kpos))

    return function_body(cached_attention.custom, body, opset)


@cached_attention.onnx
def _(ctx, node, q, k, v, kv_pos):
    ctx.use_function(cached_attention_function(ctx.opset))
    a = node.attrs
    return ctx.op(
        "CachedAttention",
        q,
        k,
        v,
        ctx.to_int64(kv_pos),
        domain=CUSTOM_DOMAIN,
        num_heads=a["num_heads"],
        num_kv_heads=a["num_kv_heads"],
        head_dim=a["head_dim"],
    )


def _pos(g, f, max_seq, t, kv_pos):
    node = g.input_u32("kv_pos", [1])
    f.inputs["kv_pos"] = np.array([kv_pos], dtype=np.uint32)
    return node


def _ex_write(g, f, max_seq, dim_, t, kv_pos):
    return g.cache_write(f.param(g, "new_kv", [t, dim_]), f.input(g, "cache", [max_seq, dim_]), _pos(g, f, max_seq, t, kv_pos))


def _ex_attn(g, f, max_seq, t, h, kvh, hd, kv_pos):
    q = f.param(g, "q", [t, h * hd])
    k = f.input(g, "k_cache", [max_seq, kvh * hd])
    v = f.input(g, "v_cache", [max_seq, kvh * hd])
    return g.cached_attention(q, k, v, _pos(g, f, max_seq, t, kv_pos), h, kvh, hd)


examples(
    cache_write,
    _ex_write,
    {"max_seq": 8, "dim_": 6, "t": 1, "kv_pos": 3},
    {"max_seq": 5, "dim_": 4, "t": 3, "kv_pos": 2},
    {"max_seq": 6, "dim_": 4, "t": 1, "kv_pos": 5},
)
examples(
    cached_attention,
    _ex_attn,
    {"max_seq": 8, "t": 1, "h": 4, "kvh": 2, "hd": 8, "kv_pos": 0},
    {"max_seq": 8, "t": 1, "h": 4, "kvh": 2, "hd": 8, "kv_pos": 7},
    {"max_seq": 10, "t": 4, "h": 2, "kvh": 1, "hd": 16, "kv_pos": 3},
)


class KvCacheBuilders:
    def cache_write(self, new_kv: NodeId, cache: NodeId, kv_pos: NodeId) -> NodeId:
        """The cache ``[max_seq, dim]`` with rows ``[kv_pos, kv_pos + T)`` replaced by new_kv ``[T, dim]``
        (T = 1 in Meganeura; T > 1 is the prefill extension). kv_pos is a U32 ``[1]`` node."""
        return self.apply("cache_write", new_kv, cache, kv_pos)

    def cached_attention(
        self, q: NodeId, k_cache: NodeId, v_cache: NodeId, kv_pos: NodeId, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> NodeId:
        """Attention of q ``[T, H*hd]`` over cache rows ``[0, kv_pos + t]`` (inclusive) for query row t."""
        return self.apply(
            "cached_attention", q, k_cache, v_cache, kv_pos, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim
        )
