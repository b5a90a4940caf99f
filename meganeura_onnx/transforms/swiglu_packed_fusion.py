"""A prefill's merged gate|up product read by SwiGLU in place (a plain graph pass).

After :mod:`.merge_projections`, a LLaMA prefill layer runs its gate and up projections as one product
``y [rows, 2F]`` and hands the halves to SwiGLU through a split::

    gate = split(y, (F, F), axis=1)[0]     # ONNX Split: a copy of y into two tensors, one kernel
    up   = split(y, (F, F), axis=1)[1]
    h    = swiglu(gate, up)                # com.meganeura.SwiGLU

The pass rewrites each such triple into ``h = swiglu_packed(y)``: one ``com.meganeura.SwiGLUPacked`` kernel
that reads both halves of each row where the product wrote them, so the Split (its launch and the copy of
``y``) goes away; per LLaMA layer one kernel fewer.

It fuses only where the split is two equal halves of the last axis, in order (``swiglu(piece 0, piece 1)``),
and nothing else reads the split: no other node or output reads either piece, and no other split node of
``y`` with the same sizes (which would lower to the same ONNX Split) is live. A decode step has no such
split (``merge_projections`` leaves its products apart for :mod:`.decode_fusion`), so it is left as it is.
It runs on inference graphs (``optimize(..., stage="inference")``, ``swiglu_packed=``): by default in CUDA
sessions (a prefill there is bound by its kernel count) and in CPU sessions with our kernel library
(SmolLM2-135M's fp32 128-row prefill on a 2-core VM, alternating, 122 pairs in seven rounds: packed faster in
74, round medians 298-406 ms packed against 289-440 unpacked, median pair ratio 0.97 in the last 80).
"""

from __future__ import annotations

from ..graph import Graph
from ..ir import Node, reachable
from ..ops import OPS
from .decode_fusion import consumers, rebuild

FUSED = "swiglu_packed"


def _halves(n: Node) -> tuple[int, int] | None:
    """(the split input, F) of a split node into two equal halves of its last axis, else None."""
    if n.op != "split" or n.attrs["axis"] != len(n.ty.shape) - 1:
        return None
    sizes = tuple(n.attrs["sizes"])
    return (n.inputs[0], sizes[0]) if len(sizes) == 2 and sizes[0] == sizes[1] else None


def _plan(graph: Graph) -> dict[int, tuple[str, tuple[int, ...], dict]]:
    """``swiglu`` node id -> its ``swiglu_packed`` replacement."""
    nodes, outputs = graph.nodes(), set(graph.outputs())
    live = reachable(nodes, graph.outputs())
    users = consumers([n for n in nodes if n.id in live])  # a reader no output depends on is dropped anyway
    splits: dict[tuple, set[int]] = {}  # (input, sizes, axis) -> the live split nodes that lower to that one Split
    for n in nodes:
        if n.op == "split" and n.id in live:
            splits.setdefault((n.inputs[0], tuple(n.attrs["sizes"]), n.attrs["axis"]), set()).add(n.id)
    plan: dict[int, tuple[str, tuple[int, ...], dict]] = {}
    for n in nodes:
        if n.op != "swiglu" or n.id not in live:
            continue
        gate, up = (nodes[i] for i in n.inputs)
        half = _halves(gate)
        if half is None or _halves(up) != half or (gate.attrs["index"], up.attrs["index"]) != (0, 1):
            continue
        if any(p.id in outputs or [u.id for u in users.get(p.id, [])] != [n.id] for p in (gate, up)):
            continue  # a piece read by another node or an output: the split stays
        if splits[(gate.inputs[0], tuple(gate.attrs["sizes"]), gate.attrs["axis"])] != {gate.id, up.id}:
            continue  # another node of the same split is live
        plan[n.id] = (FUSED, (half[0],), {})
    return plan


def fuse_swiglu_packed(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with each matching split + ``swiglu`` as one ``swiglu_packed`` (see the module doc), and how
    many were (``graph`` itself when none). Leaves and outputs are kept, in their order, and so are nodes
    that write state in place though no output reads them (a fused decode step's caches)."""
    plan = _plan(graph)
    if not plan:
        return graph, 0
    state = [n.id for n in graph.nodes() if OPS[n.op].written_input(n.attrs) is not None]
    out, _ = rebuild(graph, plan, keep=state)
    return out, len(plan)
