"""The op table: every Graph op declared once, with everything the toolchain knows about it.

An op module declares an op with :func:`op` (inputs, U32 inputs, attributes with their types and
ranges, and for ``com.meganeura`` ops the custom-op schema, in-place state, position inputs and
init roles) and fills its slots with decorators::

    matmul = op("matmul", ("a", "b"), fan_in={"a": 1, "b": 0})

    @matmul.shape
    def _(a: TensorType, b: TensorType) -> TensorType: ...

    @matmul.numpy
    def _(a, b): return a @ b

    @matmul.onnx
    def _(ctx, node, a, b): return ctx.op("MatMul", a, b)

The builder method with the user-facing signature lives beside it in the same module (a mixin of
:class:`meganeura_onnx.Graph`) and calls ``self.apply("matmul", a, b)``; ``Graph.apply`` checks the
inputs and every attribute against the declaration here before the shape rule runs, so every
builder (and every caller of ``apply``) gets the same checks and the same error messages.

Who reads what: ``Graph.apply`` (``inputs``, ``u32_inputs``, ``optional_inputs``, ``attrs``), the
exporter (``lowering``, ``inplace_input`` for the KV-cache state pairs), sessions (``positions`` for
the position checks, ``custom.name`` of in-place ops), :mod:`meganeura_onnx.init` (``init_roles``,
``fan_in``), autodiff (``vjp_rule``, ``differentiable``), the test suite (``examples``,
``numpy_ref``, ``custom_function``) and ``tests/test_custom_op_schema.py``, which checks the C++
kernels' registration rows and attribute validation against ``custom``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..ir import Dim, DType, TensorType, dim_symbols
from ..ir import dim as canonical_dim
from .feeds import Feeds  # noqa: F401 - the examples' data, imported from here by the op modules and tests

ShapeRule = Callable[..., TensorType]
NumpyRef = Callable[..., Any]
Lowering = Callable[..., str]
VjpRule = Callable[..., list]

CUSTOM_DOMAIN = "com.meganeura"
INT64_MAX = (1 << 63) - 1


# -- attributes -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attr:
    """One static argument of an op: its type and the values it accepts.

    ``kind`` is ``"int"``, ``"float"`` (finite as a float32; ints accepted), ``"bool"`` (a real
    bool only), ``"dim"`` (a positive int or a symbolic dimension such as ``"batch"``) or ``"shape"``
    (a non-empty list/tuple of positive ints, and of symbolic dims when ``symbolic``). ``lo``/``hi`` bound numbers inclusively
    (``lo_open``: strictly greater than ``lo``); ``multiple_of`` for ints. ``default`` is what the
    op assumes when the attribute is omitted (``REQUIRED``: it must be given); ``nullable``: None is
    accepted and means the default.
    """

    name: str
    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    multiple_of: int | None = None
    default: Any = None
    required: bool = True
    nullable: bool = False
    symbolic: bool = False
    """For shapes: symbolic dimensions (``"batch"``, ``"batch*seq"``) are accepted too."""
    doc: str = ""

    def expected(self) -> str:
        """What the attribute accepts, in words (used in error messages and the docs)."""
        if self.kind == "bool":
            text = "a bool (True or False)"
        elif self.kind == "shape":
            text = "a non-empty list of positive ints" + (" or symbolic dims ('batch', 'batch*seq')" if self.symbolic else "")
        else:
            text = {"int": "an int", "dim": "a symbolic dim ('batch') or an int", "float": "a finite float32 number"}[self.kind]
            hi = None if self.hi == INT64_MAX else self.hi  # the int64 bound of every int goes unsaid
            if self.lo is not None and hi is not None and not self.lo_open:
                text += f" in [{_num(self.lo)}, {_num(hi)}]"
            else:
                if self.lo is not None:
                    text += f" {'>' if self.lo_open else '>='} {_num(self.lo)}"
                if hi is not None:
                    text += f" <= {_num(hi)}"
            if self.multiple_of:
                text += ", even" if self.multiple_of == 2 else f", a multiple of {self.multiple_of}"
        return text + (" or None" if self.nullable else "")

    def check(self, op_name: str, value: Any) -> Any:
        """``value`` normalised to a plain Python value; ``TypeError``/``ValueError`` naming the op,
        the attribute, what it accepts and what was given."""
        if value is None and self.nullable:
            return None
        bad = f"{op_name}: {self.name} must be {self.expected()}, got {_given(value)}"
        if self.kind == "bool":
            if type(value) is not bool:
                raise TypeError(bad)
            return value
        if self.kind == "shape":
            return _check_shape(value, bad, self.symbolic)
        if self.kind == "dim" and isinstance(value, str):
            return _check_shape([value], bad, True)[0]
        if isinstance(value, bool) or not _is_number(value, integral=self.kind in ("int", "dim")):
            raise TypeError(bad)
        value = float(value) if self.kind == "float" else int(value)
        seen = value  # what the kernels see: ONNX float attributes are float32
        if self.kind == "float":
            try:
                seen = struct.unpack("f", struct.pack("f", value))[0]
            except OverflowError:
                raise ValueError(bad) from None
            if not math.isfinite(seen):
                raise ValueError(bad)
        if self.lo is not None and (seen <= self.lo if self.lo_open else seen < self.lo):
            raise ValueError(bad)
        if self.hi is not None and seen > self.hi:
            raise ValueError(bad)
        if self.multiple_of and value % self.multiple_of:
            raise ValueError(bad)
        return value


def _num(x: float) -> str:
    if isinstance(x, int) and x >= 1 << 20 and (x & (x - 1)) == 0:
        return f"2**{x.bit_length() - 1}"
    return repr(x)


def _given(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _is_number(value: Any, integral: bool) -> bool:
    import numbers

    if integral:
        return isinstance(value, numbers.Integral)
    return isinstance(value, numbers.Real)


def _check_shape(value: Any, bad: str, symbolic: bool) -> tuple[Dim, ...]:
    import numbers

    if getattr(value, "ndim", None) == 1 and getattr(getattr(value, "dtype", None), "kind", "") in "iu":
        value = value.tolist()  # a 1-D integer numpy array
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(bad)
    if not value:
        raise ValueError(bad)
    out: list[Dim] = []
    for d in value:
        if isinstance(d, str) and symbolic:
            try:
                if not dim_symbols(d):  # "3" is a digit string, not a dimension name
                    raise ValueError(bad)
                out.append(canonical_dim(d))
            except ValueError:
                raise ValueError(bad) from None
        elif isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise TypeError(bad)
        elif not 0 < int(d) <= INT64_MAX:
            raise ValueError(bad)
        else:
            out.append(int(d))
    return tuple(out)


def int_attr(name: str, lo: int | None = None, hi: int | None = INT64_MAX, **kw: Any) -> Attr:
    """An int attribute in ``[lo, hi]`` (int64 by default, as ONNX stores it)."""
    return Attr(name, "int", lo, hi, **kw)


def dim_attr(name: str, lo: int = 1, **kw: Any) -> Attr:
    """A size that may be symbolic: an int ``>= lo`` or a dimension name/expression (``"batch"``)."""
    return Attr(name, "dim", lo, INT64_MAX, **kw)


def float_attr(name: str, lo: float | None = None, hi: float | None = None, **kw: Any) -> Attr:
    """A finite float attribute (ints accepted), optionally bounded."""
    return Attr(name, "float", lo, hi, **kw)


def bool_attr(name: str, **kw: Any) -> Attr:
    return Attr(name, "bool", **kw)


def shape_attr(name: str, **kw: Any) -> Attr:
    return Attr(name, "shape", **kw)


def optional(a: Attr, default: Any = None) -> Attr:
    """``a`` made optional: omitted (or None) means ``default``."""
    return Attr(**{**a.__dict__, "required": False, "default": default, "nullable": default is None})


def dims(*names: str) -> tuple[Attr, ...]:
    """Positive int attributes (sizes: batch, channels, ...)."""
    return tuple(int_attr(n, 1) for n in names)


# -- custom ops -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorArg:
    """An input or output of a ``com.meganeura`` ONNX op. ``dtype``: ``"float"`` (float32, or the
    half type the op runs in: its ``half_types``), ``"float32"`` (float32 whatever the op runs in: a
    log-sum-exp kept exact next to half tensors), ``"index"`` (any integer type the kernels read:
    int64, int32, uint32) or ``"uint32"`` (uint32 only: the token ids and positions a greedy step
    reads and makes)."""

    name: str
    dtype: str = "float"
    optional: bool = False


@dataclass(frozen=True)
class CustomOp:
    """The ``com.meganeura`` ONNX op an op lowers to: what the C++ kernels register and validate
    (``tests/test_custom_op_schema.py`` holds them to this) and what the function body declares."""

    name: str
    inputs: tuple[TensorArg, ...]
    outputs: tuple[TensorArg, ...]
    attrs: tuple[Attr, ...] = ()
    inplace_input: str | None = None
    """ONNX input whose buffer output 0 may reuse (the kernel writes it in place)."""
    inplace_pairs: tuple[tuple[str, str], ...] = ()
    """(input, output) pairs of an op with several in-place outputs (``RopeCachedAttention``'s two
    caches): each output may reuse its input's buffer (the kernel writes it in place)."""
    relations: tuple[str, ...] = ()
    """Conditions between attributes the kernels check too, as Python expressions over their names."""
    variadic_inputs: tuple[TensorArg, ...] = ()
    """A group of inputs repeated one or more times after ``inputs`` (``AdamUpdate``'s p, g, m, v)."""
    variadic_outputs: tuple[TensorArg, ...] = ()
    """A group of outputs repeated as often as the input group (after ``outputs``)."""
    domain: str = CUSTOM_DOMAIN

    def input_names(self, arity: int = 1) -> list[str]:
        """ONNX input names; a variadic group's are numbered (``p0, g0, m0, v0, p1, ...``)."""
        return [t.name for t in self.inputs] + [f"{t.name}{k}" for k in range(arity) for t in self.variadic_inputs]

    def output_names(self, arity: int = 1) -> list[str]:
        return [t.name for t in self.outputs] + [f"{t.name}{k}" for k in range(arity) for t in self.variadic_outputs]


