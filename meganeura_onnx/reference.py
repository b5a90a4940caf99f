"""A numpy interpreter of a Graph, built from the op table's references (the test oracle)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .ir import GraphCore, NodeId
from .ops import OPS


def evaluate(
    graph: GraphCore, feeds: Mapping[str, np.ndarray], dtype: type = np.float32, nodes: list[NodeId] | None = None
) -> list[np.ndarray]:
    """Values of ``nodes`` (default: the graph's outputs) given every input and parameter by name.

    Float leaves are cast to ``dtype`` (use ``np.float64`` for a high-precision reference).
    """
    values: dict[NodeId, np.ndarray] = {}
    for n in graph.nodes():
        if n.op == "constant":
            values[n.id] = n.attrs["value"].astype(dtype)
        elif OPS[n.op].leaf:
            name = n.attrs["name"]
            if name not in feeds:
                raise KeyError(f"evaluate: no value given for {n.op} {name!r}")
            arr = np.asarray(feeds[name])
            values[n.id] = arr.reshape(n.ty.shape).astype(np.uint32 if n.op == "input_u32" else dtype)
        else:
            values[n.id] = np.asarray(OPS[n.op].numpy_ref(*(values[i] for i in n.inputs), **n.attrs))
    return [values[i] for i in (nodes if nodes is not None else graph.outputs())]
