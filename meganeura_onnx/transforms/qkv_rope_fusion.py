"""A prefill's merged q/k/v product placed by one op (a plain graph pass).

After :mod:`.merge_projections`, a LLaMA prefill layer computes its q, k and v projections as one
product and places the pieces with four kernels::

    q, k, v = split(qkv, (H*hd, KVH*hd, KVH*hd))     # Split
    q_rot   = rope(q, kv_pos)                          # Rope
    K       = rope_cache_write(k, k_cache, kv_pos)     # RopeCacheWrite (or cache_write(rope(k, kv_pos), ...))
    V       = cache_write(v, v_cache, kv_pos)          # CacheWrite

The pass makes them one ``qkv_rope_cache_write`` (``ops.rope_attention``): its node of index 0 replaces
``q_rot``, those of index 1 and 2 replace K and V (the caches, written in place). A batch prefill reshapes
each piece to ``[B, T, width]`` before the rope and the writes; there the fused op reads the product
reshaped to ``[B, T, (H + 2*KVH)*hd]``.

It fuses only where nothing else reads the pieces (or the rotated k), the caches are graph inputs, every
piece uses the one ``kv_pos`` node, both ropes are plain (positions ``kv_pos + t``: ``offset_static`` 0,
not inverse, no period) with one theta and head_dim, and the product has more than ``DECODE_ROWS_MAX``
rows or a symbolic row count. A decode step has no such split (``merge_projections`` leaves its
products apart for :mod:`.decode_fusion`) and its rope and cache writes go into ``rope_cached_attention``
(:mod:`.rope_attention_fusion`), which matches the same ropes and writes at ``<= DECODE_ROWS_MAX`` rows
only: the passes never see the same nodes. It runs on inference graphs (``optimize(...,
stage="inference")``): by default in CUDA sessions, where a prefill's time is its kernel count, and in CPU sessions
with our kernel library (one node for four: less ONNX Runtime dispatch; SmolLM2-135M's fp32 128-row prefill on
a 2-core VM, alternating rounds: medians 277/293/308 ms fused against 286/309/314 unfused, fused faster in 62
of 100 pairs).
"""

from __future__ import annotations

from ..graph import Graph
from ..ir import Node, reachable
from .decode_fusion import DECODE_ROWS_MAX, consumers, rebuild
from .rope_attention_fusion import PLAIN_ROPE

FUSED = "qkv_rope_cache_write"


def _only_reader(n: Node, users: dict[int, list[Node]], outputs: set[int]) -> Node | None:
    readers = users.get(n.id, [])
    return readers[0] if len(readers) == 1 and n.id not in outputs else None


def _plain(n: Node, pos: int, x: int) -> dict | None:
    """(theta, head_dim) of a rope of ``x`` at positions ``pos + t`` (a ``rope``, or a ``rope_cache_write``), else None."""
    if any(n.attrs.get(k, v) != v for k, v in PLAIN_ROPE.items()) or n.inputs[0] != x:
        return None
    if n.op == "rope" and (len(n.inputs) != 2 or n.inputs[1] != pos):
        return None
    if n.op == "rope_cache_write" and n.inputs[2] != pos:
        return None
    return {"theta": n.attrs["theta"], "head_dim": n.attrs["head_dim"]}


def _pieces(split: list[Node], users: dict[int, list[Node]], outputs: set[int]) -> tuple[list[Node], list[Node | None]] | None:
    """The readers of the three pieces, past a reshape to ``[B, T, width]`` each in a batch (else None)."""
    readers, shapes = [], []
    for piece in split:
        r = _only_reader(piece, users, outputs)
        if r is None:
            return None
        if r.op == "reshape" and len(r.ty.shape) == 3 and r.ty.shape[-1] == piece.ty.shape[-1]:  # [B*T, w] -> [B, T, w]
            shapes.append(r)
            r = _only_reader(r, users, outputs)
            if r is None:
                return None
        readers.append(r)
    if shapes and (len(shapes) != 3 or len({s.ty.shape[:2] for s in shapes}) != 1):
        return None
    return readers, (shapes or [None])


