"""A simple rewrite pass over a forward Graph, reported as an :class:`OptimizeReport`.

Rewrites (each counted in the report):
- ``matmul_bias``: ``bias_add(matmul(a, b), bias)`` and ``bias_add(matmul_bt(a, b), bias)`` become one
  ``gemm`` node (one ONNX Gemm; its VJP also yields the bias gradient as one column sum), when the
  product has no other user and is not a graph output.
- ``dead_nodes``: nodes no output depends on are dropped (Graph.toposort).
Meganeura's e-graph optimizer will replace this pass later; the report's shape stays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..graph import Graph
from ..ir import NodeId

_FUSABLE = {"matmul": False, "matmul_bt": True}  # product op -> gemm's trans_b


@dataclass
class OptimizeReport:
    """What the optimizer did: node counts, rewrites applied (name -> count) and the time taken."""

    nodes_before: int
    nodes_after: int
    rewrites: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def __str__(self) -> str:
        fired = ", ".join(f"{name} x{count}" for name, count in self.rewrites.items() if count) or "no rewrites"
        return f"OptimizeReport: {self.nodes_before} -> {self.nodes_after} nodes ({fired}) in {self.seconds * 1e3:.1f} ms"


def optimize(graph: Graph) -> tuple[Graph, OptimizeReport]:
    """A new graph with the rewrites applied (the input graph is not modified), and the report."""
    t0 = time.perf_counter()
    nodes = graph.nodes()
    users: dict[NodeId, int] = {}
    for n in nodes:
        for i in n.inputs:
            users[i] = users.get(i, 0) + 1
    outputs = set(graph.outputs())
    fuse: dict[NodeId, NodeId] = {}  # bias_add id -> product id
    for n in nodes:
        if n.op == "bias_add":
            prod = nodes[n.inputs[0]]
            if prod.op in _FUSABLE and users.get(prod.id) == 1 and prod.id not in outputs:
                fuse[n.id] = prod.id
    fused_products = set(fuse.values())

    out = Graph()
    remap: dict[NodeId, NodeId] = {}
    for n in nodes:
        if n.id in fused_products:
            continue
        if n.id in fuse:
            prod = nodes[fuse[n.id]]
            a, b = (remap[i] for i in prod.inputs)
            remap[n.id] = out.gemm(a, b, remap[n.inputs[1]], _FUSABLE[prod.op])
        else:
            remap[n.id] = out.add_node(n.op, tuple(remap[i] for i in n.inputs), n.ty, n.attrs)
    out.set_outputs({name: remap[o] for name, o in graph.named_outputs().items()})
    before_dce = len(out)
    pruned = out.toposort()
    report = OptimizeReport(
        len(nodes), len(pruned), {"matmul_bias": len(fuse), "dead_nodes": before_dce - len(pruned)}, time.perf_counter() - t0
    )
    return pruned, report
