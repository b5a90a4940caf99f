"""A prefill's residual add fused into the RMSNorm after it (a plain graph pass).

After the e-graph optimizer, a LLaMA layer joins the residual stream with ``gemm(a, w, C=residual)``
(``add(residual, matmul_bt(a, w))``, fused) and normalises the sum right away::

    v = gemm(a, w, residual)          # ONNX Runtime's CUDA Gemm copies C into its output first: two kernels
    y = rms_norm(v, weight)           # then the norm, and in fp16/bf16 a Cast of its float32 output

The pass rewrites every such pair into::

    p = matmul_bt(a, w)               # (matmul without trans_b): a Gemm without C, one kernel
    y = add_rms_norm(p, residual, weight)[0]
    s = add_rms_norm(p, residual, weight)[1]

one ``com.meganeura.AddRMSNorm`` node (its kernels take float16/bfloat16, so no Cast around it either); the
norm's readers read ``y``, every other reader of ``v`` (the next residual add) reads ``s``. Per norm, four
device events (the C copy, the product, the norm, the Cast) become two: eight per LLaMA layer become four
(SmolLM2-135M's fp16 prefill on an H200: 580 events -> 462).

Only for products of more than ``DECODE_ROWS_MAX`` static rows or of symbolic rows: a decode step's
``gemm`` becomes ``linear_residual`` and its norms ``rms_norm_linear`` / ``rms_norm_swiglu``
(:mod:`.decode_fusion`), and the whole layer ``decode_layer``. Like those, it runs on inference graphs
only (``add_rms_norm`` has no gradient): ``optimize(..., stage="inference")``, in CUDA sessions by default.
A norm whose weight is computed after the product (not a graph leaf) stays as it is, and of two norms
reading one product only the first is fused (the second reads the sum).
"""

from __future__ import annotations

from ..graph import Graph
from ..ir import Node, NodeId, reachable
from ..ops import OPS
from .decode_fusion import DECODE_ROWS_MAX


def _plan(nodes: list[Node], live: set[int]) -> dict[int, Node]:
    """``gemm`` node id -> the ``rms_norm`` fused with it."""
    plan: dict[int, Node] = {}
    for n in nodes:
        if n.op != "rms_norm" or n.id not in live:
            continue
        v = nodes[n.inputs[0]]
        if v.op != "gemm" or v.id in plan:
            continue
        residual, weight = nodes[v.inputs[2]], nodes[n.inputs[1]]
        rows = v.ty.shape[0]
        if residual.ty.shape != v.ty.shape or (isinstance(rows, int) and rows <= DECODE_ROWS_MAX):
            continue  # a bias row, not a residual; or a decode step's product
        if not OPS[weight.op].leaf and weight.id > v.id:
            continue  # the fused node is built where v is, before such a weight exists
        plan[v.id] = n
    return plan


def fuse_add_rms_norms(graph: Graph) -> tuple[Graph, int]:
    """``graph`` with every residual ``gemm`` + ``rms_norm`` of a prefill fused (see the module doc), and
    how many were (``graph`` itself when none). Leaves are kept in their order, outputs in theirs; nodes
    the outputs do not depend on are left out."""
    nodes = graph.nodes()
    live = reachable(nodes, graph.outputs())
    plan = _plan(nodes, live)
    if not plan:
        return graph, 0
    out = Graph()
    new_id: dict[int, NodeId] = {}
    for n in nodes:
        if OPS[n.op].leaf:
            new_id[n.id] = out.add_node(n.op, (), n.ty, n.attrs)
    for n in nodes:  # ids are topological
        if n.id in new_id or n.id not in live:
            continue
        norm = plan.get(n.id)
        if norm is None:
            new_id[n.id] = out.apply(n.op, *(new_id[i] for i in n.inputs), **n.attrs)
            continue
        a, w, residual = (new_id[i] for i in n.inputs)
        product = out.apply("matmul_bt" if n.attrs["trans_b"] else "matmul", a, w)
        y, s = out.add_rms_norm(product, residual, new_id[norm.inputs[1]], norm.attrs["eps"])
        new_id[n.id], new_id[norm.id] = s, y
    out.set_outputs({name: new_id[nid] for name, nid in graph.named_outputs().items()})
    return out, len(plan)
