"""The decode-step fusions of a norm or a residual add into the projections next to it (a plain graph pass).

After the e-graph optimizer, an inference graph's ``rms_norm`` whose every consumer is a product
taking it as the left operand (``matmul_bt`` with torch-layout weights, or ``matmul`` with ``[in,
out]`` ones, all of one kind, every weight a graph leaf) becomes:

* ``rms_norm_swiglu`` when there are exactly two products and both feed one ``swiglu`` (gate, up)
  and nothing else: LLaMA's MLP, one kernel instead of four;
* otherwise ``rms_norm_linear``, one kernel with an output per product: LLaMA's q/k/v projections
  (and a final norm with its LM head).

And a ``gemm`` whose C input is a residual ``[M, N]`` (what the e-graph makes of ``add(residual,
matmul_bt(x, w))``: LLaMA's o_proj and down_proj joining the residual stream) becomes
``linear_residual``, the same GEMV with the add as its epilogue: one kernel where ONNX Runtime's CUDA
``Gemm`` copies C into its output and then multiplies (two). A LLaMA decode layer then launches
RMSNormLinear, the rope/cache/attention kernels, LinearResidual, RMSNormSwiGLU, LinearResidual.

Why a plain pass, not e-graph rules (``OpDef.rewrite``): the q/k/v group is one node with three
outputs, which the e-graph's one-term-at-a-time rules cannot group; and the fused ops have no
gradient, while the e-graph rules also run on training graphs before autodiff. This pass runs only
when ``optimize`` is called with ``stage="inference"`` (and ``decode_fusion``, which inference sessions
set on CUDA only: on the CPU, ONNX Runtime's MLAS products outpace these GEMVs at one token).

Where it pays: the fused kernels are GEMVs that read each weight once for all rows (the CUDA kernel
keeps up to 16 rows in registers), which beats a library GEMM only while the rows are few. The pass
fuses only products with a static row count ``<= DECODE_ROWS_MAX`` (a decode step of up to 16 sequences);
a prefill (its rows are a symbolic or large static count) keeps ``Gemm``/``MatMul`` (cuBLAS, MLAS). So
does a product whose inner size is over ``DECODE_K_MAX`` (the CUDA kernels would refuse it), and one of
several rows through a weight wider than ``DECODE_WIDE_N`` columns (an LM head at batch > 1): there the
GEMV, a warp per column, is bound by its own latency (H200, SmolLM2's 576 x 49152 LM head at 8 rows:
127 us fp16, 89 us fp32), where cuBLAS's GEMM reads the weight at the bandwidth (17 us, 56 us).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..graph import Graph
from ..ir import Node
from ..ops import OPS

DECODE_ROWS_MAX = 16
"""Largest static row count of a normalised input that is fused (decode steps of up to 16 sequences)."""
DECODE_K_MAX = 11776
"""Largest static inner size of a fused product (the CUDA kernels keep a float32 tile of the rows in a
block's 48 KB of shared memory: ``MN_NORM_LINEAR_MAX_K`` in ``custom_ops/cuda_decode_linear.h``)."""
DECODE_WIDE_N = 16384
"""Widest product output fused for more than one row (see above; one row: any width)."""
PRODUCTS = {"matmul_bt": True, "matmul": False}  # op -> trans_b of the fused op


def consumers(nodes: list[Node]) -> dict[int, list[Node]]:
    """Node id -> the nodes that read it (each reader once)."""
    users: dict[int, list[Node]] = {}
    for n in nodes:
        for i in dict.fromkeys(n.inputs):
            users.setdefault(i, []).append(n)
    return users


def _plan(graph: Graph) -> dict[int, tuple[str, tuple[int, ...], dict]]:
    """Node id -> (fused op, inputs, attributes) that replaces it."""
    nodes, outputs = graph.nodes(), set(graph.outputs())
    users = consumers(nodes)
    replace: dict[int, tuple[str, tuple[int, ...], dict]] = {}
    for n in nodes:
        rows, k = (n.ty.shape[0], n.ty.shape[-1]) if n.op == "rms_norm" else (None, None)
        if not isinstance(rows, int) or rows > DECODE_ROWS_MAX or not isinstance(k, int) or k > DECODE_K_MAX or n.id in outputs:
            continue
        products = users.get(n.id, [])
        kinds = {p.op for p in products}
        if not products or len(kinds) != 1 or not kinds <= set(PRODUCTS):
            continue
        if any(p.inputs[0] != n.id or not OPS[nodes[p.inputs[1]].op].leaf for p in products):
            continue
        if rows > 1 and any(not isinstance(p.ty.shape[-1], int) or p.ty.shape[-1] > DECODE_WIDE_N for p in products):
            continue
        x, weight = n.inputs
        attrs = {"eps": n.attrs["eps"], "trans_b": PRODUCTS[kinds.pop()]}
        mlp = _swiglu_of(products, users, outputs)
        if mlp is not None:
            gate, up = (nodes[i].inputs[1] for i in mlp.inputs)
            replace[mlp.id] = ("rms_norm_swiglu", (x, weight, gate, up), attrs)
            continue
        ws = tuple(p.inputs[1] for p in products)
        for k, p in enumerate(products):
            replace[p.id] = ("rms_norm_linear", (x, weight, *ws), {**attrs, "index": k})
    return replace


def _swiglu_of(products: list[Node], users: dict[int, list[Node]], outputs: set[int]) -> Node | None:
    """The ``swiglu`` that is the only consumer of both of exactly two products (gate, up), if any."""
    if len(products) != 2 or any(p.id in outputs or len(users.get(p.id, [])) != 1 for p in products):
        return None
    a, b = (users[p.id][0] for p in products)
    if a is not b or a.op != "swiglu" or set(a.inputs) != {p.id for p in products}:
        return None
    return a


def _plan_residual_products(graph: Graph) -> dict[int, tuple[str, tuple[int, ...], dict]]:
    """Node id -> ``linear_residual`` replacing it, for every ``gemm`` of a decode step whose C is a
    residual of the product's shape (not a bias row), whose weight is a graph leaf and whose rows and
    inner size are static and within the kernels' bounds."""
    nodes = graph.nodes()
    replace: dict[int, tuple[str, tuple[int, ...], dict]] = {}
    for n in nodes:
        if n.op != "gemm":
            continue
        x, w, residual = n.inputs
        rows, k = nodes[x].ty.shape[0], nodes[x].ty.shape[-1]
        if not (isinstance(rows, int) and rows <= DECODE_ROWS_MAX and isinstance(k, int) and k <= DECODE_K_MAX):
            continue
        if nodes[residual].ty.shape != n.ty.shape or not OPS[nodes[w].op].leaf:
            continue
        replace[n.id] = ("linear_residual", (x, w, residual), {"trans_b": n.attrs["trans_b"]})
    return replace


Replacement = tuple[str, tuple[int, ...], dict]
"""A node rebuilt as ``(op, input ids of the old graph, attrs)``."""


def rebuild(graph: Graph, replace: dict[int, Replacement], keep: Iterable[int] = ()) -> tuple[Graph, dict[int, int]]:
    """A copy of ``graph`` in which node ``i`` is built as ``replace[i]``, and the map from old node ids
    to new ones. Leaves are copied first, in creation order (sessions feed them by name); the other
    nodes are built from the named outputs, then from ``keep`` (nodes no output reads that must stay: the
    caches' next values), so nodes only the replaced ones read are left out."""
    nodes = graph.nodes()
    out = Graph()
    new_id: dict[int, int] = {}
    for n in nodes:
        if OPS[n.op].leaf:
            new_id[n.id] = out.add_node(n.op, (), n.ty, n.attrs)

    def build(root: int) -> int:
        stack = [root]
        while stack:  # iterative post-order: decoder stacks are deep
            i = stack[-1]
            if i in new_id:
                stack.pop()
                continue
            op, inputs, attrs = replace.get(i) or (nodes[i].op, nodes[i].inputs, nodes[i].attrs)
            todo = [k for k in inputs if k not in new_id]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            new_id[i] = out.apply(op, *(new_id[k] for k in inputs), **attrs)
        return new_id[root]

    out.set_outputs({name: build(nid) for name, nid in graph.named_outputs().items()})
    for nid in keep:
        build(nid)
    return out, new_id


def fuse_norm_projections(graph: Graph) -> tuple[Graph, dict[str, int]]:
    """``graph`` with the decode-step fusions applied (norms into their projections, residual adds into
    theirs), and how many of each fused op it made (``graph`` itself when nothing matched). Leaves and
    outputs are kept, in their order."""
    replace = {**_plan(graph), **_plan_residual_products(graph)}
    if not replace:
        return graph, {}
    out, _ = rebuild(graph, replace)
    made: dict[str, int] = {}
    for n in out.nodes():
        if n.op in ("rms_norm_swiglu", "rms_norm_linear", "linear_residual") and n.attrs.get("index", 0) == 0:
            made[n.op] = made.get(n.op, 0) + 1
    return out, made
