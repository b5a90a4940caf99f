"""Products that share their left operand run as ONE product against their weights side by side (a
plain graph pass).

LLaMA's q, k and v projections read the same normalised rows, and so do gate and up. Each is a
small-N GEMM, and in a train step each also has its own dX and dW GEMM in the backward pass, with
Adds summing the dX parts. The pass rewrites every such group::

    y_i = matmul_bt(x, w_i)   (w_i [N_i, K], torch's layout)  ->  y = matmul_bt(x, cat(w_0, ..., w_n, axis=0))
    y_i = matmul(x, w_i)      (w_i [K, N_i], [in, out])       ->  y = matmul(x, cat(w_0, ..., w_n, axis=1))

    y_i = split(y, (N_0, ..., N_n), axis=1)[i]

so the forward runs one GEMM and one ``Split``; the weights are concatenated inside the graph on
every run (a ``Concat`` of the group's weights, ~2 MB for SmolLM2's q/k/v), so parameters keep their
names and shapes (checkpoints, ``set_parameter`` and buffers shared between sessions are unchanged).
Run before autodiff, the backward of a group is one dX GEMM and one dW GEMM: ``split``'s group VJP
joins the pieces' gradients with one ``Concat`` (no Adds between dX parts), and ``cat``'s VJP splits
the weight gradient back into one gradient per parameter (one ``Split``).

A group is two or more ``matmul_bt`` (or two or more ``matmul``) nodes with the same left operand
and distinct weights that are graph leaves (parameters, inputs, constants) of a static output size.
Products whose weight is computed, products of the other kind, and ``gemm`` nodes (a product the
e-graph fused with a bias or a residual add) stay as they are. ``min_rows``: products with a static
row count below it stay too; inference passes ``DECODE_ROWS_MAX + 1`` so decode steps keep their
separate products for :mod:`.decode_fusion` (which fuses them into ``rms_norm_linear`` /
``rms_norm_swiglu``; a weight concatenation per token would also cost as much as the GEMVs read).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..graph import Graph
from ..ir import Node, NodeId, reachable
from ..ops import OPS

WEIGHT_AXIS = {"matmul_bt": 0, "matmul": 1}
"""Product op -> the axis of its weight that holds the output features (along which a group's
weights are concatenated)."""


@dataclass
class _Group:
    op: str
    x: int
    products: list[int] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    """The distinct weights in the order of their first product (the pieces of the split)."""


def _groups(nodes: list[Node], live: set[int], min_rows: int) -> list[_Group]:
    """The groups to merge, each with at least two distinct weights."""
    by_key: dict[tuple[str, int], _Group] = {}
    for n in nodes:
        if n.op not in WEIGHT_AXIS or n.id not in live:
            continue
        x, w = n.inputs
        rows, width = n.ty.shape[0], nodes[w].ty.shape[WEIGHT_AXIS[n.op]]
        if not OPS[nodes[w].op].leaf or not isinstance(width, int) or (isinstance(rows, int) and rows < min_rows):
            continue
        group = by_key.setdefault((n.op, x), _Group(n.op, x))
        group.products.append(n.id)
        if w not in group.weights:
            group.weights.append(w)
    return [grp for grp in by_key.values() if len(grp.weights) >= 2]


def _emit(out: Graph, grp: _Group, nodes: list[Node], new_id: dict[int, NodeId]) -> dict[int, NodeId]:
    """The merged product of ``grp`` in ``out``: weight id -> the node of its piece."""
    axis = WEIGHT_AXIS[grp.op]
    weights = out.cat([new_id[w] for w in grp.weights], axis)
    merged = out.apply(grp.op, new_id[grp.x], weights)
    pieces = out.split(merged, [nodes[w].ty.shape[axis] for w in grp.weights], axis=1)
    return dict(zip(grp.weights, pieces, strict=True))


def merge_projections(graph: Graph, *, min_rows: int = 0) -> tuple[Graph, int]:
    """``graph`` with every group of products sharing their left operand merged (see the module
    doc), and how many groups were (``graph`` itself when none). Leaves are kept in their order,
    outputs in theirs; nodes the outputs do not depend on are left out."""
    nodes = graph.nodes()
    live = reachable(nodes, graph.outputs())
    groups = _groups(nodes, live, min_rows)
    if not groups:
        return graph, 0
    member = {p: grp for grp in groups for p in grp.products}
    pieces: dict[int, dict[int, NodeId]] = {}  # group (its first product) -> weight -> piece
    out = Graph()
    new_id: dict[int, NodeId] = {}
    for n in nodes:
        if OPS[n.op].leaf:
            new_id[n.id] = out.add_node(n.op, (), n.ty, n.attrs)
    for n in nodes:  # ids are topological: a group's operands exist at its first product
        if n.id in new_id or n.id not in live:
            continue
        grp = member.get(n.id)
        if grp is None:
            new_id[n.id] = out.apply(n.op, *(new_id[i] for i in n.inputs), **n.attrs)
            continue
        first = grp.products[0]
        if first not in pieces:
            pieces[first] = _emit(out, grp, nodes, new_id)
        new_id[n.id] = pieces[first][n.inputs[1]]
    out.set_outputs({name: new_id[nid] for name, nid in graph.named_outputs().items()})
    return out, len(groups)