def _match(split: list[Node], nodes: list[Node], users: dict[int, list[Node]], outputs: set[int]) -> tuple | None:
    """(q rope, K, V, reshape of the q piece or None, fused inputs, attributes) for one split of a product."""
    found = _pieces(split, users, outputs)
    if found is None:
        return None
    (qr, kr, vr), shapes = found
    q_in, k_in, v_in = (n.id for n in (split if shapes[0] is None else shapes))
    if qr.op != "rope" or len(qr.inputs) != 2 or vr.op != "cache_write" or vr.inputs[0] != v_in:
        return None
    pos = qr.inputs[1]
    if kr.op == "rope_cache_write":
        k_node, k_rope = kr, _plain(kr, pos, k_in)
    elif kr.op == "rope" and (w := _only_reader(kr, users, outputs)) is not None and w.op == "cache_write" and w.inputs[0] == kr.id:
        k_node, k_rope = w, _plain(kr, pos, k_in)
        k_node = k_node if w.inputs[2] == pos else None
    else:
        return None
    q_rope = _plain(qr, pos, q_in)
    if k_node is None or q_rope is None or q_rope != k_rope or vr.inputs[2] != pos:
        return None
    k_cache, v_cache = k_node.inputs[1], vr.inputs[1]
    if any(nodes[c].op != "input" for c in (k_cache, v_cache)) or nodes[k_cache].ty != nodes[v_cache].ty:
        return None  # the fused op takes two caches of one shape
    hd = q_rope["head_dim"]
    q_width, kv_width, kv_width2 = split[0].attrs["sizes"]
    if kv_width != kv_width2 or q_width % hd or kv_width % hd or (q_width // hd) % (kv_width // hd):
        return None  # the fused op's head attributes: whole heads, num_heads a multiple of num_kv_heads
    attrs = {"num_heads": q_width // hd, "num_kv_heads": kv_width // hd, "head_dim": hd, "theta": q_rope["theta"]}
    qkv = split[0].inputs[0] if shapes[0] is None else q_in  # a batch: q's reshape, rebuilt as the product's
    return qr, k_node, vr, shapes[0], (qkv, k_cache, v_cache, pos), attrs


def _splits(nodes: list[Node], live: set[int]) -> list[list[Node]]:
    """The live three-piece splits along the features of a prefill's product, as [piece 0, piece 1, piece 2]."""
    groups: dict[tuple, dict[int, Node]] = {}
    for n in nodes:
        if n.op == "split" and n.id in live and n.attrs["axis"] == 1 and len(n.attrs["sizes"]) == 3:
            groups.setdefault((n.inputs[0], tuple(n.attrs["sizes"])), {})[n.attrs["index"]] = n
    out = []
    for (x, _), by_index in groups.items():
        rows = nodes[x].ty.shape[0]
        if len(by_index) == 3 and (not isinstance(rows, int) or rows > DECODE_ROWS_MAX):
            out.append([by_index[i] for i in range(3)])
    return out


def fuse_qkv_rope_cache_writes(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with each matching split + rope + cache writes fused (see the module doc), and how many
    were (``graph`` itself when none). Leaves and outputs are kept, in their order."""
    nodes, outputs = graph.nodes(), set(graph.outputs())
    users = consumers(nodes)
    replace: dict[int, tuple] = {}
    keep: list[int] = []
    for split in _splits(nodes, reachable(nodes, graph.outputs())):
        found = _match(split, nodes, users, outputs)
        if found is None:
            continue
        qr, k_node, vr, q_shape, ins, attrs = found
        if q_shape is not None:  # a batch: the product seen as [B, T, width], built where the q piece's reshape was
            product = split[0].inputs[0]
            width = sum(split[0].attrs["sizes"])
            replace[q_shape.id] = ("reshape", (product,), {"shape": (*q_shape.ty.shape[:2], width)})
        for index, old in enumerate((qr.id, k_node.id, vr.id)):
            replace[old] = (FUSED, ins, {**attrs, "index": index})
        keep += [k_node.id, vr.id]
    if not keep:
        return graph, 0
    out, _ = rebuild(graph, replace, keep)
    return out, len(keep) // 2
