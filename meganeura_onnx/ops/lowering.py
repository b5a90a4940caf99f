"""Emitting ONNX nodes: the context every op lowering writes into.

The same class builds the main graph (constants become initializers) and the bodies of the
``com.meganeura`` model-local functions (constants become ``Constant`` nodes, attributes are read
through ``ref_attr_name``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..ir import Dim, dim
from .table import CUSTOM_DOMAIN, CustomOp

__all__ = ["CUSTOM_DOMAIN", "LoweringContext", "function_body"]


class LoweringContext:
    def __init__(self, opset: int, *, in_function: bool = False, prefix: str = "") -> None:
        self.opset = opset
        self.in_function = in_function
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.functions: dict[tuple[str, str, str], onnx.FunctionProto] = {}
        self._counter = 0
        self._const_cache: dict[tuple, str] = {}
        self.prefix = prefix
        self.doc = ""
        self.graph: Any = None  # the Graph being lowered (None inside function bodies)
        self.shared: dict[Any, list[str]] = {}  # shared_node's ONNX nodes already emitted, by key
        self.symbols: dict[str, tuple[str, int]] = {}
        """Symbolic dim name -> (graph input, axis) whose runtime size it is (read with ``Shape``)."""
        self._sizes: dict[Dim, str] = {}
        # Reshape folding (main graph only, see :meth:`reshape`): static shapes of ONNX values where
        # known, the source of each Reshape :meth:`reshape` emitted, and its Reshapes by (source, shape).
        self.static_shapes: dict[str, tuple[int, ...]] = {}
        self.float_shapes: dict[str, tuple[int, ...]] = {}
        """Float custom-op outputs of known static shape (:meth:`note_shape`): the exporter declares them
        in ``value_info`` (ONNX shape inference cannot see through the function bodies)."""
        self.reshape_sources: dict[str, str] = {}
        self._reshapes: dict[tuple[str, tuple[int, ...]], str] = {}

    def shared_node(self, key: Any, emit: Callable[[], str | list[str]]) -> list[str]:
        """The outputs of the one ONNX node that several IR nodes lower to (the Graph IR has one output
        per node, so e.g. ``adam_update`` is several IR nodes and ONE ONNX node): the first of them
        calls ``emit()`` to append the node, under ``key``; the others get the same output names."""
        if key not in self.shared:
            outs = emit()
            self.shared[key] = [outs] if isinstance(outs, str) else list(outs)
        return self.shared[key]

    def input_types(self, node: Any) -> list:
        """TensorTypes of a Graph node's inputs (lowerings that need static sizes read them here)."""
        return [self.graph.node(i).ty for i in node.inputs]

    def fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{self.prefix}{hint}_{self._counter}"

    def op(self, op_type: str, *inputs: str, domain: str = "", outputs: int = 1, name: str | None = None, **attrs: Any) -> Any:
        """Append one node; returns its output name (or a list when ``outputs > 1``)."""
        outs = [self.fresh(op_type.lower()) for _ in range(outputs)]
        node = helper.make_node(op_type, list(inputs), outs, name=name or self.fresh(op_type), domain=domain or None, **attrs)
        if self.doc:
            node.doc_string = self.doc
        self.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    def const(self, value: Any, dtype: Any = np.float32, hint: str = "const") -> str:
        """A constant tensor: an initializer in a graph, a ``Constant`` node in a function body."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes()) if arr.size <= 64 else None
        if key is not None and key in self._const_cache:
            return self._const_cache[key]
        name = self.fresh(hint)
        tensor = numpy_helper.from_array(arr, name)
        if self.in_function:
            self.nodes.append(helper.make_node("Constant", [], [name], value=tensor, name=self.fresh("Constant")))
        else:
            self.initializers.append(tensor)
        if key is not None:
            self._const_cache[key] = name
        return name

    def ints(self, values: list[int] | tuple[int, ...]) -> str:
        """A 1-D int64 constant (shapes, axes, slice bounds)."""
        return self.const(list(values), np.int64, "ints")

    def attr_ref(self, attr: str, kind: str) -> str:
        """Inside a function body: a scalar tensor holding the caller's attribute ``attr``.

        ``kind`` is ``"int"`` (int64 scalar) or ``"float"`` (float32 scalar).
        """
        assert self.in_function, "attr_ref is only meaningful inside a function body"
        out = self.fresh(attr)
        node = helper.make_node("Constant", [], [out], name=self.fresh("Constant"))
        atype = onnx.AttributeProto.INT if kind == "int" else onnx.AttributeProto.FLOAT
        node.attribute.append(onnx.AttributeProto(name=f"value_{kind}", ref_attr_name=attr, type=atype))
        self.nodes.append(node)
        return out

    def size(self, d: Dim) -> str:
        """A dimension as an int64 ``[1]`` tensor: a constant when static, else computed at run time
        from the ``Shape`` of the graph input that names each symbol (``"batch*seq"`` -> Mul)."""
        d = dim(d)
        if isinstance(d, int):
            return self.ints([d])
        if d not in self._sizes:
            total = None
            for term in d.split("+"):
                value = None
                for factor in term.split("*"):
                    part = self.ints([int(factor)]) if factor.isdigit() else self._symbol(factor)
                    value = part if value is None else self.op("Mul", value, part)
                total = value if total is None else self.op("Add", total, value)
            self._sizes[d] = total
        return self._sizes[d]

    def scalar(self, d: Dim) -> int | str:
        """A dimension as an int (static) or an int64 scalar tensor (symbolic), as the helpers of
        :mod:`.onnx_util` (``arange``, ``dims``) take sizes."""
        d = dim(d)
        return d if isinstance(d, int) else self.op("Squeeze", self.size(d), self.ints([0]))

    def _symbol(self, name: str) -> str:
        if name not in self._sizes:
            if name not in self.symbols:
                raise ValueError(
                    f"export: the symbolic dimension {name!r} is not a dimension of any graph input, so its size is unknown at run time"
                )
            src, axis = self.symbols[name]
            self._sizes[name] = self.op("Shape", src, start=axis, end=axis + 1)
        return self._sizes[name]

    def shape_tensor(self, shape: list[Dim] | tuple[Dim, ...]) -> str:
        """A 1-D int64 shape tensor; symbolic dims are read at run time (:meth:`size`)."""
        if all(isinstance(d, int) for d in shape):
            return self.ints(shape)
        return self.op("Concat", *(self.size(d) for d in shape), axis=0)

    def note_shape(self, x: str, shape: Any) -> None:
        """Record that ``x``, a float (float32 at export) output of a custom op, has ``shape`` when it
        is static: :meth:`reshape` folds against it and the exporter declares it."""
        if shape is not None and all(isinstance(d, int) and d >= 0 for d in shape):
            self.static_shapes[x] = self.float_shapes[x] = tuple(shape)

    def reshape(self, x: str, shape: list[Dim] | tuple[Dim, ...]) -> str:
        """Reshape to ``shape`` (ints, -1 or symbolic dims). A single symbolic dim becomes -1, so
        the shape stays a constant; more are computed from the inputs' ``Shape``.

        In the main graph the reshapes that lowerings chain fold: a Reshape of a Reshape this method
        made reads the first one's input instead, a reshape to the shape ``x`` already has is ``x``
        itself, and one (input, static shape) pair is reshaped once. (A ``0`` in ``shape`` copies a
        dimension of the input, so such a reshape is never moved to another input.) The Reshapes
        left unread are dropped by the exporter."""
        fold = not self.in_function and 0 not in shape
        if fold:
            x = self.reshape_sources.get(x, x)
            if all(isinstance(d, int) and d > 0 for d in shape):
                if self.static_shapes.get(x) == tuple(shape):
                    return x
                if (x, tuple(shape)) in self._reshapes:
                    return self._reshapes[(x, tuple(shape))]
        symbolic = [k for k, d in enumerate(shape) if not isinstance(d, int)]
        if len(symbolic) == 1 and -1 not in shape:
            shape = [-1 if k == symbolic[0] else d for k, d in enumerate(shape)]
        elif symbolic:
            return self._folded(x, self.op("Reshape", x, self.shape_tensor(shape)), None, fold)
        return self._folded(x, self.op("Reshape", x, self.ints(shape)), shape, fold)

    def _folded(self, x: str, out: str, shape: Any, fold: bool) -> str:
        if fold:
            self.reshape_sources[out] = x
            if shape is not None and -1 not in shape:
                self._reshapes[(x, tuple(shape))] = out
                self.static_shapes[out] = tuple(shape)
        return out

    def cast(self, x: str, to: int) -> str:
        return self.op("Cast", x, to=to)

    def to_int64(self, x: str) -> str:
        return self.cast(x, TensorProto.INT64)

    def use_function(self, fn: onnx.FunctionProto) -> None:
        self.functions[(fn.domain, fn.name, fn.overload)] = fn  # an op of several arities has one body per overload


def function_body(schema: CustomOp, build: Any, opset: int, arity: int = 1) -> onnx.FunctionProto:
    """Build the FunctionProto of a custom op (name, inputs, outputs and attributes from its schema
    in the op table) whose body ``build(ctx, *inputs) -> outputs`` writes; ``arity``: how many times
    a variadic input group repeats in this model.

    ``build`` returns the body's output names; they are renamed to the schema's outputs by Identity nodes.
    """
    name = schema.name
    inputs = schema.input_names(arity)
    outputs = schema.output_names(arity)
    # An optional attribute with a default is declared with it (FunctionProto.attribute_proto), so a
    # node may leave it out and the body still reads a value.
    defaults = [helper.make_attribute(a.name, a.default) for a in schema.attrs if not a.required and a.default is not None]
    attributes = [a.name for a in schema.attrs if a.required or a.default is None]
    ctx = LoweringContext(opset, in_function=True, prefix=f"{name}_")
    results = build(ctx, *inputs)
    if isinstance(results, str):
        results = [results]
    for res, out in zip(results, outputs, strict=True):
        ctx.nodes.append(helper.make_node("Identity", [res], [out], name=ctx.fresh("Identity")))
    return helper.make_function(
        schema.domain,
        name,
        inputs,
        outputs,
        ctx.nodes,
        opset_imports=[helper.make_opsetid("", opset)],
        attributes=attributes,
        attribute_protos=defaults,
    )
