"""The graph IR: dtypes, tensor types, nodes and the append-only node list.

This layer knows nothing about individual ops. The op table (``meganeura_onnx.ops``) adds the
builder methods (``matmul``, ``rope``, ...) and their shape rules on top of :class:`GraphCore`.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from numbers import Integral as _Integral
from typing import Any


class NodeId(int):
    """A stable handle to a node: its index in :meth:`GraphCore.nodes` (Meganeura's ``u32`` alias).

    It is an ``int`` (usable as an index, in arithmetic, as a dict key equal to the plain int) that
    also remembers which graph made it, so passing it to another graph is refused instead of being
    read as whatever node has the same index there. Plain ints are still accepted as indices.
    """

    graph: object

    def __new__(cls, index: int, graph: object = None) -> NodeId:
        self = super().__new__(cls, index)
        object.__setattr__(self, "graph", graph)  # the owning graph's token (see GraphCore.token)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("NodeId is immutable")

    def __reduce__(self) -> tuple:
        return (int, (int(self),))  # pickles/copies as the plain index

    __repr__ = int.__repr__
    __str__ = int.__repr__


class _GraphToken:
    """The identity a graph stamps on its NodeIds (numbered, so error messages can tell graphs apart)."""

    _count = itertools.count(1)
    __slots__ = ("number",)

    def __init__(self) -> None:
        self.number = next(self._count)

    def __repr__(self) -> str:
        return f"graph #{self.number}"


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
        self._token = _GraphToken()

    # -- structure ------------------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """All nodes, indexed by their NodeId."""
        return list(self._nodes)

    def handle(self, value: Any, what: str = "node", op_name: str = "node") -> NodeId:
        """``value`` as a NodeId of this graph.

        ``TypeError`` when it is not an int (a bool is not a node id); ``ValueError`` when it is a
        NodeId of another Graph or no node of this one. ``op_name``/``what`` name the call and the
        argument in the message.
        """
        if isinstance(value, bool) or not isinstance(value, (int, _Integral)):
            raise TypeError(f"{op_name}: {what} must be a NodeId (int), got {value!r} ({type(value).__name__})")
        owner = getattr(value, "graph", None)
        if owner is not None and owner is not self._token:
            raise ValueError(
                f"{op_name}: {what} is node {int(value)} of another Graph ({owner}), not of this one ({self._token}); "
                "build every node of a graph with that graph's methods"
            )
        index = int(value)
        if not 0 <= index < len(self._nodes):
            raise ValueError(f"{op_name}: {what} refers to node {index}, but the graph has {len(self._nodes)} nodes")
        return self._nodes[index].id

    def node(self, id: NodeId) -> Node:
        """The node with this id (``TypeError``/``ValueError`` naming the graph size when there is none)."""
        return self._nodes[self.handle(id, "id", "node")]

    def __len__(self) -> int:
        return len(self._nodes)

    def set_outputs(self, ids: list[NodeId]) -> None:
        """Mark nodes as graph outputs (index 0 is the primary output, e.g. the loss)."""
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"set_outputs: expects a list of NodeIds, got {ids!r} ({type(ids).__name__})")
        self._outputs = [self.handle(i, f"output {k}", "set_outputs") for k, i in enumerate(ids)]

    def outputs(self) -> list[NodeId]:
        """The output NodeIds set with :meth:`set_outputs`."""
        return list(self._outputs)

    def add_node(self, op: str, inputs: tuple[NodeId, ...], ty: TensorType, attrs: dict[str, Any]) -> NodeId:
        """Append a node whose type is already known. Builders call this after their shape rule."""
        ins = tuple(self.handle(i, f"input {k}", op) for k, i in enumerate(inputs))
        nid = NodeId(len(self._nodes), self._token)
        self._nodes.append(Node(nid, op, ins, ty, dict(attrs)))
        return nid

    def toposort(self) -> GraphCore:
        """A new graph in topological order with nodes unreachable from the outputs dropped and ids compacted.

        Every node's inputs have lower ids than the node itself. Leaves (inputs, parameters) that
        no output depends on are dropped too, as Meganeura drops dead nodes. With no outputs set,
        every node is kept.
        """
        roots = self._outputs or [n.id for n in self._nodes]
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
        return out
