"""The e-graph optimizer: a Graph in, an equivalent Graph with fewer kernels out, and its report.

:func:`optimize` puts the graph into an egglog e-graph (:mod:`.egraph`), saturates it with the op
table's rewrite rules (``OpDef.rewrite``: algebra such as double negation, and fusions such as
``bias_add(matmul(a, b), c) -> gemm``), extracts the cheapest equivalent graph and rebuilds it through
``Graph.apply``, so every node is validated again by its op's shape rule.

Cost model (what extraction minimises). Each op node is one launched kernel that reads its inputs and
writes its output once::

    cost(node) = KERNEL_BYTES + bytes(inputs) + bytes(output)        leaves: 0

(a symbolic dimension counts as ``SYMBOLIC_DIM`` = 64).
``KERNEL_BYTES`` (8 MiB) prices a launch as the memory traffic an H200-class GPU moves in the few
microseconds a launch and its synchronisation take, so one fewer kernel outweighs any traffic a fusion
adds on the small tensors of a decode step, while among equal kernel counts the plan that moves fewer
bytes wins. E-nodes whose shape rule rejects their input types are never extracted (a rule may build
them). Extraction is two bottom-up passes: the first prices each e-class as a tree; the second counts
the e-classes the first plan computes anyway as free, so a fusion that would recompute a product
still used elsewhere loses to the unfused node. The result is kept only if its total (DAG) cost is no
higher than the input graph's.

Then plain passes: products sharing their left operand become one product and a split
(:mod:`.merge_projections`; stages ``"forward"`` and ``"inference"``), and with ``stage="inference"``
the passes of :data:`INFERENCE_PASSES` follow: a prefill's residual ``gemm`` and the RMSNorm after it
become a plain product and one ``add_rms_norm`` (:mod:`.add_rms_norm_fusion`), its split of the merged
q/k/v product, ropes and cache writes one ``qkv_rope_cache_write`` (:mod:`.qkv_rope_fusion`), its split of
the merged gate|up product and the SwiGLU reading it one ``swiglu_packed`` (:mod:`.swiglu_packed_fusion`); then the
decode-step fusion of RMSNorm into its projections (:mod:`.decode_fusion`: its q/k/v group is one node
with three outputs), those of rope and the cache writes into the attention
(:mod:`.rope_attention_fusion`) and of each whole decoder layer into one node
(:mod:`.decode_layer_fusion`).

Preserved: every leaf (inputs, parameters, constants, in creation order, reachable or not), the
outputs (same order), and in-place ops (``cache_write``: never merged, never rewritten away).
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from ..graph import Graph
from ..ir import DType, Node, TensorType, postorder, reachable
from ..ops import OPS
from .add_rms_norm_fusion import fuse_add_rms_norms
from .decode_fusion import DECODE_ROWS_MAX, fuse_norm_projections
from .decode_layer_fusion import fuse_decode_layers
from .egraph import ENode, Limits, Saturated, saturate, table_rules
from .merge_projections import merge_projections as merge_products
from .qkv_rope_fusion import fuse_qkv_rope_cache_writes
from .rope_attention_fusion import fuse_rope_attention
from .swiglu_packed_fusion import fuse_swiglu_packed

KERNEL_BYTES = 8 << 20
MERGE_MIN_ROWS = {"forward": 0, "inference": DECODE_ROWS_MAX + 1}
"""Stages that merge products sharing their left operand, and the least static row count merged:
every product before autodiff (the forward stage of training); at inference those of prefills,
not of decode steps (:mod:`.merge_projections`)."""
__all__ = ["KERNEL_BYTES", "Limits", "OptimizeReport", "optimize"]


@dataclass
class OptimizeReport:
    """What the e-graph optimizer did to one graph (Meganeura's report fields).

    ``rules_fired``: egglog's match count per rule, summed over iterations (a match found again in a
    later round counts again). ``fusions``: op -> how many more nodes of that op the result has than the
    input (the fused ops the rules produced). ``kept_input``: the input graph was returned (no rule
    matched and no subterm was shared, or extraction found nothing cheaper).
    """

    stage: str = "forward"
    nodes_before: int = 0
    nodes_after: int = 0
    eclasses: int = 0
    enodes: int = 0
    iterations: int = 0
    stop_reason: str = "not run"
    rules_fired: dict[str, int] = field(default_factory=dict)
    fusions: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    cost_before: int = 0
    cost_after: int = 0
    saturation_seconds: float = 0.0
    extraction_seconds: float = 0.0
    seconds: float = 0.0
    kept_input: bool = False
    program: str = ""
    stages: list[OptimizeReport] = field(default_factory=list)
    """For a training session: the forward stage and the train-step stage this report sums up."""

    @property
    def rewrites(self) -> dict[str, int]:
        """Rules that matched, with their counts (the placeholder pass's field name)."""
        return {k: v for k, v in self.rules_fired.items() if v}

    @staticmethod
    def combine(stages: list[OptimizeReport]) -> OptimizeReport:
        """One report over several runs: counts and times summed, node counts of the last stage."""
        total = OptimizeReport(stage=" + ".join(r.stage for r in stages), stages=list(stages))
        last = stages[-1]
        total.nodes_before, total.nodes_after, total.stop_reason = last.nodes_before, last.nodes_after, last.stop_reason
        total.cost_before, total.cost_after, total.kept_input = last.cost_before, last.cost_after, last.kept_input
        for r in stages:
            for mine, theirs in ((total.rules_fired, r.rules_fired), (total.fusions, r.fusions), (total.removed, r.removed)):
                for k, v in theirs.items():
                    mine[k] = mine.get(k, 0) + v
            total.eclasses += r.eclasses
            total.enodes += r.enodes
            total.iterations += r.iterations
            total.saturation_seconds += r.saturation_seconds
            total.extraction_seconds += r.extraction_seconds
            total.seconds += r.seconds
        total.program = "\n".join(f";; ---- stage: {r.stage}\n{r.program}" for r in stages)
        return total

    def summary(self) -> str:
        if self.stages:
            return "\n".join(r.summary() for r in self.stages) + f"\ntotal: {self.seconds * 1e3:.1f} ms"
        fired = ", ".join(f"{k} x{v}" for k, v in self.rewrites.items()) or "none"
        fused = ", ".join(f"{k} +{v}" for k, v in self.fusions.items()) or "none"
        removed = ", ".join(f"{k} -{v}" for k, v in self.removed.items()) or "none"
        return "\n".join(
            [
                f"OptimizeReport ({self.stage}): {self.nodes_before} -> {self.nodes_after} nodes in {self.seconds * 1e3:.1f} ms",
                f"  e-graph: {self.eclasses} e-classes, {self.enodes} e-nodes, {self.iterations} iteration(s) ({self.stop_reason})",
                f"  rules fired: {fired}",
                f"  fusions applied: {fused}; ops removed: {removed}",
                f"  cost: {self.cost_before} -> {self.cost_after}" + (" (kept the input graph)" if self.kept_input else ""),
                f"  saturation {self.saturation_seconds * 1e3:.1f} ms, extraction {self.extraction_seconds * 1e3:.1f} ms",
            ]
        )

    def __str__(self) -> str:
        return self.summary()


# -- cost model -------------------------------------------------------------------------------------
SYMBOLIC_DIM = 64
"""The size the cost model assumes for a symbolic dimension (``"batch"``, ``"seq"``)."""


@functools.lru_cache(maxsize=65536)
def tensor_bytes(t: TensorType) -> int:
    if t.is_static():
        return math.prod(t.shape) * t.dtype.size_bytes()
    return t.resolve(dict.fromkeys(t.symbols(), SYMBOLIC_DIM)).size_bytes()


@functools.lru_cache(maxsize=65536)
def node_cost(inputs: tuple[TensorType, ...], out: TensorType) -> int:
    return KERNEL_BYTES + sum(tensor_bytes(t) for t in inputs) + tensor_bytes(out)


def _typecheck(sat: Saturated, nodes: list[Node]) -> tuple[dict[int, TensorType], list[int | None]]:
    """E-class types (from the graph's nodes, then the shape rules) and each e-node's own cost
    (None where its shape rule rejects it)."""
    types = {sat.node_class[n.id]: n.ty for n in nodes}
    # An e-node that is a node of the graph (same op, input e-classes and attributes) is valid as is.
    known = {(n.op, tuple(sat.node_class[i] for i in n.inputs), sat.node_keys[n.id]): n.ty for n in nodes if n.id in sat.node_keys}
    costs: list[int | None] = [None] * len(sat.enodes)
    pending = list(range(len(sat.enodes)))
    while pending:
        progress, later = False, []
        for k in pending:
            e = sat.enodes[k]
            if e.op is None:
                costs[k], progress = 0, True
                continue
            if any(c not in types for c in e.children):
                later.append(k)
                continue
            progress = True
            out = known.get((e.op, e.children, e.attrs_key)) or _infer(e, [types[c] for c in e.children], sat)
            if out is None or types.setdefault(e.eclass, out) != out:
                continue
            costs[k] = node_cost(tuple(types[c] for c in e.children), out)
        if not progress:
            break
        pending = later
    return types, costs


def _infer(e: ENode, child_types: list[TensorType], sat: Saturated) -> TensorType | None:
    d = OPS[e.op]
    for k, t in enumerate(child_types):
        want = DType.U32 if k < len(d.inputs) and d.inputs[k] in d.u32_inputs else DType.F32
        if t.dtype is not want:
            return None
    try:
        return d.shape_rule(*child_types, **sat.keys.attrs(e.attrs_key))
    except (ValueError, TypeError):
        return None


# -- extraction -------------------------------------------------------------------------------------
def _extract(sat: Saturated, costs: list[int | None], free: set[int]) -> dict[int, int]:
    """E-class -> chosen e-node: cheapest tree cost, where e-classes in ``free`` cost their parents 0."""
    parents: dict[int, list[int]] = {}
    queue: deque[int] = deque()
    for k, e in enumerate(sat.enodes):
        if costs[k] is None:
            continue
        for c in e.children:
            parents.setdefault(c, []).append(k)
        if not e.children:
            queue.append(k)
    # Exact integers: tree costs double-count shared inputs, so on a deep graph with a residual
    # stream they grow like 2**depth (a float overflows; a Python int does not, and the choices
    # only compare alternatives over the same inputs).
    best: dict[int, int] = {}
    choice: dict[int, int] = {}
    while queue:
        k = queue.popleft()
        e = sat.enodes[k]
        total = costs[k]
        for c in e.children:
            if c not in best:
                total = None
                break
            total += 0 if c in free else best[c]
        if total is not None and (e.eclass not in best or total < best[e.eclass]):
            best[e.eclass], choice[e.eclass] = total, k
            queue.extend(parents.get(e.eclass, ()))
    return choice


def _plan(sat: Saturated, choice: dict[int, int], roots: list[int]) -> list[int] | None:
    """The e-classes the plan computes, inputs first; None if the choices form a cycle."""
    return postorder(roots, lambda c: sat.enodes[choice[c]].children if c in choice else None)


def _choose(sat: Saturated, costs: list[int | None], roots: list[int]) -> tuple[dict[int, int], list[int]]:
    choice = _extract(sat, costs, set())
    order = _plan(sat, choice, roots)
    if order is None:
        raise RuntimeError("optimize: the extracted graph has a cycle or misses an output (a bug in the optimizer)")
    if len(sat.enodes) == sat.num_classes:  # one e-node per e-class: nothing to choose
        return choice, order
    for _ in range(3):  # sharing-aware passes: what the current plan computes anyway is free
        shared = _extract(sat, costs, set(order))
        shared_order = _plan(sat, shared, roots)
        if shared_order is None or _dag_cost(sat, costs, shared, shared_order) >= _dag_cost(sat, costs, choice, order):
            break
        choice, order = shared, shared_order
    return choice, order


def _dag_cost(sat: Saturated, costs: list[int | None], choice: dict[int, int], order: list[int]) -> int:
    return sum(costs[choice[c]] for c in order)


# -- the public pass --------------------------------------------------------------------------------
def optimize(
    graph: Graph,
    *,
    limits: Limits | None = None,
    stage: str = "forward",
    decode_fusion: bool = True,
    rope_attention: bool | None = None,
    merge_projections: bool = True,
    decode_layer: bool | None = None,
    add_rms_norm: bool | None = None,
    qkv_rope_cache: bool | None = None,
    swiglu_packed: bool | None = None,
) -> tuple[Graph, OptimizeReport]:
    """A new graph with the op table's rewrites applied, and the report. ``graph`` is not modified; it is
    returned itself when no rule matched or extraction finds nothing cheaper. Node counts in the
    report are of the nodes the outputs depend on. ``stage="inference"`` with ``decode_fusion`` (the
    default) also fuses decode-step norms into their projections (:mod:`.decode_fusion`), and with
    ``rope_attention`` (default: as ``decode_fusion``) a decode step's rope and cache writes into its
    attention (:mod:`.rope_attention_fusion`), and with ``decode_layer`` (default: as ``decode_fusion``)
    each decoder layer those two passes left as five nodes into one ``decode_layer``
    (:mod:`.decode_layer_fusion`). ``merge_projections`` (default True; stages
    ``"forward"`` and ``"inference"``) runs products that share their left operand as one product
    against their concatenated weights (:mod:`.merge_projections`; at inference only products of
    more than ``DECODE_ROWS_MAX`` rows or of symbolic rows, so decode steps stay as they are).
    ``add_rms_norm`` (default: as ``decode_fusion``; ``stage="inference"``): each residual ``gemm`` of such
    a prefill and the ``rms_norm`` reading it as a plain product and one ``add_rms_norm``
    (:mod:`.add_rms_norm_fusion`). ``qkv_rope_cache`` (default: as ``decode_fusion``; ``stage="inference"``):
    each such prefill's split of its merged q/k/v product, the ropes and the cache writes as one
    ``qkv_rope_cache_write`` (:mod:`.qkv_rope_fusion`). ``swiglu_packed`` (default: as ``decode_fusion``;
    ``stage="inference"``): each such prefill's split of its merged gate|up product and the ``swiglu`` reading
    it as one ``swiglu_packed`` (:mod:`.swiglu_packed_fusion`)."""
    t0 = time.perf_counter()
    nodes = graph.nodes()
    if _state_writers_off_the_outputs(graph):  # already fused: a rebuild from the outputs would drop them
        live = len(_live(nodes, graph.outputs()))
        return graph, OptimizeReport(stage=stage, nodes_before=live, nodes_after=live, stop_reason="already fused", kept_input=True)
    sat = saturate(nodes, table_rules(), limits or Limits())
    t1 = time.perf_counter()
    live = _live(nodes, graph.outputs())
    before = sum(node_cost(tuple(nodes[i].ty for i in n.inputs), n.ty) for n in live if not OPS[n.op].leaf)
    ops_before = Counter(n.op for n in live if not OPS[n.op].leaf)
    out, after, ops_after, nodes_after = graph, before, ops_before, len(live)
    if any(sat.matches.values()) or sat.num_classes < len(nodes):  # a rewrite or a shared subterm
        _, costs = _typecheck(sat, nodes)
        choice, order = _choose(sat, costs, [sat.node_class[o] for o in graph.outputs()])
        cost = _dag_cost(sat, costs, choice, order)
        if cost <= before:
            out, after, nodes_after = _rebuild(graph, sat, choice, order), cost, len(order)
            ops_after = Counter(op for op in (sat.enodes[choice[c]].op for c in order) if op is not None)
    t2 = time.perf_counter()
    report = OptimizeReport(
        stage=stage,
        nodes_before=len(live),
        nodes_after=nodes_after,
        eclasses=sat.num_classes,
        enodes=len(sat.enodes),
        iterations=sat.iterations,
        stop_reason=sat.stop_reason,
        rules_fired=sat.matches,
        cost_before=before,
        cost_after=after,
        saturation_seconds=sat.seconds,
        extraction_seconds=t2 - t1,
        seconds=t2 - t0,
        kept_input=out is graph,
        program=sat.program,
    )
    passes = {"decode_fusion": decode_fusion, "add_rms_norm": add_rms_norm, "qkv_rope_cache": qkv_rope_cache}
    passes |= {"swiglu_packed": swiglu_packed, "rope_attention": rope_attention, "decode_layer": decode_layer}
    out, ops_after = _plain_passes(out, report, t0, ops_after, stage, merge_projections, passes)
    report.fusions = {op: ops_after[op] - ops_before[op] for op in sorted(ops_after) if ops_after[op] > ops_before[op]}
    report.removed = {op: ops_before[op] - ops_after[op] for op in sorted(ops_before) if ops_before[op] > ops_after[op]}
    return out, report


def _fired(name: str, made: tuple[Graph, int | dict[str, int]]) -> tuple[Graph, dict[str, int]]:
    """A plain pass's (graph, count) as (graph, {report key: count}); a dict of counts keeps its own keys."""
    out, count = made
    return out, ({f"fuse_{op}": k for op, k in count.items()} if isinstance(count, dict) else {name: count} if count else {})


INFERENCE_PASSES = (
    ("add_rms_norm", lambda g: _fired("fuse_add_rms_norm", fuse_add_rms_norms(g))),  # prefills only
    (
        "qkv_rope_cache",
        lambda g: _fired("fuse_qkv_rope_cache_write", fuse_qkv_rope_cache_writes(g)),
    ),  # prefills: a decode step has no split
    ("swiglu_packed", lambda g: _fired("fuse_swiglu_packed", fuse_swiglu_packed(g))),  # prefills: the gate|up split
    ("decode_fusion", lambda g: _fired("", fuse_norm_projections(g))),  # norm + projections of a decode step
    ("rope_attention", lambda g: _fired("fuse_rope_cached_attention", fuse_rope_attention(g))),  # its cache nodes are read by no node
    ("decode_layer", lambda g: _fired("fuse_decode_layer", fuse_decode_layers(g))),  # last: the chains the passes above leave
)
"""The plain passes of ``stage="inference"`` after ``merge_projections``, in order: (the keyword of
:func:`optimize` that chooses it, None meaning as ``decode_fusion``; the pass)."""


def _plain_passes(
    out: Graph, report: OptimizeReport, t0: float, ops_after: Counter, stage: str, merge_projections: bool, flags: dict
) -> tuple[Graph, Counter]:
    """The plain passes after the e-graph, in order (see :func:`optimize`; ``flags``: its keywords that
    choose them), and the op counts of the result."""
    if merge_projections and stage in MERGE_MIN_ROWS:  # before the decode fusions, which it leaves their small-row products
        out, merged = merge_products(out, min_rows=MERGE_MIN_ROWS[stage])
        ops_after = _after_pass(out, report, t0, {"merge_projections": merged}) if merged else ops_after
    if stage != "inference":
        return out, ops_after
    for flag, run in INFERENCE_PASSES:
        if not (flags["decode_fusion"] if flags[flag] is None else flags[flag]):
            continue
        out, fired = run(out)
        ops_after = _after_pass(out, report, t0, fired) if fired else ops_after
    return out, ops_after


def _after_pass(out: Graph, report: OptimizeReport, t0: float, fired: dict[str, int]) -> Counter:
    """The report updated after a plain pass changed the graph to ``out`` (its rules ``fired``); the
    op counts of ``out``'s live nodes."""
    live = _live(out.nodes(), out.outputs())
    report.nodes_after, report.kept_input = len(live), False
    report.rules_fired = {**report.rules_fired, **fired}
    report.seconds = time.perf_counter() - t0
    return Counter(n.op for n in live if not OPS[n.op].leaf)


def _state_writers_off_the_outputs(graph: Graph) -> bool:
    """Whether a node writing state in place is read by no output (``rope_cached_attention``'s cache
    nodes after :mod:`.rope_attention_fusion`): a graph this optimizer already ran on."""
    nodes = graph.nodes()
    live = {n.id for n in _live(nodes, graph.outputs())}
    return any(n.id not in live and OPS[n.op].written_input(n.attrs) is not None for n in nodes)


def _live(nodes: list[Node], outputs: list[int]) -> list[Node]:
    """The nodes the outputs depend on."""
    return [nodes[i] for i in sorted(reachable(nodes, outputs))]


def _rebuild(graph: Graph, sat: Saturated, choice: dict[int, int], order: list[int]) -> Graph:
    """The extracted plan as a Graph: leaves first (all of them, in their order), then ``apply``."""
    out = Graph()
    new_id: dict[int, int] = {}
    leaf_of: dict[int, int] = {}
    for n in graph.nodes():
        if OPS[n.op].leaf:
            leaf_of[n.id] = out.add_node(n.op, (), n.ty, n.attrs)
    for c in order:
        e = sat.enodes[choice[c]]
        if e.op is None:
            new_id[c] = leaf_of[e.leaf_id]
        else:
            new_id[c] = out.apply(e.op, *(new_id[k] for k in e.children), **sat.keys.attrs(e.attrs_key))
    out.set_outputs({name: new_id[sat.node_class[o]] for name, o in graph.named_outputs().items()})
    return out