@dataclass(frozen=True)
class Position:
    """A U32 position (or row index) input and its valid range: ``0 <= value <= max_value``; with
    ``rows`` and ``within``, ``value + rows(rows) <= rows(within)`` (rows = the second-to-last dimension
    of those inputs: dimension 0 of ``[rows, width]``, 1 of a batch ``[batch, rows, width]``); with
    ``within`` alone, ``value < rows(within)`` (an index into its rows: ``embedding``'s table); with
    ``below``, ``value < attrs[below]`` (an int attribute: ``scatter_add``'s ``num_rows``). A position
    input of a batch holds one value per sequence; each must lie in the range."""

    input: str
    rows: str | None = None
    within: str | None = None
    max_value: int | None = None
    below: str | None = None
    sequences: str | None = None
    """An input that, when 3-D, holds B sequences (dim 0): ``rows`` is then ``[B*S, width]``, S rows each (``decode_layer``)."""

    def rows_per_sequence(self, shapes: Mapping[str, tuple[Dim, ...]]) -> Dim:
        """The rows each sequence writes: ``rows``' second-to-last dimension (over B with ``sequences``)."""
        rows, blocks = shapes[self.rows][-2] if self.rows is not None else 1, shapes[self.sequences] if self.sequences else ()
        ok = len(blocks) == 3 and isinstance(rows, int) and isinstance(blocks[0], int) and blocks[0] > 0
        return rows // blocks[0] if ok else rows

    def limit(self, shapes: Mapping[str, tuple[Dim, ...]], attrs: Mapping[str, Any] | None = None) -> int | None:
        """The largest valid value, given the shapes of the op's inputs by name (and its attributes).
        A symbolic row count (a prefill of any length) counts as one row; a symbolic ``within``
        gives no static limit. Sessions check the exact limit of each run's sizes."""
        limits = [self.max_value] if self.max_value is not None else []
        if self.within is not None:
            within = shapes[self.within][-2]
            rows = self.rows_per_sequence(shapes)
            if isinstance(within, int):
                limits.append(within - (rows if isinstance(rows, int) else 1))
        if self.below is not None and attrs is not None and isinstance(attrs.get(self.below), int):
            limits.append(attrs[self.below] - 1)
        return min(limits) if limits else None

    def sized_dims(self) -> tuple[str, ...]:
        """The inputs whose shapes set the limit."""
        return tuple(a for a in (self.rows, self.within) if a is not None)


