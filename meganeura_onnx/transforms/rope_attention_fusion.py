"""The decode-step fusion of rope and the cache writes into cached attention (a plain graph pass).

After the e-graph optimizer, a decode step's attention reads::

    cached_attention(rope(q, kv_pos), K, V, kv_pos)
    K = rope_cache_write(k, k_cache, kv_pos)   # or cache_write(rope(k, kv_pos), k_cache, kv_pos)
    V = cache_write(v, v_cache, kv_pos)

four kernels (``Rope``, ``RopeCacheWrite``, ``CacheWrite``, ``CachedAttention``). This pass makes it
one ``rope_cached_attention`` (``ops.rope_attention``): its node of index 0 replaces the attention,
and its nodes of index 1 and 2 replace K and V as the caches' next values (session state).

It fuses only where nothing else reads the rotated q, K or V, the caches are graph inputs, every piece
uses the one ``kv_pos`` node, both ropes are plain (positions ``kv_pos + t``: ``offset_static`` 0, not
inverse, no period) with the attention's head_dim and one theta, and the rows per sequence are a static
count ``<= DECODE_ROWS_MAX`` (a decode step; a prefill keeps the separate ops: the fused kernel
handles the new rows outside its streamed tiles, which pays for a few rows, not for a prompt).

Like the norm fusion it runs only when ``optimize`` is called with ``stage="inference"`` and
``decode_fusion`` (inference sessions set it on CUDA). It runs last: the cache nodes of index 1 and 2
are read by nothing in the graph (the exporter makes them the state outputs), so a pass that rebuilds
the graph from its outputs would drop them.
"""

from __future__ import annotations

from ..graph import Graph
from ..ir import Node
from .decode_fusion import DECODE_ROWS_MAX, consumers, rebuild

PLAIN_ROPE = {"offset_static": 0, "inverse": False, "period": None}


def _plain_rope(n: Node, pos: int) -> dict | None:
    """(theta, head_dim) of a rope at positions ``pos + t``, else None."""
    if n.op not in ("rope", "rope_cache_write") or any(n.attrs.get(k, v) != v for k, v in PLAIN_ROPE.items()):
        return None
    if n.op == "rope" and (len(n.inputs) != 2 or n.inputs[1] != pos):
        return None
    return {"theta": n.attrs["theta"], "head_dim": n.attrs["head_dim"]}


def _match(attn: Node, nodes: list[Node], users: dict[int, list[Node]], outputs: set[int]) -> tuple[tuple[int, ...], float] | None:
    """The fused op's inputs (q, k_new, v_new, k_cache, v_cache, kv_pos) and theta for ``attn``, if it fits."""
    qr, ka, va, pos = (nodes[i] for i in attn.inputs)
    if any(x.id in outputs or [u.id for u in users.get(x.id, [])] != [attn.id] for x in (qr, ka, va)):
        return None
    rows = qr.ty.shape[-2]
    if not isinstance(rows, int) or rows > DECODE_ROWS_MAX:
        return None
    q_rope = _plain_rope(qr, pos.id)
    if ka.op == "rope_cache_write" and ka.inputs[2] == pos.id:
        k_new, k_cache, k_rope = ka.inputs[0], ka.inputs[1], _plain_rope(ka, pos.id)
    elif ka.op == "cache_write" and ka.inputs[2] == pos.id and len(users.get(ka.inputs[0], [])) == 1:
        kr = nodes[ka.inputs[0]]
        k_new, k_cache, k_rope = (kr.inputs[0] if kr.inputs else -1), ka.inputs[1], _plain_rope(kr, pos.id)
    else:
        return None
    heads = attn.attrs["head_dim"]
    if q_rope is None or q_rope != k_rope or q_rope["head_dim"] != heads:
        return None
    if va.op != "cache_write" or va.inputs[2] != pos.id or any(nodes[c].op != "input" for c in (k_cache, va.inputs[1])):
        return None
    return (qr.inputs[0], k_new, va.inputs[0], k_cache, va.inputs[1], pos.id), q_rope["theta"]


def fuse_rope_attention(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with each matching decode attention fused (see the module doc), and how many were
    (``graph`` itself when none). Leaves and outputs are kept, in their order."""
    nodes, outputs = graph.nodes(), set(graph.outputs())
    users = consumers(nodes)
    plan: dict[int, tuple[tuple[int, ...], dict, int, int]] = {}  # attention id -> (inputs, attrs, K id, V id)
    for n in nodes:
        if n.op != "cached_attention":
            continue
        found = _match(n, nodes, users, outputs)
        if found is not None:
            ins, theta = found
            plan[n.id] = (ins, {**n.attrs, "theta": theta}, n.inputs[1], n.inputs[2])
    if not plan:
        return graph, 0
    replace = {i: ("rope_cached_attention", ins, {**attrs, "index": 0}) for i, (ins, attrs, _, _) in plan.items()}
    out, new_id = rebuild(graph, replace)
    for attn, (ins, attrs, k_id, v_id) in plan.items():  # the caches' next values: state, read by no node
        if attn in new_id:
            for index, old in ((1, k_id), (2, v_id)):
                new_id[old] = out.apply("rope_cached_attention", *(new_id[k] for k in ins), **attrs, index=index)
    return out, len(plan)
