"""The decode-step fusion of a whole LLaMA decoder layer into one ``decode_layer`` (a plain graph pass).

After the norm/residual fusion (:mod:`.decode_fusion`) and the rope/attention fusion
(:mod:`.rope_attention_fusion`), a decode step's layer is five nodes::

    q, k, v = rms_norm_linear(x, attn_norm, w_q, w_k, w_v)          # index 0, 1, 2 of one group
    a       = rope_cached_attention(q, k, v, k_cache, v_cache, kv_pos)  # (+ its cache nodes 1 and 2)
    x1      = linear_residual(a, w_o, x)
    h       = rms_norm_swiglu(x1, mlp_norm, w_gate, w_up)
    y       = linear_residual(h, w_down, x1)

(a batch reshapes q/k/v to ``[B, 1, width]`` for the attention and its output back to ``[B, width]``).
This pass makes each such chain one ``decode_layer`` (``ops.decode_layer``): its node of index 0
replaces y, and its nodes of index 1 and 2 replace the attention's cache nodes (session state). One
kernel per layer where there were five: on CUDA the launches and their ramp-up and tail are most of a
decode layer's time.

It fuses exactly that data flow: the q/k/v group reads the x that o_proj adds back, with three weights
in that order; the two norms have one eps and the four ops one ``trans_b``; every intermediate (q, k,
v, their reshapes, the attention output and its reshape, x1, h) is read by nothing but the next op of
the chain (x1 by the MLP norm and the down projection's residual) and is no graph output. Anything
else stays as it is. The rows are a decode step's (the earlier passes fused only static counts
``<= DECODE_ROWS_MAX``).

It runs when ``optimize`` is called with ``stage="inference"`` and ``decode_layer`` (default: as
``decode_fusion``, which inference sessions set on CUDA only), after the rope/attention fusion, whose
cache nodes it finds among the nodes no output reads.
"""

from __future__ import annotations

from ..graph import Graph
from ..ir import Node
from ..ops import OPS
from .decode_fusion import Replacement, consumers, rebuild

ATTENTION = "rope_cached_attention"


def _only_reader(node: Node, users: dict[int, list[Node]], outputs: set[int], allowed: set[int]) -> bool:
    """Whether ``node`` is no graph output and every node reading it is among ``allowed``."""
    return node.id not in outputs and bool(users.get(node.id)) and all(u.id in allowed for u in users[node.id])


def _through_reshape(n: Node, nodes: list[Node]) -> Node:
    """``n``'s input when ``n`` is a reshape that only regroups rows (the batch's ``[R, width]`` <->
    ``[B, S, width]`` views: same width, row-major, so row b*S + t is sequence b's row t), else ``n``."""
    if n.op != "reshape":
        return n
    src = nodes[n.inputs[0]]
    return src if src.ty.shape[-1] == n.ty.shape[-1] and {src.ty.rank(), n.ty.rank()} == {2, 3} else n


class _Chain:
    """One layer's five nodes found from its last product (``down``), or ``ok`` False."""

    def __init__(self, down: Node, nodes: list[Node], users: dict[int, list[Node]], outputs: set[int], group: dict) -> None:
        self.ok = False
        h, x1 = nodes[down.inputs[0]], nodes[down.inputs[2]]
        if h.op != "rms_norm_swiglu" or x1.op != "linear_residual" or h.inputs[0] != x1.id:
            return
        a_rows = nodes[x1.inputs[0]]
        attn = _through_reshape(a_rows, nodes)
        if attn.op != ATTENTION or attn.attrs["index"] != 0:
            return
        qkv_in = [nodes[i] for i in attn.inputs[:3]]
        qkv = [_through_reshape(n, nodes) for n in qkv_in]
        if any(n.op != "rms_norm_linear" or n.attrs["index"] != k or len(n.inputs) != 5 for k, n in enumerate(qkv)):
            return
        if len({n.inputs for n in qkv}) != 1 or qkv[0].inputs[0] != x1.inputs[2]:
            return
        trans_b = {n.attrs["trans_b"] for n in (*qkv, x1, h, down)}
        if len(trans_b) != 1 or qkv[0].attrs["eps"] != h.attrs["eps"]:
            return
        self.attn_group = group[(ATTENTION, attn.inputs)]
        if sorted(n.attrs["index"] for n in self.attn_group) != [0, 1, 2]:
            return
        readers = {n.id: {r.id for r in self.attn_group} for n in qkv_in}  # q/k/v (or their views): the attention
        readers.update({n.id: {view.id} for n, view in zip(qkv, qkv_in, strict=True) if n.id != view.id})  # q/k/v: their view
        readers.update({attn.id: {a_rows.id}, a_rows.id: {x1.id}, x1.id: {h.id, down.id}, h.id: {down.id}})
        if not all(_only_reader(nodes[i], users, outputs, allowed) for i, allowed in readers.items()):
            return
        x, attn_norm = qkv[0].inputs[:2]
        self.inputs = (x, attn_norm, *qkv[0].inputs[2:], x1.inputs[1], *h.inputs[1:], down.inputs[1], *attn.inputs[3:])
        self.attrs = {**{k: attn.attrs[k] for k in ("num_heads", "num_kv_heads", "head_dim", "theta")}, "eps": h.attrs["eps"]}
        self.attrs["trans_b"] = trans_b.pop()
        self.ok = True


def fuse_decode_layers(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with each matching decoder layer fused into one ``decode_layer`` (see the module doc), and
    how many were (``graph`` itself when none). Leaves, outputs and every node writing state are kept."""
    nodes, outputs = graph.nodes(), set(graph.outputs())
    users = consumers(nodes)
    group: dict[tuple, list[Node]] = {}  # the IR nodes of one multi-output node, by (op, inputs)
    for n in nodes:
        if "index" in n.attrs:
            group.setdefault((n.op, n.inputs), []).append(n)
    replace: dict[int, Replacement] = {}
    for down in nodes:
        if down.op != "linear_residual" or down.id in replace:
            continue
        chain = _Chain(down, nodes, users, outputs, group)
        if not chain.ok:
            continue
        for n in chain.attn_group:  # y, then the caches' next values (state, read by no node)
            index = n.attrs["index"]
            replace[down.id if index == 0 else n.id] = ("decode_layer", chain.inputs, {**chain.attrs, "index": index})
    if not replace:
        return graph, 0
    state_writers = [n.id for n in nodes if OPS[n.op].written_input(n.attrs) is not None]
    out, _ = rebuild(graph, replace, keep=state_writers)
    return out, sum(1 for r in replace.values() if r[2]["index"] == 0)
