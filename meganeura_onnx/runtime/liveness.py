"""Where a model's memory goes: a liveness analysis of an ONNX graph run node by node.

Every intermediate tensor (not a graph input, initializer or output) is live from the node that
produces it until its last reader has run. Walking the nodes in an execution order gives the bytes
live while each node runs (its inputs and outputs included), the peak, and which tensors make it up.
Graph inputs, initializers and outputs are reported apart (``held_bytes``): a session holds them as
its own buffers (parameters, optimizer state, bound outputs), not in ONNX Runtime's arena.

View ops (``Reshape``, ``Squeeze``, ``Unsqueeze``, ``Flatten``, ``Identity``) allocate nothing: ONNX
Runtime's kernels alias their input, so their output keeps the input's storage alive instead.
Other in-place reuse (ORT lets some elementwise kernels write over an input that dies there) is not
modelled, so the peak is an upper bound of what an allocator that frees each tensor after its last
reader needs, for that order.

:func:`memory_order` is a memory-aware schedule (the model's order, except that nodes freeing at
least what they allocate run as soon as they are ready), which training sessions make ONNX Runtime
follow; :func:`recompute_late_reads` trades a cheap kernel for a tensor kept across the forward and
backward passes. :func:`liveness` of an order shows what it costs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


@dataclass
class Liveness:
    """Result of :func:`liveness` (bytes throughout)."""

    order: list[int]
    """Node indices of the model's graph, in the order analysed."""
    live_bytes: list[int]
    """Intermediate bytes live while ``order[k]`` runs (its inputs and outputs included)."""
    peak_bytes: int
    peak_step: int
    """Position in ``order`` where the peak is reached (the first such)."""
    peak_tensors: list[tuple[str, str, int]]
    """(tensor, producing op type, bytes) live at the peak, largest first."""
    held_bytes: int
    """Graph inputs + initializers + graph outputs: the session's own buffers."""
    lower_bound_bytes: int
    """The largest working set of one node (its intermediate inputs and outputs): no order does better."""
    nodes: list[str] = field(default_factory=list)
    """``op_type name`` of every node of the graph (by node index)."""

    def top(self, k: int = 10) -> list[tuple[str, str, int]]:
        return self.peak_tensors[:k]

    def __str__(self) -> str:
        gb = 1e9
        at = self.nodes[self.order[self.peak_step]] if self.nodes else str(self.order[self.peak_step])
        lines = [
            f"Liveness: {len(self.order)} nodes, peak {self.peak_bytes / gb:.3f} GB of intermediates at step {self.peak_step} ({at}),"
            f" {len(self.peak_tensors)} tensors live; held (inputs, initializers, outputs) {self.held_bytes / gb:.3f} GB;"
            f" lower bound {self.lower_bound_bytes / gb:.3f} GB"
        ]
        lines += [f"  {b / 1e6:9.1f} MB  {op:<22} {name}" for name, op, b in self.top()]
        return "\n".join(lines)


def _tensor_bytes(model: onnx.ModelProto) -> dict[str, int]:
    """Bytes of every tensor of the graph, from the model's types or ONNX shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    g = inferred.graph
    sizes: dict[str, int] = {}
    for v in [*g.input, *g.output, *g.value_info]:
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if t.elem_type and None not in dims:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
            sizes[v.name] = int(np.prod(dims, dtype=np.int64)) * itemsize
    for init in g.initializer:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
        sizes[init.name] = int(np.prod(init.dims, dtype=np.int64)) * itemsize
    # Inference inside function bodies can lose a dim (a symbolic ``unk__``); a view of the tensor
    # with a known size has the same bytes.
    for n in g.node:
        if n.op_type in VIEW_OPS and n.input and n.input[0] not in sizes and n.output[0] in sizes:
            sizes[n.input[0]] = sizes[n.output[0]]
    return sizes


def _proxy_bytes(model: onnx.ModelProto, sizes: dict[str, int]) -> dict[str, int]:
    """Sizes for ordering where some are unknown (symbolic dims, data-dependent shapes): a symbolic
    dim counts as 1, so tensors keep their relative sizes along the known dims; untyped ones 0."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True).graph
    out = dict(sizes)
    for v in [*inferred.input, *inferred.output, *inferred.value_info]:
        t = v.type.tensor_type
        if v.name not in out and t.elem_type:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
            out[v.name] = int(np.prod([d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim], dtype=np.int64)) * itemsize
    for n in model.graph.node:
        for o in n.output:
            out.setdefault(o, 0)
    return out


