"""The op table: every Graph op declared once, with its shape rule, numpy reference, ONNX lowering,
VJP rule and the example graphs the test suite walks.

An op module declares an op by creating an :class:`OpDef` and filling its slots with decorators::

    matmul = OpDef("matmul", doc="a @ b")

    @matmul.shape
    def _(a: TensorType, b: TensorType) -> TensorType: ...

    @matmul.numpy
    def _(a, b): return a @ b

    @matmul.onnx
    def _(ctx, node, a, b): return ctx.op("MatMul", a, b)

The builder method with the user-facing signature lives beside it in the same module (a mixin of
:class:`meganeura_onnx.Graph`) and calls ``self.apply("matmul", a, b)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..ir import Dim, DType, TensorType

ShapeRule = Callable[..., TensorType]
NumpyRef = Callable[..., Any]
Lowering = Callable[..., str]
VjpRule = Callable[..., list]


@dataclass(frozen=True)
class Rewrite:
    """An e-graph rewrite rule: ``lhs`` and ``rhs`` are s-expressions over op names of the table.

    ``?name`` is a pattern variable; an op's attributes are an optional last argument written as a
    Python dict literal (``(gemm ?a ?b ?bias {"trans_b": True})``) or a variable (``?attrs``);
    left out, they match any attributes on the left and mean ``{}`` on the right. A rule may
    produce terms that fail a shape rule: the optimizer never extracts those.
    """

    name: str
    lhs: str
    rhs: str


@dataclass
class OpDef:
    """One op of the table. ``shape``/``numpy``/``onnx``/``vjp``/``example`` double as decorators."""

    name: str
    inputs: tuple[str, ...] = ()
    """Argument names of the node inputs, in order (used in error messages)."""
    u32_inputs: frozenset[str] = frozenset()
    """Inputs that must be U32; every other input must be F32."""
    differentiable: bool = True
    """False for ops with no gradient by definition (``greater``, integer leaves, cache ops)."""
    leaf: bool = False
    shape_rule: ShapeRule | None = None
    numpy_ref: NumpyRef | None = None
    lowering: Lowering | None = None
    vjp_rule: VjpRule | None = None
    examples: list[Callable] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    """E-graph rules stated next to this op (the fused op they produce, or the algebra of this op)."""

    def shape(self, fn: ShapeRule) -> ShapeRule:
        self.shape_rule = fn
        return fn

    def numpy(self, fn: NumpyRef) -> NumpyRef:
        self.numpy_ref = fn
        return fn

    def onnx(self, fn: Lowering) -> Lowering:
        self.lowering = fn
        return fn

    def vjp(self, fn: VjpRule) -> VjpRule:
        self.vjp_rule = fn
        return fn

    def rewrite(self, name: str, lhs: str, rhs: str) -> None:
        """Declare the e-graph rule ``lhs -> rhs`` (see :class:`Rewrite`; ``name`` is global, used in reports)."""
        self.rewrites.append(Rewrite(name, lhs, rhs))

    def example(self, fn: Callable) -> Callable:
        """Register ``fn(g, rng) -> (NodeId, feeds)``: a small graph using this op, with its data."""
        self.examples.append(fn)
        return fn


OPS: dict[str, OpDef] = {}


def op(name: str, inputs: tuple[str, ...] = (), *, u32: tuple[str, ...] = (), **kwargs: Any) -> OpDef:
    """Declare an op in the table (once)."""
    if name in OPS:
        raise RuntimeError(f"op {name!r} is declared twice")
    OPS[name] = OpDef(name, tuple(inputs), frozenset(u32), **kwargs)
    return OPS[name]


# -- helpers shared by the shape rules -------------------------------------------------------------
def require(cond: bool, op_name: str, message: str) -> None:
    if not cond:
        raise ValueError(f"{op_name}: {message}")


def _mixed_hint(x: Dim, y: Dim) -> str:
    if isinstance(x, int) != isinstance(y, int):
        return " (a static size and a symbolic one are never equated: use the same name, or static sizes on both)"
    return ""


def same_shape(op_name: str, a: TensorType, b: TensorType, names: tuple[str, str] = ("a", "b")) -> TensorType:
    """Shapes must be identical; symbolic dims agree when they are the same name/expression."""
    if a.shape != b.shape:
        hint = next((_mixed_hint(x, y) for x, y in zip(a.shape, b.shape, strict=False) if x != y), "")
        require(False, op_name, f"{names[0]} and {names[1]} must have identical shapes, got {list(a.shape)} and {list(b.shape)}{hint}")
    return a


def same_dim(op_name: str, x: Dim, y: Dim, message: str) -> None:
    """``x == y`` (symbolic dims by name); the error is ``message`` plus why an int and a name differ."""
    require(x == y, op_name, message + _mixed_hint(x, y))


def static_dim(op_name: str, t: TensorType, axis: int, arg: str) -> int:
    """``t.shape[axis]``, which this op needs at build time; ValueError naming the argument and dim."""
    d = t.shape[axis]
    require(isinstance(d, int), op_name, f"{arg} needs a static size in dimension {axis}, got {d!r} (shape {list(t.shape)})")
    return d


def static_shape(op_name: str, t: TensorType, arg: str) -> None:
    """Ops that only take static shapes (each says so in its docstring) call this first."""
    require(t.is_static(), op_name, f"{arg} must have a static shape (this op takes no symbolic dimensions), got {list(t.shape)}")


def rank(op_name: str, t: TensorType, r: int, arg: str) -> None:
    require(t.rank() == r, op_name, f"{arg} must be {r}-D, got shape {list(t.shape)}")


def f32(op_name: str, t: TensorType, arg: str) -> None:
    if t.dtype is not DType.F32:
        raise TypeError(f"{op_name}: {arg} must be F32, got {t.dtype.name} {list(t.shape)}")


def u32(op_name: str, t: TensorType, arg: str) -> None:
    if t.dtype is not DType.U32:
        raise TypeError(f"{op_name}: {arg} must be U32 (use input_u32), got {t.dtype.name} {list(t.shape)}")


def positive_int(op_name: str, value: Any, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{op_name}: {arg} must be a positive int, got {value!r}")
    return value


class Feeds:
    """Random data for the leaves an op example creates: ``f.param(g, "w", [3, 4])``.

    Examples create float operands as parameters (so the gradient tests can differentiate them),
    targets as inputs and indices as U32 inputs, each drawn from a range where the op is defined.
    A shape may name symbolic dims (``["n", 4]``): the data then has the size ``sizes`` gives each
    name, and a float operand becomes an input (parameters are static).
    """

    def __init__(self, rng: Any, sizes: dict[str, int] | None = None) -> None:
        self.rng = rng
        self.sizes = dict(sizes or {})
        self.inputs: dict[str, Any] = {}
        self.params: dict[str, Any] = {}

    def _size(self, shape: list) -> list[int]:
        return [self.sizes[d] if isinstance(d, str) else d for d in shape]

    def _uniform(self, shape: list, lo: float, hi: float) -> Any:
        import numpy as np

        return self.rng.uniform(lo, hi, size=self._size(shape)).astype(np.float32)

    def param(self, g: Any, name: str, shape: list, lo: float = -1.0, hi: float = 1.0) -> int:
        if any(isinstance(d, str) for d in shape):
            return self.input(g, name, shape, lo, hi)
        self.params[name] = self._uniform(shape, lo, hi)
        return g.parameter(name, shape)

    def input(self, g: Any, name: str, shape: list, lo: float = -1.0, hi: float = 1.0) -> int:
        self.inputs[name] = self._uniform(shape, lo, hi)
        return g.input(name, shape)

    def u32(self, g: Any, name: str, shape: list, high: int) -> int:
        import numpy as np

        self.inputs[name] = self.rng.integers(0, high, size=self._size(shape)).astype(np.uint32)
        return g.input_u32(name, shape)


def examples(opdef: OpDef, fn: Callable, *variants: dict) -> None:
    """Register ``fn(g, f, **variant)`` once per variant (the test suite needs at least two shapes)."""
    import functools

    for v in variants:
        opdef.examples.append(functools.partial(fn, **v))


# -- helpers shared by the VJP rules -----------------------------------------------------------------
def times_upstream(g: Any, x: int, dy: int) -> int:
    """``x * dy`` for a scalar upstream gradient ``dy`` ([1], e.g. of a loss).

    The reverse walk seeds the loss with the constant 1.0; multiplying by it would only add nodes,
    so it is skipped then.
    """
    import numpy as np

    n = g.node(dy)
    if n.op == "constant" and n.ty.shape == (1,) and np.all(n.attrs["value"] == 1.0):
        return x
    return g.mul_scalar(x, dy)
