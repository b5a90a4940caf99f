"""KV cache ops, exported as ``com.meganeura.CacheWrite`` and ``com.meganeura.CachedAttention``.

``kv_pos`` follows Meganeura's implementation: the same node is passed to ``cache_write`` and
``cached_attention``; query row t is the token at position ``kv_pos + t`` and attends to cache rows
``[0, kv_pos + t]`` inclusive, so a decode step sees the token it just wrote. A cache whose
``cache`` operand is a graph input persists across ``Session.step()`` calls.

Two forms, with the same kernels:

- one sequence: ``new_kv [T, D]``, ``cache [max_seq, D]``, ``q [T, H*hd]``, ``kv_pos`` U32 ``[1]``;
- a batch of B sequences, each at its own position: ``new_kv [B, T, D]``, ``cache [B, max_seq, D]``,
  ``q [B, T, H*hd]``, ``kv_pos`` U32 ``[B]`` (sequence b writes rows ``[kv_pos[b], kv_pos[b] + T)``
  of its cache and its query row t attends to its rows ``[0, kv_pos[b] + t]``).

Every position must satisfy ``0 <= kv_pos[b] <= max_seq - T``: the kernels check each one (an ONNX
Runtime error naming the op and the value) and never read or write outside the cache.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..ir import NodeId, TensorType
from .attention import attention_ref, check_heads
from .lowering import CUSTOM_DOMAIN, function_body
from .onnx_util import NEG_INF, arange, dim, dims
from .table import CustomOp, Position, TensorArg, examples, int_attr, op, require, same_dim

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
    half_types=frozenset({"float16", "bfloat16"}),
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
    half_types=frozenset({"float16", "bfloat16"}),
)


def _batch_form(name: str, rows_arg: str, rows: TensorType, cache_arg: str, cache: TensorType, kv_pos: TensorType) -> None:
    """Both operands 2-D with a U32 ``[1]`` kv_pos, or both 3-D ``[B, ...]`` with a U32 ``[B]`` kv_pos."""
    require(rows.rank() in (2, 3), name, f"{rows_arg} must be 2-D [T, width] or 3-D [batch, T, width], got shape {list(rows.shape)}")
    batched = rows.rank() == 3
    want = "3-D [batch, max_seq, width]" if batched else "2-D [max_seq, width]"
    require(cache.rank() == rows.rank(), name, f"{cache_arg} must be {want} like {rows_arg} {list(rows.shape)}, got {list(cache.shape)}")
    if batched:
        same_dim(
            name,
            rows.shape[0],
            cache.shape[0],
            f"{rows_arg} {list(rows.shape)} and {cache_arg} {list(cache.shape)} must have the same batch size",
        )
        ok = kv_pos.rank() == 1 and kv_pos.shape[0] == rows.shape[0]
        require(ok, name, f"kv_pos must be a U32 [{rows.shape[0]}] node (one position per sequence), got {list(kv_pos.shape)}")
    else:
        require(kv_pos.elements() == 1, name, f"kv_pos must be a U32 [1] node, got {list(kv_pos.shape)}")
    # A symbolic row count is checked at run time (the kernels and the session's position limits).
    t, s = rows.shape[-2], cache.shape[-2]
    fits = not (isinstance(t, int) and isinstance(s, int)) or t <= s
    require(fits, name, f"{rows_arg} has {t} rows per sequence, more than the cache's {s}")


def check_kv_pos(name: str, kv_pos: int, rows: int, max_seq: int) -> None:
    if not 0 <= kv_pos <= max_seq - rows:
        raise ValueError(f"{name}: kv_pos {kv_pos} + {rows} rows exceeds the cache length {max_seq}")


def _positions(name: str, kv_pos: np.ndarray, rows: int, max_seq: int) -> list[int]:
    out = [int(p) for p in kv_pos.reshape(-1)]
    for p in out:
        check_kv_pos(name, p, rows, max_seq)
    return out


@cache_write.shape
def _(new_kv: TensorType, cache: TensorType, kv_pos: TensorType) -> TensorType:
    _batch_form("cache_write", "new_kv", new_kv, "cache", cache, kv_pos)
    require(
        new_kv.shape[-1] == cache.shape[-1],
        "cache_write",
        f"new_kv {list(new_kv.shape)} and cache {list(cache.shape)} must have the same width",
    )
    return cache


@cache_write.numpy
def _(new_kv, cache, kv_pos):
    t = new_kv.shape[-2]
    out = cache.copy()
    seqs = zip(new_kv[None] if new_kv.ndim == 2 else new_kv, out[None] if out.ndim == 2 else out, strict=True)
    for (new, rows), p in zip(seqs, _positions("cache_write", kv_pos, t, cache.shape[-2]), strict=True):
        rows[p : p + t] = new
    return out


def _batched(ctx, x: str, batch: str, width: int | str) -> str:
    """x (2-D, or 3-D with ``batch`` sequences) as ``[batch, rows, width]``."""
    return ctx.op("Reshape", x, dims(ctx, batch, -1, width))


def cache_write_body(ctx, new: str, cache: str, kv_pos: str) -> str:
    """Function-body nodes of ``CacheWrite`` (shared with ``rope_cached_attention``'s body).

    Rank-generic: B = the number of positions (1 for the 2-D form); row t of sequence b goes to
    index (b, kv_pos[b] + t) of the cache seen as [B, max_seq, width]."""
    pos = ctx.op("Reshape", ctx.to_int64(kv_pos), ctx.ints([-1]))  # [B]
    batch = ctx.op("Size", pos)
    width = ctx.op("Squeeze", ctx.op("Shape", cache, start=-1), ctx.ints([0]))
    new3, cache3 = _batched(ctx, new, batch, width), _batched(ctx, cache, batch, width)
    rows = ctx.op("Add", ctx.op("Unsqueeze", pos, ctx.ints([1])), ctx.op("Unsqueeze", arange(ctx, dim(ctx, new3, 1)), ctx.ints([0])))
    seq = ctx.op("Expand", ctx.op("Unsqueeze", arange(ctx, batch), ctx.ints([1])), ctx.op("Shape", rows))  # [B, T]
    index = ctx.op("Concat", ctx.op("Unsqueeze", seq, ctx.ints([2])), ctx.op("Unsqueeze", rows, ctx.ints([2])), axis=2)
    return ctx.op("Reshape", ctx.op("ScatterND", cache3, index, new3), ctx.op("Shape", cache))


@cache_write.function_body
def cache_write_function(opset: int):
    return function_body(cache_write.custom, cache_write_body, opset)


@cache_write.onnx
def _(ctx, node, new_kv, cache, kv_pos):
    ctx.use_function(cache_write_function(ctx.opset))
    return ctx.op("CacheWrite", new_kv, cache, kv_pos, domain=CUSTOM_DOMAIN)


@cached_attention.shape
def _(q: TensorType, k: TensorType, v: TensorType, kv_pos: TensorType, *, num_heads: int, num_kv_heads: int, head_dim: int) -> TensorType:
    name = "cached_attention"
    check_heads(name, num_heads, num_kv_heads, head_dim)
    _batch_form(name, "q", q, "k_cache", k, kv_pos)
    lead = "[B, T, " if q.rank() == 3 else "[T, "
    require(q.shape[-1] == num_heads * head_dim, name, f"q must be {lead}{num_heads}*{head_dim}], got {list(q.shape)}")
    lead = "[B, max_seq, " if q.rank() == 3 else "[max_seq, "
    require(
        k.shape[-1] == num_kv_heads * head_dim and v.shape == k.shape,
        name,
        f"k_cache and v_cache must both be {lead}{num_kv_heads}*{head_dim}], got {list(k.shape)} and {list(v.shape)}",
    )
    return q


@cached_attention.numpy
def _(q, k, v, kv_pos, *, num_heads, num_kv_heads, head_dim):
    t = q.shape[-2]
    positions = _positions("cached_attention", kv_pos, t, k.shape[-2])
    if q.ndim == 2:
        return attention_ref(q, k, v, num_heads, num_kv_heads, head_dim, positions[0] + np.arange(t))
    heads = (num_heads, num_kv_heads, head_dim)
    return np.stack([attention_ref(q[b], k[b], v[b], *heads, p + np.arange(t)) for b, p in enumerate(positions)])


def cached_attention_body(ctx, q: str, k: str, v: str, kv_pos: str) -> str:
    """Function-body nodes of ``CachedAttention`` (shared with ``rope_cached_attention``'s body).

    Rank-generic: B = the number of positions (1 for the 2-D form); [B, T, H, hd] queries against
    [B, max_seq, KVH, hd] keys/values, query (b, t) seeing key j where j <= kv_pos[b] + t. Constants
    take the queries' element type (CastLike), so float16/bfloat16 models run the body too."""
    hd = ctx.attr_ref("head_dim", "int")
    heads, kv_heads = ctx.attr_ref("num_heads", "int"), ctx.attr_ref("num_kv_heads", "int")
    pos = ctx.op("Reshape", ctx.to_int64(kv_pos), ctx.ints([-1]))  # [B]
    batch = ctx.op("Size", pos)
    q4 = ctx.op("Reshape", q, dims(ctx, batch, -1, heads, hd))  # [B, T, H, hd]

    def per_head(x: str) -> str:  # [B, S, KVH*hd] -> [B, H, S, hd], KV head h // rep for query head h
        x5 = ctx.op("Reshape", x, dims(ctx, batch, -1, kv_heads, 1, hd))
        x5 = ctx.op("Expand", x5, dims(ctx, 1, 1, 1, ctx.op("Div", heads, kv_heads), 1))
        return ctx.op("Transpose", ctx.op("Reshape", x5, dims(ctx, batch, -1, heads, hd)), perm=[0, 2, 1, 3])

    kh, vh = per_head(k), per_head(v)
    scale = ctx.op("CastLike", ctx.op("Reciprocal", ctx.op("Sqrt", ctx.cast(hd, TensorProto.FLOAT))), q)
    qh = ctx.op("Transpose", q4, perm=[0, 2, 1, 3])  # [B, H, T, hd]
    scores = ctx.op("Mul", ctx.op("MatMul", qh, ctx.op("Transpose", kh, perm=[0, 1, 3, 2])), scale)  # [B, H, T, S]
    qpos = ctx.op("Add", ctx.op("Unsqueeze", pos, ctx.ints([1])), ctx.op("Unsqueeze", arange(ctx, dim(ctx, q4, 1)), ctx.ints([0])))
    kpos = arange(ctx, dim(ctx, kh, 2))  # [S]
    hidden = ctx.op("Greater", kpos, ctx.op("Unsqueeze", qpos, ctx.ints([1, 3])))  # [B, 1, T, S]
    scores = ctx.op("Where", hidden, ctx.op("CastLike", ctx.const(NEG_INF), scores), scores)
    out = ctx.op("MatMul", ctx.op("Softmax", scores, axis=-1), vh)  # [B, H, T, hd]
    return ctx.op("Reshape", ctx.op("Transpose", out, perm=[0, 2, 1, 3]), ctx.op("Shape", q))


@cached_attention.function_body
def cached_attention_function(opset: int):
    return function_body(cached_attention.custom, cached_attention_body, opset)


@cached_attention.onnx
def _(ctx, node, q, k, v, kv_pos):
    ctx.use_function(cached_attention_function(ctx.opset))
    a = node.attrs
    return ctx.op(
        "CachedAttention",
        q,
        k,
        v,
        kv_pos,
        domain=CUSTOM_DOMAIN,
        num_heads=a["num_heads"],
        num_kv_heads=a["num_kv_heads"],
        head_dim=a["head_dim"],
    )


def _pos(g, f, kv_pos: int | list[int]):
    """A U32 kv_pos input: ``[1]`` for an int, ``[B]`` (one per sequence) for a list."""
    values = [kv_pos] if isinstance(kv_pos, int) else list(kv_pos)
    node = g.input_u32("kv_pos", [len(values)])
    f.inputs["kv_pos"] = np.array(values, dtype=np.uint32)
    return node


def _lead(kv_pos: int | list[int]) -> list[int]:
    return [] if isinstance(kv_pos, int) else [len(kv_pos)]


def _ex_write(g, f, max_seq, dim_, t, kv_pos):
    b = _lead(kv_pos)
    return g.cache_write(f.param(g, "new_kv", [*b, t, dim_]), f.input(g, "cache", [*b, max_seq, dim_]), _pos(g, f, kv_pos))


def _ex_attn(g, f, max_seq, t, h, kvh, hd, kv_pos):
    b = _lead(kv_pos)
    q = f.param(g, "q", [*b, t, h * hd])
    k = f.input(g, "k_cache", [*b, max_seq, kvh * hd])
    v = f.input(g, "v_cache", [*b, max_seq, kvh * hd])
    return g.cached_attention(q, k, v, _pos(g, f, kv_pos), h, kvh, hd)


examples(
    cache_write,
    _ex_write,
    {"max_seq": 8, "dim_": 6, "t": 1, "kv_pos": 3},
    {"max_seq": 5, "dim_": 4, "t": 3, "kv_pos": 2},
    {"max_seq": 6, "dim_": 4, "t": 1, "kv_pos": 5},
    {"max_seq": 6, "dim_": 4, "t": 1, "kv_pos": [5, 0, 2]},  # a batch, one position per sequence
    {"max_seq": 7, "dim_": 6, "t": 2, "kv_pos": [1, 5]},
)
examples(
    cached_attention,
    _ex_attn,
    {"max_seq": 8, "t": 1, "h": 4, "kvh": 2, "hd": 8, "kv_pos": 0},
    {"max_seq": 8, "t": 1, "h": 4, "kvh": 2, "hd": 8, "kv_pos": 7},
    {"max_seq": 10, "t": 4, "h": 2, "kvh": 1, "hd": 16, "kv_pos": 3},
    {"max_seq": 8, "t": 1, "h": 4, "kvh": 2, "hd": 8, "kv_pos": [7, 0, 3]},  # a batch, one position per sequence
    {"max_seq": 9, "t": 3, "h": 2, "kvh": 1, "hd": 16, "kv_pos": [6, 1]},
)


class KvCacheBuilders:
    def cache_write(self, new_kv: NodeId, cache: NodeId, kv_pos: NodeId) -> NodeId:
        """The cache ``[max_seq, dim]`` with rows ``[kv_pos, kv_pos + T)`` replaced by new_kv ``[T, dim]``
        (T = 1 in Meganeura; T > 1 is the prefill extension). kv_pos is a U32 ``[1]`` node.

        Batched: new_kv ``[B, T, dim]``, cache ``[B, max_seq, dim]`` and kv_pos U32 ``[B]``; sequence b's
        rows ``[kv_pos[b], kv_pos[b] + T)`` are replaced. Each position must be ``<= max_seq - T``."""
        return self.apply("cache_write", new_kv, cache, kv_pos)

    def cached_attention(
        self, q: NodeId, k_cache: NodeId, v_cache: NodeId, kv_pos: NodeId, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> NodeId:
        """Attention of q ``[T, H*hd]`` over cache rows ``[0, kv_pos + t]`` (inclusive) for query row t;
        k_cache/v_cache ``[max_seq, KVH*hd]``, kv_pos a U32 ``[1]`` node; output ``[T, H*hd]``.

        Batched: q ``[B, T, H*hd]``, caches ``[B, max_seq, KVH*hd]``, kv_pos U32 ``[B]``: query row t of
        sequence b attends to its rows ``[0, kv_pos[b] + t]``; output ``[B, T, H*hd]``."""
        return self.apply(
            "cached_attention", q, k_cache, v_cache, kv_pos, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim
        )
