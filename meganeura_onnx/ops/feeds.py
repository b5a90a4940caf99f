"""``Feeds``: the random data of the op table's examples (:func:`meganeura_onnx.ops.table.examples`)."""

from __future__ import annotations

from typing import Any


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
