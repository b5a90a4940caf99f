"""Leaves: runtime inputs, parameters and constants. They are fed, not computed, so they have no
numpy reference or lowering of their own: the exporter turns them into graph inputs/initializers."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence

import numpy as np

from ..ir import Dim, DType, NodeId, TensorType, is_dim_name
from .table import op

op("input", leaf=True, differentiable=False)
op("input_u32", leaf=True, differentiable=False)
op("parameter", leaf=True)
op("constant", leaf=True, differentiable=False)

LEAF_OPS = ("input", "input_u32", "parameter", "constant")

# Names the toolchain gives to values it creates, which a leaf name must never shadow: optimizer
# hyper-parameters and state (``opt.lr``, ``adam_m.<p>``, ``adam_v.<p>``), gradients read by
# sessions (``grad.<p>``), next values of state (``<name>.next``), exported constants and outputs
# (``const_<id>``, ``output_<k>``) and the values lowered inside one node (``n<id>_<op>/...``).
RESERVED_PREFIXES = ("opt.", "adam_m.", "adam_v.", "grad.")
RESERVED_SUFFIXES = (".next",)
RESERVED_PATTERN = re.compile(r"(const|output)_\d+|n\d+_\w+/.*")


def reserved_name(name: str) -> str | None:
    """Why ``name`` is reserved for names the toolchain generates, or None when a user may use it."""
    if name.startswith(RESERVED_PREFIXES):
        return f"names starting with {', '.join(RESERVED_PREFIXES)} are reserved for optimizer state and gradients"
    if name.endswith(RESERVED_SUFFIXES):
        return "names ending in '.next' are reserved for the next value of session state"
    if RESERVED_PATTERN.fullmatch(name):
        return "const_<n>, output_<n> and n<id>_<op>/... are the names the exporter gives to constants, outputs and lowered values"
    return None


def _shape(op_name: str, shape: Sequence[Dim], symbolic: bool = True) -> tuple[Dim, ...]:
    """A leaf's shape: positive ints, and (unless ``symbolic`` is False) identifier-like names of
    symbolic dimensions (``["batch", 784]``). No bools, floats or digit strings."""
    what = "positive ints or names of symbolic dimensions" if symbolic else "positive ints (its shape is static)"
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or not shape:
        raise ValueError(f"{op_name}: shape must be a non-empty list of {what}, got {shape!r}")
    for d in shape:
        if isinstance(d, str) and symbolic:
            if not is_dim_name(d):
                raise ValueError(
                    f"{op_name}: {d!r} in shape {list(shape)!r} is not a valid dimension name (letters, digits, '_'; not starting with a digit)"
                )
        elif isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0:
            raise ValueError(f"{op_name}: shape must be a non-empty list of {what}, got {list(shape)!r}")
    return tuple(d if isinstance(d, str) else int(d) for d in shape)


def _finite_values(op_name: str, values: object) -> np.ndarray:
    """``values`` (numbers, nested lists or an array) as float32; bools, strings, None and
    non-finite numbers refused (``TypeError``/``ValueError`` naming the op)."""
    if values is None or isinstance(values, (str, bytes, bool, np.bool_)):
        raise TypeError(f"{op_name}: values must be a list or array of finite numbers, got {values!r} ({type(values).__name__})")
    try:
        arr = np.asarray(values)
    except ValueError as e:  # ragged nesting
        raise ValueError(f"{op_name}: values must be a list or array of finite numbers ({e})") from None
    if arr.dtype.kind not in "iuf":
        kind = "bools" if arr.dtype.kind == "b" else f"{arr.dtype} elements"
        raise TypeError(f"{op_name}: values must be finite numbers, got {kind}: {_short(values)}")
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is reported below
        out = arr.astype(np.float32).reshape(-1)
    if not np.all(np.isfinite(out)):
        k = int(np.flatnonzero(~np.isfinite(out))[0])
        raise ValueError(f"{op_name}: values must be finite float32 numbers, value {k} is {arr.reshape(-1)[k]!r}")
    return out


def _short(values: object) -> str:
    text = repr(values)
    return text if len(text) <= 60 else text[:57] + "..."


class LeafBuilders:
    def _named_leaf(self, op_name: str, name: str, shape: Sequence[Dim], dtype: DType, internal: bool = False) -> NodeId:
        if not isinstance(name, str):
            raise TypeError(f"{op_name}: name must be a non-empty string, got {name!r} ({type(name).__name__})")
        if not name:
            raise ValueError(f"{op_name}: name must be a non-empty string, got ''")
        why = None if internal else reserved_name(name)
        if why:
            raise ValueError(f"{op_name}: the name {name!r} is reserved ({why}); pick another name")
        names = self._leaf_names  # type: ignore[attr-defined]
        if name in names:
            raise ValueError(f"{op_name}: the name {name!r} is already used by node {names[name]}")
        return self.add_node(op_name, (), TensorType(_shape(op_name, shape, op_name != "parameter"), dtype), {"name": name})  # type: ignore[attr-defined]

    def input(self, name: str, shape: Sequence[Dim]) -> NodeId:
        """An F32 runtime input, fed with ``Session.set_input(name, data)`` before each step.

        A ``str`` in ``shape`` names a symbolic dimension (``["batch", 784]``): its size is fixed
        when the model runs, and every input naming it must agree.
        """
        return self._named_leaf("input", name, shape, DType.F32)

    def input_u32(self, name: str, shape: Sequence[Dim]) -> NodeId:
        """A U32 runtime input (token ids, positions), fed with ``Session.set_input_u32``; ``shape``
        may name symbolic dimensions as :meth:`input` does (``["seq"]``)."""
        return self._named_leaf("input_u32", name, shape, DType.U32)

    def parameter(self, name: str, shape: Sequence[int]) -> NodeId:
        """A trainable F32 weight, named like its Hugging Face checkpoint key (``layer.weight``)."""
        return self._named_leaf("parameter", name, shape, DType.F32)

    def state_input(self, name: str, shape: Sequence[Dim]) -> NodeId:
        """An F32 input with a name from the reserved namespace (``opt.<h>``, ``adam_m.<p>``, ...).

        For the toolchain's own inputs (optimizer hyper-parameters and moments, gradients fed to an update
        model); programs use
        :meth:`input`, which refuses those names so they can never shadow what the toolchain adds.
        """
        return self._named_leaf("input", name, shape, DType.F32, internal=True)

    def constant(self, values: Sequence[float], shape: Sequence[int]) -> NodeId:
        """A fixed F32 tensor of finite values; ``len(values)`` must equal the product of ``shape``."""
        shp = _shape("constant", shape, symbolic=False)
        arr = _finite_values("constant", values)
        if arr.size != int(np.prod(shp)):
            raise ValueError(f"constant: {arr.size} values given for shape {list(shp)} ({int(np.prod(shp))} elements)")
        return self.add_node("constant", (), TensorType(shp), {"value": arr.reshape(shp)})  # type: ignore[attr-defined]

    def scalar(self, value: float) -> NodeId:
        """``constant([value], [1])`` for a finite number ``value``."""
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise TypeError(f"scalar: value must be a finite number, got {_short(value)} ({type(value).__name__})")
        if not math.isfinite(float(value)) or abs(float(value)) > float(np.finfo(np.float32).max):
            raise ValueError(f"scalar: value must be a finite float32 number, got {value!r}")
        return self.constant([float(value)], [1])
