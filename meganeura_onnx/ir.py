"""The graph IR: dtypes, tensor types, nodes and the append-only node list.

This layer knows nothing about individual ops. The op table (``meganeura_onnx.ops``) adds the
builder methods (``matmul``, ``rope``, ...) and their shape rules on top of :class:`GraphCore`.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
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


# -- symbolic dimensions ------------------------------------------------------------------------------
Dim = int | str
"""One dimension: a positive ``int`` (static) or a ``str`` (symbolic).

A symbolic dimension is a name (``"batch"``) or, when an op derives it from others, a polynomial
in names with positive integer coefficients written canonically (``"batch*seq"``,
``"past+seq"``, ``"2*batch"``): two dims are equal exactly when their canonical strings are, so
``"seq*batch"`` and ``"batch*seq"`` are the same dim while ``"batch"`` and ``"n"``, or ``"batch"``
and ``5``, never are (a static size is never silently equated with a name).
"""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_Poly = dict  # {sorted tuple of names (a monomial; () is the constant term): positive coefficient}


def is_dim_name(value: object) -> bool:
    """Whether ``value`` is a valid name for a symbolic dimension (identifier-like)."""
    return isinstance(value, str) and bool(_NAME.match(value))


def _parse(d: Dim) -> _Poly:
    if isinstance(d, bool) or not isinstance(d, (int, str)):
        raise ValueError(f"not a dimension: {d!r} (expected a positive int or a symbolic name)")
    if isinstance(d, int):
        return {(): d} if d else {}
    poly: _Poly = {}
    for term in d.replace(" ", "").split("+"):
        coef, names = 1, []
        for factor in term.split("*"):
            if factor.isdigit() and factor.isascii():
                coef *= int(factor)
            elif is_dim_name(factor):
                names.append(factor)
            else:
                raise ValueError(f"not a dimension expression: {d!r} (names, positive ints, '*' and '+')")
        key = tuple(sorted(names))
        poly[key] = poly.get(key, 0) + coef
    return {k: c for k, c in poly.items() if c}


def _format(poly: _Poly) -> Dim:
    if not poly:
        return 0
    if set(poly) == {()}:
        return poly[()]
    terms = []
    for names in sorted(poly, key=lambda k: (-len(k), k)):
        coef = poly[names]
        parts = ([str(coef)] if coef != 1 or not names else []) + list(names)
        terms.append("*".join(parts))
    return "+".join(terms)


def dim(d: Dim) -> Dim:
    """The canonical form of a dimension (``"seq * batch"`` -> ``"batch*seq"``, ``"3"`` -> ``3``)."""
    return _format(_parse(d))


def is_static(d: Dim) -> bool:
    return isinstance(d, int)


def dim_symbols(d: Dim) -> set[str]:
    """The names a dimension depends on (empty for a static one)."""
    return {n for names in _parse(d) for n in names}


def dim_mul(a: Dim, b: Dim) -> Dim:
    """``a * b`` (canonical)."""
    out: _Poly = {}
    for ka, ca in _parse(a).items():
        for kb, cb in _parse(b).items():
            key = tuple(sorted(ka + kb))
            out[key] = out.get(key, 0) + ca * cb
    return _format(out)


def dim_prod(dims: Iterable[Dim]) -> Dim:
    """The product of dimensions (1 for none)."""
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


def dim_add(a: Dim, b: Dim) -> Dim:
    """``a + b`` (canonical)."""
    out = _parse(a)
    for k, c in _parse(b).items():
        out[k] = out.get(k, 0) + c
    return _format(out)


def dim_div(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when it divides exactly as polynomials (``"batch*seq" / "batch" == "seq"``), else None."""
    pa, pb = _parse(a), _parse(b)
    if pa == pb:
        return 1
    if len(pb) != 1:
        return None
    (kb, cb), out = next(iter(pb.items())), {}
    for ka, ca in pa.items():
        rest = list(ka)
        for n in kb:
            if n not in rest:
                return None
            rest.remove(n)
        if ca % cb:
            return None
        out[tuple(rest)] = ca // cb
    return _format(out)


def eval_dim(d: Dim, sizes: Mapping[str, int]) -> int:
    """The value of a dimension once every name in it has a size; KeyError naming a missing one."""
    total = 0
    for names, coef in _parse(d).items():
        term = coef
        for n in names:
            if n not in sizes:
                raise KeyError(n)
            term *= int(sizes[n])
        total += term
    return total


