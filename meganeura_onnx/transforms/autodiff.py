"""Reverse-mode autodiff on a Graph: apply each op's VJP rule from the loss back to the leaves.

The walk (in the spirit of tinygrad's ``gradient.py`` and micrograd) appends the gradient nodes to
the same graph with its builder methods, so the result exports like any other graph:

- only nodes on a path from a requested leaf to the loss get a gradient;
- a node used several times gets the ``add`` of its gradient contributions;
- an op marked ``differentiable=False`` (``greater``, ``sign``, cache ops, backward-only helper
  ops) stops the flow: its inputs receive nothing through it, and the walk records where it
  stopped, so a leaf that reaches the loss *only* through such ops gets ``None`` and
  :attr:`Gradients.stopped` says why -- never a silently wrong number. U32 inputs get ``None``.
- an op marked differentiable without a VJP rule is an error naming the op;
- the nodes of a multi-output op (``split``: same inputs and attributes but ``index``) with a group
  rule (``OpDef.group_vjp``) are differentiated together, at the first of them (all their users come
  later, so every piece's gradient is complete there): one contribution per input, not one per node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..ir import DType, NodeId
from ..ops import OPS


@dataclass
class Gradients:
    """Result of :func:`gradients`: ``grads[leaf]`` is the gradient node (None when none flows)."""

    grads: dict[NodeId, NodeId | None]
    stopped: list[tuple[NodeId, str]] = field(default_factory=list)
    """(node id, op) of non-differentiable nodes that a requested leaf reached the loss through."""

    def why_none(self, leaf: NodeId) -> str:
        ops = ", ".join(f"{op} (node {nid})" for nid, op in self.stopped) or "none"
        return f"node {leaf} reaches the loss only through non-differentiable ops or not at all; gradient flow stopped at: {ops}"


def gradients(g, loss: NodeId, wrt: Sequence[NodeId], seed: NodeId | None = None) -> Gradients:
    """Append to ``g`` the gradient of ``loss`` with respect to each node of ``wrt``.

    ``loss`` must be a ``[1]`` node unless ``seed`` (the upstream gradient, same shape as loss)
    is given. Returns a :class:`Gradients` keyed by the ``wrt`` ids.
    """
    loss = g.handle(loss, "loss", "gradients")  # TypeError/ValueError for a bad id or one of another graph
    wrt = [g.handle(w, f"wrt[{k}]", "gradients") for k, w in enumerate(wrt)]
    nodes = g.nodes()
    loss_ty = nodes[loss].ty
    if seed is None:
        if loss_ty.shape != (1,):
            raise ValueError(f"gradients: the loss must be a [1] node, got {loss_ty} (node {loss}); pass seed= for other shapes")
        seed = g.scalar(1.0)
    # Ids are topological (inputs precede users), so one forward pass marks the nodes that depend
    # on a requested leaf and one backward pass the nodes the loss depends on.
    targets = set(wrt)
    depends = [False] * len(nodes)
    for n in nodes[: loss + 1]:
        depends[n.id] = n.id in targets or any(depends[i] for i in n.inputs)
    reaches = [False] * len(nodes)
    reaches[loss] = True
    for n in reversed(nodes[: loss + 1]):
        if reaches[n.id]:
            for i in n.inputs:
                reaches[i] = True

    grad: dict[NodeId, NodeId] = {loss: seed}
    stopped: list[tuple[NodeId, str]] = []
    groups = _sibling_groups(nodes[: loss + 1])
    for n in reversed(nodes[: loss + 1]):
        members = groups.get(n.id)
        if members is not None:  # a group is differentiated at its first node
            if n.id != members[0] or all(m not in grad for m in members):
                continue
        elif n.id not in grad or not n.inputs:
            continue
        wants = [depends[i] and reaches[i] and nodes[i].ty.dtype is DType.F32 for i in n.inputs]
        if not any(wants):
            continue
        d = OPS[n.op]
        if not d.differentiable:
            stopped.append((n.id, n.op))
            continue
        if d.vjp_rule is None:
            raise NotImplementedError(f"autodiff: op {n.op!r} (node {n.id}) is marked differentiable but has no VJP rule in the op table")
        if members is not None:
            contributions = d.group_vjp_rule(g, [nodes[m] for m in members], [grad.get(m) for m in members])
        else:
            contributions = d.vjp_rule(g, n, grad[n.id])
        if len(contributions) != len(n.inputs):
            raise RuntimeError(f"autodiff: the VJP rule of {n.op!r} returned {len(contributions)} gradients for {len(n.inputs)} inputs")
        for i, want, gi in zip(n.inputs, wants, contributions, strict=True):
            if want and gi is not None:
                grad[i] = g.add(grad[i], gi) if i in grad else gi
    return Gradients({t: grad.get(t) for t in wrt}, stopped)


def _sibling_groups(nodes: list) -> dict[int, list[int]]:
    """Node id -> the ids (ascending) of its group, for nodes of ops with a group VJP rule: the nodes
    of one op, inputs and attributes but ``index``."""
    by_key: dict[tuple, list[int]] = {}
    for n in nodes:
        if OPS[n.op].group_vjp_rule is not None:
            attrs = repr(sorted((k, v) for k, v in n.attrs.items() if k != "index"))
            by_key.setdefault((n.op, n.inputs, attrs), []).append(n.id)
    return {i: ids for ids in by_key.values() for i in ids}


def parameter_gradients(g, loss: NodeId) -> Gradients:
    """Gradients of ``loss`` with respect to every parameter of ``g``, keyed by NodeId."""
    return gradients(g, loss, [nid for _, nid in g.leaves("parameter")])
