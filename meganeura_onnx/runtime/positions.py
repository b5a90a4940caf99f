"""Position inputs checked by the Session instead of by the kernels.

The ops with ``positions`` in the op table (``rope``'s dynamic offset, the ``kv_pos`` of the KV-cache
ops, the token ids of ``embedding`` and ``scatter_add``) take U32 inputs whose values must lie in a
range set by the shapes (``kv_pos + T <= max_seq``, ``id < vocab``).
The CUDA kernels can only validate a value by reading it back to the host, a stream sync per op;
so the Session validates them itself:

- when they are uploaded (``set_input_u32``), against the limit of the graph's static shapes
  (a symbolic row count counts as one row);
- before every step whose graph has symbolic shapes (a prefill of any length), against the limit
  of that step's actual sizes;

and sets the ``check_positions`` attribute of those nodes to 0 in the model it runs, so the CUDA
kernels skip the read-back (they still guard on the device: NaN or no write, never out of bounds).
CPU kernels check either way. An ONNX file exported for other runtimes keeps the default 1.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ..graph import Graph
from ..ir import Dim, eval_dim
from ..ops import OPS
from ..ops.table import Position

U32_MAX = (1 << 32) - 1
# ONNX ops the exporter puts between a U32 graph input and a position input (int64 casts, flattening).
_PASS_THROUGH = frozenset({"Cast", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten"})


@dataclass(frozen=True)
class PositionRule:
    """One op's constraint on a U32 graph input it reads as a position (or row index)."""

    op: str
    position: Position
    shapes: Mapping[str, tuple[Dim, ...]]
    """The op's input shapes by argument name (symbolic where the graph's are)."""
    attrs: Mapping[str, Any]

    def varies(self) -> bool:
        """Whether the limit depends on symbolic sizes (then each step checks it at its sizes)."""
        return any(not isinstance(self.shapes[a][-2], int) for a in self.position.sized_dims())

    def limit(self, sizes: Mapping[str, int] | None = None) -> int | None:
        """The largest valid value: at the given sizes of the symbolic dimensions, or (``None``)
        with a symbolic row count taken as one row (:meth:`Position.limit`)."""
        shapes = self.shapes
        if sizes is not None:
            shapes = {arg: tuple(d if isinstance(d, int) else eval_dim(d, sizes) for d in shape) for arg, shape in shapes.items()}
        return self.position.limit(shapes, self.attrs)

    def explain(self, sizes: Mapping[str, int] | None = None) -> str:
        """Why the limit is what it is, in words (for error messages)."""
        p = self.position
        if p.below is not None:
            return f"a row index of {self.op}'s output of {p.below}={self.attrs.get(p.below)} rows"
        if p.within is None:
            return f"{self.op}'s {p.input} must be <= {p.max_value}"
        within = self.shapes[p.within][-2]
        if p.rows is None:
            return f"a row index into {self.op}'s {p.within} ({within} rows)"
        rows = p.rows_per_sequence(self.shapes)
        sized = [f"{d}={sizes[d]}" for d in (rows, within) if sizes is not None and not isinstance(d, int) and d in sizes]
        at = f" at this step's sizes ({', '.join(sized)})" if sized else ""
        return f"{self.op} uses rows [{p.input}, {p.input} + {rows}) of {p.within} ({within} rows){at}"


def position_rules(graph: Graph) -> dict[str, list[PositionRule]]:
    """Every ``input_u32`` that feeds a position input of an op -> the rules of the ops it feeds
    (token ids: the rows of the embedding table they index)."""
    names = {n.id: n.attrs["name"] for n in graph.nodes() if n.op == "input_u32"}
    rules: dict[str, list[PositionRule]] = {}
    for n in graph.nodes():
        d = OPS[n.op]
        ids = dict(zip(d.inputs, n.inputs, strict=False))
        shapes = {arg: graph.node(i).ty.shape for arg, i in ids.items()}
        for p in d.positions:
            if ids.get(p.input) in names:
                rules.setdefault(names[ids[p.input]], []).append(PositionRule(n.op, p, shapes, dict(n.attrs)))
    return rules


