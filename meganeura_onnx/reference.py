"""A numpy interpreter of a Graph, built from the op table's references (the test oracle)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .ir import GraphCore, NodeId, eval_dim
from .ops import OPS


def evaluate(
    graph: GraphCore, feeds: Mapping[str, np.ndarray], dtype: type = np.float32, nodes: list[NodeId] | None = None
) -> list[np.ndarray]:
    """Values of ``nodes`` (default: the graph's outputs) given every input and parameter by name.

    Float leaves are cast to ``dtype`` (use ``np.float64`` for a high-precision reference).
    Symbolic dimensions take their sizes from the shapes of the fed arrays (which must then have
    the leaf's rank); attributes naming them (``batch="batch"``, reshape targets) are resolved.
    """
    if nodes is not None:
        nodes = [graph.handle(i, f"nodes[{k}]", "evaluate") for k, i in enumerate(nodes)]
    values: dict[NodeId, np.ndarray] = {}
    sizes = bind_sizes(graph, feeds)
    for n in graph.nodes():
        if n.op == "constant":
            values[n.id] = n.attrs["value"].astype(dtype)
        elif OPS[n.op].leaf:
            name = n.attrs["name"]
            if name not in feeds:
                raise KeyError(f"evaluate: no value given for {n.op} {name!r}")
            arr = np.asarray(feeds[name])
            values[n.id] = arr.reshape(n.ty.resolve(sizes).shape).astype(np.uint32 if n.op == "input_u32" else dtype)
        else:
            attrs = {k: _resolve(v, sizes) for k, v in n.attrs.items()}
            values[n.id] = np.asarray(OPS[n.op].numpy_ref(*(values[i] for i in n.inputs), **attrs))
    return [values[i] for i in (nodes if nodes is not None else graph.outputs())]


def bind_sizes(graph: GraphCore, feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Size of every symbolic dimension named by a leaf, read from the fed arrays' shapes."""
    sizes: dict[str, int] = {}
    for n in graph.nodes():
        if n.ty.is_static() or not OPS[n.op].leaf or n.attrs.get("name") not in feeds:
            continue
        shape = np.shape(feeds[n.attrs["name"]])
        if len(shape) != n.ty.rank():
            raise ValueError(
                f"evaluate: {n.attrs['name']!r} has symbolic shape {list(n.ty.shape)}; feed an array of that rank, got shape {list(shape)}"
            )
        for d, size in zip(n.ty.shape, shape, strict=True):
            if isinstance(d, str) and sizes.setdefault(d, int(size)) != size:
                raise ValueError(f"evaluate: dimension {d!r} is {sizes[d]} elsewhere but {size} in {n.attrs['name']!r}")
    return sizes


def _resolve(value: Any, sizes: Mapping[str, int]) -> Any:
    """An attribute with its symbolic dims replaced by their sizes (op attributes hold no other strings)."""
    if isinstance(value, str):
        return eval_dim(value, sizes)
    if isinstance(value, (tuple, list)) and any(isinstance(v, str) for v in value):
        return type(value)(_resolve(v, sizes) for v in value)
    return value