class _Graph:
    """Producers, readers and storage (views resolved to the tensor they alias) of a model's tensors."""

    def __init__(self, model: onnx.ModelProto, exact: bool = True) -> None:
        g = model.graph
        self.nodes = list(g.node)
        self.size = _tensor_bytes(model)
        self.held = {v.name for v in g.input} | {i.name for i in g.initializer} | {v.name for v in g.output}
        unknown = [o for n in self.nodes for o in n.output if o and o not in self.size]
        if unknown and exact:
            raise ValueError(f"liveness: the sizes of {len(unknown)} tensors are unknown (symbolic or untyped), e.g. {unknown[:3]}")
        if unknown:
            self.size = _proxy_bytes(model, self.size)
        self.storage: dict[str, str] = {}  # tensor -> the tensor whose buffer it uses
        self.producer: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                if o:
                    self.producer[o] = i
                    view = n.op_type in VIEW_OPS and n.domain in ("", "ai.onnx") and n.input[0] not in ("",)
                    self.storage[o] = self.storage.get(n.input[0], n.input[0]) if view else o
        # Storage -> node indices that read it (through any view) or produce it.
        self.users: dict[str, set[int]] = {}
        for i, n in enumerate(self.nodes):
            for t in [*n.input, *n.output]:
                if t:
                    self.users.setdefault(self.root(t), set()).add(i)

    def root(self, t: str) -> str:
        return self.storage.get(t, t)

    def owned(self, t: str) -> bool:
        """Whether ``t``'s storage is an intermediate allocated by the run (not held, not a view)."""
        r = self.root(t)
        return r not in self.held and r in self.producer and self.storage[r] == r

    def allocs(self, i: int) -> list[str]:
        return [o for o in self.nodes[i].output if o and self.owned(o) and self.root(o) == o]


def _check_order(g: _Graph, order: Sequence[int]) -> list[int]:
    order = [int(i) for i in order]
    if sorted(order) != list(range(len(g.nodes))):
        raise ValueError(f"liveness: order must list each of the {len(g.nodes)} node indices once, got {len(order)} entries")
    pos = {i: k for k, i in enumerate(order)}
    for i, n in enumerate(g.nodes):
        for t in n.input:
            if t in g.producer and pos[g.producer[t]] > pos[i]:
                raise ValueError(f"liveness: order runs node {i} ({n.op_type}) before node {g.producer[t]}, which produces its input {t!r}")
    return order


def liveness(model: onnx.ModelProto, order: Sequence[int] | None = None) -> Liveness:
    """Bytes of intermediate tensors live at each node of ``model`` run in ``order`` (node indices;
    default: the model's own order, which ONNX Runtime follows with ``ExecutionOrder.PRIORITY_BASED``)."""
    g = _Graph(model)
    order = _check_order(g, range(len(g.nodes)) if order is None else order)
    pos = {i: k for k, i in enumerate(order)}
    birth: dict[str, int] = {}
    death: dict[str, int] = {}
    for r, users in g.users.items():
        if g.owned(r) and g.root(r) == r:
            steps = [pos[u] for u in users]
            birth[r], death[r] = pos[g.producer[r]], max(steps)
    delta = [0] * (len(order) + 1)
    for r, b in birth.items():
        delta[b] += g.size[r]
        delta[death[r] + 1] -= g.size[r]
    live, total = [], 0
    for k in range(len(order)):
        total += delta[k]
        live.append(total)
    peak_step = int(np.argmax(live)) if live else 0
    at_peak = [r for r in birth if birth[r] <= peak_step <= death[r]]
    peak_tensors = sorted(((r, g.nodes[g.producer[r]].op_type, g.size[r]) for r in at_peak), key=lambda x: -x[2])
    held = sum(g.size.get(t, 0) for t in g.held)
    bound = max((sum(g.size[r] for r in {g.root(t) for t in [*n.input, *n.output] if t and g.owned(t)}) for n in g.nodes), default=0)
    names = [f"{n.op_type} {n.name}" for n in g.nodes]
    return Liveness(order, live, live[peak_step] if live else 0, peak_step, peak_tensors, held, bound, names)


