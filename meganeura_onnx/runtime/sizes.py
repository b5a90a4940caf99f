"""Sizes of symbolic dimensions in a running session.

A graph input may name symbolic dimensions (``g.input("x", ["batch", 784])``). Each step, the
first ``set_input`` that names a symbol fixes its size; a later input of the same step naming it
with another size is an error that names both inputs. Inputs not set again in a step keep the
sizes they were set with, and must agree with the step's sizes when it runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir import TensorType


class SymbolSizes:
    """Binds the symbolic dimensions of a session's inputs (``types``: the symbolic inputs only)."""

    def __init__(self, types: Mapping[str, TensorType]) -> None:
        self.types = dict(types)
        self.held: dict[str, dict[str, int]] = {}
        """input -> sizes of the symbols in the buffer it holds now."""
        self.fixed: dict[str, tuple[int, str]] = {}
        """symbol -> (size, the input that fixed it) in the current step."""

    def shape_of(self, name: str, data: object, what: str) -> tuple[tuple[int, ...], dict[str, int]]:
        """The concrete shape ``data`` gives input ``name`` and the sizes it fixes (``commit`` them
        once the data is accepted).

        ``data`` has the input's rank, or is flat when at most one symbol of the input is not yet
        fixed in this step (its size is then the element count divided by the rest).
        """
        ty = self.types[name]
        shape = np.shape(data)
        found: dict[str, int] = {}
        if len(shape) == ty.rank():
            for axis, (want, got) in enumerate(zip(ty.shape, shape, strict=True)):
                if isinstance(want, int):
                    if want != got:
                        raise ValueError(
                            f"{what}: {name!r} has shape {list(ty.shape)}; dimension {axis} must be {want}, got shape {list(shape)}"
                        )
                elif found.setdefault(want, got) != got:
                    raise ValueError(f"{what}: {name!r} names {want!r} twice in {list(ty.shape)} but got sizes {found[want]} and {got}")
        else:
            found = self._infer_flat(name, ty, int(np.size(data)), what)
        for sym, size in found.items():
            if size <= 0:
                raise ValueError(f"{what}: {name!r} would give dimension {sym!r} size {size}; sizes must be positive")
            prev = self.fixed.get(sym)
            if prev is not None and prev[0] != size and prev[1] != name:
                raise ValueError(
                    f"{what}: {name!r} gives dimension {sym!r} size {size}, but {prev[1]!r} fixed it to {prev[0]} in this step "
                    f"(shape {list(ty.shape)} vs {list(self.types[prev[1]].shape)})"
                )
        return ty.resolve(found).shape, found

    def commit(self, name: str, found: dict[str, int]) -> None:
        """Record that ``name`` now holds a buffer of these sizes, fixed for the current step."""
        for sym, size in found.items():
            self.fixed[sym] = (size, name)
        self.held[name] = found

    def _infer_flat(self, name: str, ty: TensorType, count: int, what: str) -> dict[str, int]:
        known = {s: v for s, (v, _) in self.fixed.items()}
        unknown = sorted(ty.symbols() - set(known))
        shaped = f"pass an array of shape {list(ty.shape)}"
        if len(unknown) > 1:
            raise ValueError(f"{what}: {name!r} has shape {list(ty.shape)} with unknown sizes {unknown}; {shaped}")
        found = {s: known[s] for s in ty.symbols() if s in known}
        if unknown:
            rest = TensorType(tuple(1 if d == unknown[0] else d for d in ty.shape)).resolve(known).num_elements()
            if ty.shape.count(unknown[0]) != 1 or count % rest:
                raise ValueError(f"{what}: {name!r} has shape {list(ty.shape)}; {count} values do not fit it, {shaped}")
            found[unknown[0]] = count // rest
        return found

    def end_step(self) -> None:
        self.fixed.clear()

    def resolve(self) -> dict[str, int]:
        """The size of every symbol for the step about to run; every symbolic input must be set and agree."""
        sizes = {s: v for s, (v, _) in self.fixed.items()}
        origin = {s: n for s, (_, n) in self.fixed.items()}
        for name in self.types:
            if name not in self.held:
                raise ValueError(f"step: input {name!r} has symbolic shape {list(self.types[name].shape)}; set it before the first step")
            for sym, size in self.held[name].items():
                if sizes.setdefault(sym, size) != size:
                    raise ValueError(
                        f"step: {name!r} still holds dimension {sym!r} = {size} from an earlier step, but {origin[sym]!r} "
                        f"set it to {sizes[sym]} in this one; set {name!r} again"
                    )
                origin.setdefault(sym, name)
        return sizes