@dataclass(frozen=True)
class TensorType:
    """Shape (outermost first) and element type of a node's output.

    Each dimension is a positive ``int`` or a symbolic :data:`Dim` (``"batch"``, ``"batch*seq"``);
    the size of a symbolic one is fixed when the model runs.
    """

    shape: tuple[Dim, ...]
    dtype: DType = DType.F32

    def __post_init__(self) -> None:
        shape = []
        for d in self.shape:
            if isinstance(d, bool) or not isinstance(d, (int, str)) and not hasattr(d, "__index__"):
                raise ValueError(f"TensorType: every dimension must be a positive int or a symbolic name, got shape {list(self.shape)}")
            c = dim(d) if isinstance(d, str) else int(d)
            if isinstance(c, int) and c <= 0:
                raise ValueError(f"TensorType: every dimension must be positive, got shape {list(self.shape)}")
            shape.append(c)
        object.__setattr__(self, "shape", tuple(shape))

    @staticmethod
    def new(shape: list[Dim] | tuple[Dim, ...], dtype: DType) -> TensorType:
        return TensorType(tuple(shape), dtype)

    @staticmethod
    def f32(shape: list[Dim] | tuple[Dim, ...]) -> TensorType:
        return TensorType(tuple(shape), DType.F32)

    def is_static(self) -> bool:
        """True when every dimension is an int."""
        return all(isinstance(d, int) for d in self.shape)

    def symbols(self) -> set[str]:
        """Names of the symbolic dimensions this shape depends on."""
        return {n for d in self.shape for n in dim_symbols(d)}

    def elements(self) -> Dim:
        """The element count as a :data:`Dim` (an int when static, else e.g. ``"784*batch"``)."""
        if self.is_static():  # plain ints (set_input checks this per call): no polynomial parsing
            return math.prod(self.shape)
        return dim_prod(self.shape)

    def num_elements(self) -> int:
        """The element count; ``ValueError`` when the shape is symbolic (use :meth:`elements`)."""
        n = self.elements()
        if not isinstance(n, int):
            raise ValueError(
                f"TensorType {self}: the element count {n} is symbolic; it is known once the sizes of {sorted(self.symbols())} are"
            )
        return n

    def size_bytes(self) -> int:
        """Bytes of one tensor of this type; ``ValueError`` when the shape is symbolic."""
        return self.num_elements() * self.dtype.size_bytes()

    def resolve(self, sizes: Mapping[str, int]) -> TensorType:
        """This type with every symbolic dimension replaced by its value; KeyError naming a missing size."""
        return TensorType(tuple(d if isinstance(d, int) else eval_dim(d, sizes) for d in self.shape), self.dtype)

    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{', '.join(map(str, self.shape))}]"


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


def postorder(roots: Iterable[int], children: Callable[[int], Sequence[int] | None]) -> list[int] | None:
    """Every node reachable from ``roots``, each after all of its children (an iterative depth-first
    walk, so deep graphs do not hit the recursion limit); None when the nodes form a cycle or
    ``children`` returns None for one of them (a node that cannot be computed)."""
    order: list[int] = []
    state: dict[int, int] = {}  # 1: being expanded (on the current path), 2: done
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                state[node] = 2
                order.append(node)
                continue
            if state.get(node) == 2:
                continue
            kids = children(node)
            if state.get(node) == 1 or kids is None:
                return None
            state[node] = 1
            stack.append((node, True))
            stack.extend((k, False) for k in reversed(kids) if state.get(k) != 2)
    return order


def reachable(nodes: Sequence[Node], roots: Iterable[int]) -> set[int]:
    """Ids of the nodes that ``roots`` depend on, the roots included (``nodes[i]`` is node ``i``)."""
    seen, stack = set(roots), list(roots)
    while stack:
        for i in nodes[stack.pop()].inputs:
            if i not in seen:
                seen.add(i)
                stack.append(i)
    return seen


class GraphCore:
    """Append-only list of nodes plus the output list. Builders live in :class:`meganeura_onnx.Graph`."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._outputs: list[NodeId] = []
        self._output_names: list[str] = []
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

    def set_outputs(self, ids: Sequence[NodeId] | Mapping[str, NodeId]) -> None:
        """Mark nodes as graph outputs (index 0 is the primary output, e.g. the loss).

        A list names them ``output_0``, ``output_1``, ...; a dict ``{"loss": loss, "logits": logits}``
        gives the names (in order) that the ONNX file, ``Session.read_output`` and the CLI use.
        Each id must be a NodeId of this graph (``TypeError``/``ValueError`` naming the output).
        """
        named = isinstance(ids, Mapping)
        if named:
            names = list(ids.keys())
            ids = list(ids.values())
            for name in names:
                if not isinstance(name, str) or not name:
                    raise ValueError(f"set_outputs: output names must be non-empty strings, got {name!r}")
        elif isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"set_outputs: expects a list of NodeIds or a dict name -> NodeId, got {ids!r} ({type(ids).__name__})")
        else:
            ids = list(ids)
            names = [f"output_{k}" for k in range(len(ids))]
        labels = [f"output {n!r}" for n in names] if named else [f"output {k}" for k in range(len(ids))]
        self._outputs = [self.handle(i, label, "set_outputs") for i, label in zip(ids, labels, strict=True)]
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
        order = postorder(roots, lambda nid: self._nodes[nid].inputs)
        assert order is not None, "an append-only graph has no cycle"
        out = type(self)()
        remap: dict[NodeId, NodeId] = {}
        for nid in order:
            n = self._nodes[nid]
            remap[nid] = out.add_node(n.op, tuple(remap[i] for i in n.inputs), n.ty, n.attrs)
        out._outputs = [remap[o] for o in self._outputs]
        out._output_names = list(self._output_names)
        return out
