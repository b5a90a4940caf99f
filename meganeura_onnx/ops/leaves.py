"""Leaves: runtime inputs, parameters and constants. They are fed, not computed, so they have no
numpy reference or lowering of their own: the exporter turns them into graph inputs/initializers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import Dim, DType, NodeId, TensorType, is_dim_name
from .table import op

op("input", leaf=True, differentiable=False)
op("input_u32", leaf=True, differentiable=False)
op("parameter", leaf=True)
op("constant", leaf=True, differentiable=False)

LEAF_OPS = ("input", "input_u32", "parameter", "constant")


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


class LeafBuilders:
    def _named_leaf(self, op_name: str, name: str, shape: Sequence[Dim], dtype: DType) -> NodeId:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{op_name}: name must be a non-empty string, got {name!r}")
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

    def constant(self, values: Sequence[float], shape: Sequence[int]) -> NodeId:
        """A fixed F32 tensor; ``len(values)`` must equal the product of ``shape``."""
        shp = _shape("constant", shape, symbolic=False)
        arr = np.asarray(values, dtype=np.float32).reshape(-1)
        if arr.size != int(np.prod(shp)):
            raise ValueError(f"constant: {arr.size} values given for shape {list(shp)} ({int(np.prod(shp))} elements)")
        return self.add_node("constant", (), TensorType(shp), {"value": arr.reshape(shp)})  # type: ignore[attr-defined]

    def scalar(self, value: float) -> NodeId:
        """``constant([value], [1])``."""
        return self.constant([float(value)], [1])
