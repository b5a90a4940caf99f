"""The graph IR: dtypes, tensor types, nodes and the append-only node list.

This layer knows nothing about individual ops. The op table (``meganeura_onnx.ops``) adds the
builder methods (``matmul``, ``rope``, ...) and their shape rules on top of :class:`GraphCore`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NodeId = int
"""A stable handle to a node: its index in :meth:`GraphCore.nodes` (Meganeura's ``u32`` alias)."""


class DType(enum.Enum):
    """Element type of a tensor. Both are 4 bytes wide, as in Meganeura."""

    F32 = "f32"
    U32 = "u32"

    def size_bytes(self) -> int:
        """Byte width of one element."""
        return 4

    def numpy(self) -> Any:
        import numpy as np

        return np.float32 if self is DType.F32 else np.uint32


@dataclass(frozen=True)
class TensorType:
    """Shape (outermost first) and element type of a node's output."""

    shape: tuple[int, ...]
    dtype: DType = DType.F32

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        if any(d <= 0 for d in shape):
            raise ValueError(f"TensorType: every dimension must be positive, got shape {list(shape)}")
        object.__setattr__(self, "shape", shape)

    @staticmethod
    def new(shape: list[int] | tuple[int, ...], dtype: DType) -> TensorType:
        return TensorType(tuple(shape), dtype)

    @staticmethod
    def f32(shape: list[int] | tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), DType.F32)

    def num_elements(self) -> int:
        return math.prod(self.shape)

    def size_bytes(self) -> int:
        return self.num_elements() * self.dtype.size_bytes()

    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.value}{list(self.shape)}"


@dataclass(frozen=True)
class Node:
    """One operation. ``attrs`` holds the op's static arguments (names, eps, theta, ...)."""

    id: NodeId
    op: str
    inputs: tuple[NodeId, ...]
    ty: TensorType
    attrs: dict[str, Any] = field(default_factory=dict)

    def attr(self, name: str) -> Any:
        return self.attrs[name]


class GraphCore:
    """Append-only list of nodes plus the output list. Builders live in :class:`meganeura_onnx.Graph`."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._outputs: list[NodeId] = []
        self._output_names: list[str] = []

    # -- structure ------------------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """All nodes, indexed by their NodeId."""
        return list(self._nodes)

    def node(self, id: NodeId) -> Node:
        """The node with this id; ``IndexError`` naming the graph size when it does not exist."""
        if not isinstance(id, int) or not 0 <= id < len(self._nodes):
            raise IndexError(f"node: no node {id!r} in a graph of {len(self._nodes)} nodes")
        return self._nodes[id]

    def __len__(self) -> int:
        return len(self._nodes)

    def set_outputs(self, ids: Sequence[NodeId] | Mapping[str, NodeId]) -> None:
        """Mark nodes as graph outputs (index 0 is the primary output, e.g. the loss).

        A list names them ``output_0``, ``output_1``, ...; a dict ``{"loss": loss, "logits": logits}``
        gives the names (in order) that the ONNX file, ``Session.read_output`` and the CLI use.
        """
        if isinstance(ids, Mapping):
            names = list(ids.keys())
            ids = list(ids.values())
            for name in names:
                if not isinstance(name, str) or not name:
                    raise ValueError(f"set_outputs: output names must be non-empty strings, got {name!r}")
        else:
            ids = list(ids)
            names = [f"output_{k}" for k in range(len(ids))]
        for i in ids:
            self.node(i)
        self._outputs = ids
        self._output_names = names

    def outputs(self) -> list[NodeId]:
        """The output NodeIds set with :meth:`set_outputs`."""
        return list(self._outputs)

    def output_names(self) -> list[str]:
        """The output names, in output order (``output_<k>`` unless :meth:`set_outputs` got a dict)."""
        return list(self._output_names)

    def named_outputs(self) -> dict[str, NodeId]:
        """Output name -> NodeId, in output order."""
        return dict(zip(self._output_names, self._outputs, strict=True))

    def add_node(self, op: str, inputs: tuple[NodeId, ...], ty: TensorType, attrs: dict[str, Any]) -> NodeId:
        """Append a node whose type is already known. Builders call this after their shape rule."""
        nid = len(self._nodes)
        self._nodes.append(Node(nid, op, tuple(inputs), ty, dict(attrs)))
        return nid

    def toposort(self) -> GraphCore:
        """A new graph in topological order with nodes unreachable from the outputs dropped and ids compacted.

        Every node's inputs have lower ids than the node itself. Leaves (inputs, parameters) that
        no output depends on are dropped too, as Meganeura drops dead nodes. With no outputs set,
        every node is kept.
        """
        roots = self._outputs or list(range(len(self._nodes)))
        order: list[NodeId] = []
        state: dict[NodeId, int] = {}
        for root in roots:
            stack = [(root, False)]
            while stack:
                nid, done = stack.pop()
                if done:
                    state[nid] = 2
                    order.append(nid)
                    continue
                if state.get(nid):
                    continue
                state[nid] = 1
                stack.append((nid, True))
                for i in reversed(self._nodes[nid].inputs):
                    if not state.get(i):
                        stack.append((i, False))
        out = type(self)()
        remap: dict[NodeId, NodeId] = {}
        for nid in order:
            n = self._nodes[nid]
            remap[nid] = out.add_node(n.op, tuple(remap[i] for i in n.inputs), n.ty, n.attrs)
        out._outputs = [remap[o] for o in self._outputs]
        out._output_names = list(self._output_names)
        return out