CHECK_POSITIONS = optional(
    int_attr(
        "check_positions",
        0,
        1,
        doc="1: the kernels validate the position inputs' values (on CUDA a read-back and stream sync "
        "per op); 0: the caller did (Session does, per run) and the CUDA kernels rely on their device "
        "guards (NaN or no write for an invalid position, never out of bounds). CPU kernels check always.",
    ),
    1,
)
"""The ``com.meganeura`` attribute of every op with ``positions`` (added by :func:`op`); ScatterAdd's
indices are positions (row indices) in this sense too."""


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
    optional_inputs: frozenset[str] = frozenset()
    """Trailing inputs that may be left out (``rope``'s dynamic offset)."""
    variadic: tuple[str, ...] = ()
    """A group of inputs repeated one or more times after ``inputs`` (``adam_update``'s p, g, m, v)."""
    attrs: tuple[Attr, ...] = ()
    """The static arguments ``apply`` accepts, each checked for type and range."""
    differentiable: bool = True
    """False for ops with no gradient by definition (``greater``, integer leaves, cache ops)."""
    leaf: bool = False
    custom: CustomOp | None = None
    """The ``com.meganeura`` op this lowers to (None for ops lowered to standard ONNX only)."""
    inplace_input: str | None = None
    """The input this op writes in place: an ``input`` leaf there is session state (a KV cache)."""
    inplace_by_index: Mapping[int, str] = field(default_factory=dict)
    """For an op whose IR nodes are the outputs of one ONNX node (an ``index`` attribute): output
    index -> the input that output is, written in place (``rope_cached_attention``'s caches)."""
    positions: tuple[Position, ...] = ()
    """U32 position inputs and their limits (sessions check fed values against them)."""
    init_roles: Mapping[str, str] = field(default_factory=dict)
    """input name -> default init of a 1-D parameter fed there: ``"ones"`` (normalisation scales)."""
    fan_in: Mapping[str, int] = field(default_factory=dict)
    """input name -> axis of a parameter fed there that is contracted (its fan-in for the init)."""
    shape_rule: ShapeRule | None = None
    numpy_ref: NumpyRef | None = None
    lowering: Lowering | None = None
    vjp_rule: VjpRule | None = None
    group_vjp_rule: Callable[..., list] | None = None
    """For an op whose IR nodes are the outputs of one ONNX node (an ``index`` attribute): the VJP of
    the nodes that share inputs and attributes but ``index``, all at once, ``fn(g, nodes, dys) ->
    contributions to their inputs`` (``dys[k]`` None where ``nodes[k]`` gets no gradient). Autodiff
    calls it instead of ``vjp_rule`` per node (``split``: one ``cat`` of the pieces' gradients)."""
    custom_function: Callable[[int], Any] | None = None
    """``fn(opset) -> onnx.FunctionProto``: the custom op's model-local function body."""
    examples: list[Callable] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    """E-graph rules stated next to this op (the fused op they produce, or the algebra of this op)."""
    half_types: frozenset[str] = frozenset()
    """Element types besides float32 that this op's ``com.meganeura`` kernels take for their float
    inputs and outputs (``"float16"``, ``"bfloat16"``): the precision pass runs the op in those
    types; an op without them computes in float32 with casts around it. ``tests/test_custom_op_schema.py``
    holds the kernels' per-type registrations (CPU and CUDA) to it."""

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

    def group_vjp(self, fn: Callable[..., list]) -> Callable[..., list]:
        self.group_vjp_rule = fn
        return fn

    def function_body(self, fn: Callable[[int], Any]) -> Callable[[int], Any]:
        """Register the custom op's function body builder ``fn(opset) -> FunctionProto``."""
        self.custom_function = fn
        return fn

    def rewrite(self, name: str, lhs: str, rhs: str) -> None:
        """Declare the e-graph rule ``lhs -> rhs`` (see :class:`Rewrite`; ``name`` is global, used in reports)."""
        self.rewrites.append(Rewrite(name, lhs, rhs))

    def example(self, fn: Callable) -> Callable:
        """Register ``fn(g, rng) -> (NodeId, feeds)``: a small graph using this op, with its data."""
        self.examples.append(fn)
        return fn

    def written_input(self, attrs: Mapping[str, Any]) -> str | None:
        """The input a node of this op with ``attrs`` writes in place (None: it writes nothing)."""
        if self.inplace_by_index:
            return self.inplace_by_index.get(attrs.get("index", 0))
        return self.inplace_input

    def writes_in_place(self) -> bool:
        """Whether any node of this op writes an input in place."""
        return self.inplace_input is not None or bool(self.inplace_by_index)

    def attr(self, name: str) -> Attr:
        """The declaration of attribute ``name``."""
        return next(a for a in self.attrs if a.name == name)

    def check_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """``attrs`` checked against the declaration and normalised (plain ints/floats/tuples).

        Unknown or missing attributes raise ``TypeError``; a value of the wrong type ``TypeError``;
        a value out of range ``ValueError``; each message names the op, the attribute, what it
        accepts and what was given.
        """
        declared = {a.name: a for a in self.attrs}
        unknown = [k for k in attrs if k not in declared]
        if unknown:
            takes = ", ".join(declared) or "no attributes"
            raise TypeError(f"{self.name}: unexpected argument {unknown[0]!r} (it takes {takes})")
        missing = [a.name for a in self.attrs if a.required and a.name not in attrs]
        if missing:
            raise TypeError(f"{self.name}: missing argument {missing[0]!r} ({declared[missing[0]].expected()})")
        return {k: declared[k].check(self.name, v) for k, v in attrs.items()}

    def input_dtype(self, arg: str) -> DType:
        return DType.U32 if arg in self.u32_inputs else DType.F32

    def input_names(self, count: int) -> list[str]:
        """Names of ``count`` inputs of a call: the declared ones, then the variadic group numbered
        (``p0, g0, m0, v0, p1, ...``); ``TypeError`` naming the op when ``count`` does not fit."""
        required = [a for a in self.inputs if a not in self.optional_inputs]
        extra = count - len(self.inputs)
        if self.variadic and extra > 0 and extra % len(self.variadic) == 0:
            return list(self.inputs) + [f"{a}{k}" for k in range(extra // len(self.variadic)) for a in self.variadic]
        if not self.variadic and len(required) <= count <= len(self.inputs):
            return list(self.inputs[:count])
        if self.variadic:
            want = f"{len(self.inputs)} inputs ({', '.join(self.inputs)}) then one or more groups ({', '.join(self.variadic)})"
        elif len(required) != len(self.inputs):
            want = f"{len(required)} to {len(self.inputs)} inputs ({', '.join(self.inputs)})"
        else:
            want = f"{len(self.inputs)} inputs ({', '.join(self.inputs) or 'none'})"
        raise TypeError(f"{self.name}: takes {want}, got {count}")


OPS: dict[str, OpDef] = {}


def op(
    name: str,
    inputs: tuple[str, ...] = (),
    *,
    u32: tuple[str, ...] = (),
    optional_inputs: tuple[str, ...] = (),
    attrs: tuple[Attr, ...] = (),
    **kwargs: Any,
) -> OpDef:
    """Declare an op in the table (once)."""
    if name in OPS:
        raise RuntimeError(f"op {name!r} is declared twice")
    custom = kwargs.get("custom")
    if custom is not None and kwargs.get("positions"):  # every op with positions takes check_positions
        kwargs["custom"] = replace(custom, attrs=(*custom.attrs, CHECK_POSITIONS))
    d = OpDef(name, tuple(inputs), frozenset(u32), frozenset(optional_inputs), attrs=tuple(attrs), **kwargs)
    for field_name, names in (("u32", u32), ("optional_inputs", optional_inputs), ("init_roles", d.init_roles), ("fan_in", d.fan_in)):
        stray = set(names) - set(inputs) - set(d.variadic)
        if stray:
            raise RuntimeError(f"op {name!r}: {field_name} names {sorted(stray)}, which are not among its inputs {list(inputs)}")
    OPS[name] = d
    return d


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