def upload_limits(rules: Mapping[str, Collection[PositionRule]]) -> dict[str, int]:
    """Input -> the largest value ``set_input_u32`` accepts (static shapes; a symbolic row count
    as one row). Limits a U32 cannot exceed (``rope``'s 2**40) get no entry."""
    limits: dict[str, int] = {}
    for name, rs in rules.items():
        found = [limit for r in rs if (limit := r.limit()) is not None and limit < U32_MAX]
        if found:
            limits[name] = min(found)
    return limits


class PositionChecks:
    """A Session's checks of its position inputs: ``upload`` when ``set_input_u32`` writes one (the
    static shapes' limit), ``before_step`` with the step's sizes (rules whose limit varies with them)."""

    def __init__(self, rules: Mapping[str, Collection[PositionRule]], static_inputs: Collection[str]) -> None:
        self.limits = upload_limits(rules)
        self._reasons = {name: "; ".join(sorted({r.explain() for r in rs})) for name, rs in rules.items()}
        self._varying = {name: [r for r in rs if r.varies()] for name, rs in rules.items()}
        self._varying = {name: rs for name, rs in self._varying.items() if rs}
        # the values held now (host copies; U32 inputs start at zero)
        self._values = {name: np.zeros(1, np.uint32) for name in self._varying if name in static_inputs}

    def upload(self, name: str, arr: np.ndarray, what: str) -> None:
        """ValueError naming the input, its value and its limit when ``arr`` exceeds it."""
        limit = self.limits.get(name)
        if limit is not None and arr.size and int(arr.max()) > limit:
            raise ValueError(f"{what}: {name!r} = {int(arr.max())} is out of range: it must be <= {limit} ({self._reasons[name]})")
        if name in self._varying:
            self._values[name] = arr

    def before_step(self, sizes: Mapping[str, int]) -> None:
        """ValueError naming the input, its value and the limit at ``sizes`` when a held position is
        out of range for the step about to run."""
        for name, rs in self._varying.items():
            arr = self._values.get(name)
            if arr is None or not arr.size:
                continue
            value = int(arr.max())
            for r in rs:
                limit = r.limit(sizes)
                if limit is not None and value > limit:
                    raise ValueError(
                        f"step: {name!r} = {value} is out of range: it must be <= {limit} ({r.explain(sizes)}); nothing was run"
                    )


def skip_kernel_position_checks(model: onnx.ModelProto, checked: Collection[str]) -> int:
    """Set ``check_positions=0`` on the nodes of ``model`` whose position inputs are absent, constant
    (a static rope's ``[0]``) or fed by a graph input in ``checked`` (validated by the Session);
    returns how many nodes changed. Other nodes keep the kernels' own checks. Nodes a training step
    adds (a rope's transpose, an embedding's ScatterAdd) read the same inputs under the same limits
    as the forward ops the rules come from."""
    index_inputs = {
        (d.custom.domain, d.custom.name): [i for i, t in enumerate(d.custom.inputs) if t.dtype == "index"]
        for d in OPS.values()
        if d.positions and d.custom is not None
    }
    producers = {out: node for node in model.graph.node for out in node.output}
    constants = {t.name for t in model.graph.initializer}

    def validated(name: str) -> bool:
        while name in producers and producers[name].op_type in _PASS_THROUGH:
            name = producers[name].input[0]
        if not name or name in constants or name in checked:
            return True
        return name in producers and producers[name].op_type == "Constant"

    changed = 0
    for node in model.graph.node:
        slots = index_inputs.get((node.domain, node.op_type))
        if slots is None or not all(validated(node.input[i]) for i in slots if i < len(node.input)):
            continue
        kept = [a for a in node.attribute if a.name != "check_positions"]
        del node.attribute[:]
        node.attribute.extend([*kept, onnx.helper.make_attribute("check_positions", 0)])
        changed += 1
    return changed