def memory_order(model: onnx.ModelProto) -> list[int]:
    """A topological order of ``model``'s nodes for a lower peak: the model's own order, except that
    a node whose inputs are ready and that frees at least as many bytes as it allocates (it is the
    last reader of a tensor: a weight gradient's MatMul releasing a saved activation, a reduction)
    runs at once instead of where the model put it. Among such nodes the one that frees most goes
    first. A heuristic (the optimum is NP-hard); :func:`liveness` of both orders shows what it gains.
    Where sizes are unknown (symbolic dims), a symbolic dim counts as 1 for the choice."""
    g = _Graph(model, exact=False)
    n_nodes = len(g.nodes)
    remaining = {r: len(u) for r, u in g.users.items()}  # nodes still to run that touch r
    waiting = [0] * n_nodes
    readers: dict[int, list[int]] = {}
    for i, n in enumerate(g.nodes):
        deps = {g.producer[t] for t in n.input if t in g.producer}
        waiting[i] = len(deps)
        for d in deps:
            readers.setdefault(d, []).append(i)

    def cost(i: int) -> int:
        n = g.nodes[i]
        new = sum(g.size[o] for o in g.allocs(i))
        roots = {g.root(t) for t in [*n.input, *n.output] if t and g.owned(t)}
        return new - sum(g.size[r] for r in roots if remaining[r] == 1)

    by_index = [i for i in range(n_nodes) if waiting[i] == 0]  # ready, in model order (a heap)
    heapq.heapify(by_index)
    ready = set(by_index)
    order: list[int] = []
    while ready:
        freeing = [(cost(i), i) for i in ready if cost(i) <= 0]
        i = min(freeing)[1] if freeing else heapq.heappop(by_index)
        while i not in ready:  # (a heap entry already run as a freeing node)
            i = heapq.heappop(by_index)
        ready.discard(i)
        order.append(i)
        n = g.nodes[i]
        for r in {g.root(t) for t in [*n.input, *n.output] if t}:
            remaining[r] -= 1
        for j in readers.get(i, []):
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.add(j)
                heapq.heappush(by_index, j)
    return order


def depth_first_order(model: onnx.ModelProto) -> list[int]:
    """The post-order depth-first walk from the graph's outputs (each node's inputs in order): the
    order a plain topological sort from the outputs gives, and close to ONNX Runtime's default."""
    nodes = list(model.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    order: list[int] = []
    seen: set[int] = set()
    roots = [producer[v.name] for v in model.graph.output if v.name in producer] + list(range(len(nodes)))
    for root in roots:
        stack = [(root, False)]
        while stack:
            i, leaving = stack.pop()
            if leaving:
                order.append(i)
                continue
            if i in seen:
                continue
            seen.add(i)
            stack.append((i, True))
            deps = [producer[t] for t in nodes[i].input if t in producer]
            stack.extend((d, False) for d in reversed(deps) if d not in seen)
    return order


def reorder_for_memory(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its graph's nodes in :func:`memory_order` (in place; returned for chaining).
    ONNX Runtime follows the model's node order with ``ExecutionOrder.PRIORITY_BASED``."""
    nodes = list(model.graph.node)
    order = memory_order(model)
    del model.graph.node[:]
    model.graph.node.extend(nodes[i] for i in order)
    return model


RECOMPUTED = frozenset({("com.meganeura", "SwiGLU"), ("", "Concat")})
"""Cheap ops whose output the backward pass recomputes instead of keeping it alive: SwiGLU, and
Concat for the weights of a merged projection (``transforms.merge_projections``: copying a layer's
q|k|v and gate|up weights again, ~9 MB for SmolLM2, beats keeping every layer's copy from the
forward to the backward pass)."""


def recompute_late_reads(model: onnx.ModelProto, ops: frozenset[tuple[str, str]] = RECOMPUTED) -> int:
    """Give the late readers of each node of ``ops`` (every reader after the first, in the model's
    node order) a copy of that node inserted just before them, so its output dies at its first
    reader instead of living until the backward pass (SwiGLU: one ``[rows, intermediate]`` tensor
    per layer). Only where every input of the node is read again at or after the late reader anyway,
    so the copy keeps nothing alive longer. The copy is the same kernel on the same inputs: the
    same values. Returns the number of copies; run on a model already in :func:`memory_order`."""
    nodes = list(model.graph.node)
    outputs = {v.name for v in model.graph.output}
    last_read: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            last_read[t] = i
            readers.setdefault(t, []).append(i)
    before: dict[int, list[onnx.NodeProto]] = {}
    for n in nodes:
        if (n.domain, n.op_type) not in ops or len(n.output) != 1 or n.output[0] in outputs:
            continue
        late = sorted(set(readers.get(n.output[0], [])))[1:]
        if not late or any(last_read.get(t, -1) < late[0] for t in n.input if t):
            continue
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.name, copy.output[0] = f"{n.name}/recomputed", f"{n.output[0]}/recomputed"
        for r in late:
            nodes[r].input[:] = [copy.output[0] if t == n.output[0] else t for t in nodes[r].input]
        before.setdefault(late[0], []).append(copy)
    del model.graph.node[:]
    for i, n in enumerate(nodes):
        model.graph.node.extend(before.get(i, []))
        model.graph.node.append(n)
    return sum(len(v) for v in before.values())


def without_recompute(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with the copies :func:`recompute_late_reads` made removed (their readers
    read the original outputs again): the graph as it was, to compare."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    copies = {n.output[0]: n.output[0].removesuffix("/recomputed") for n in out.graph.node if n.name.endswith("/recomputed")}
    kept = [n for n in out.graph.node if not n.name.endswith("/recomputed")]
    for n in kept:
        n.input[:] = [copies.get(t, t) for t in n.input]
    del out.graph.node[:]
    out.graph.node.extend(kept)
    return out
