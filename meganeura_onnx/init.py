"""Default parameter initialisation (documented, seeded, independent of creation order).

- 1-D parameters used as a normalisation scale (an input the op table marks ``init_roles={"weight":
  "ones"}``: the ``rms_norm``/``layer_norm``/``group_norm`` weight): ones.
- Other 1-D parameters (biases): zeros.
- Everything else: uniform in ``[-a, a]``, ``a = 1/sqrt(fan_in)``, where fan_in is the contracted
  dimension (the op table's ``fan_in`` axis) of the first matmul that uses the parameter, else the last dimension (PyTorch's
  ``nn.Linear`` bias-free default). Each parameter draws from ``numpy.random.default_rng`` seeded by
  ``seed`` and the CRC32 of its name, so adding a parameter never changes another's values.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .ir import GraphCore
from .ops import OPS


def _role(op: str, pos: int) -> str | None:
    d = OPS[op]
    return d.init_roles.get(d.inputs[pos]) if pos < len(d.inputs) else None


def _fan_in_axis(op: str, pos: int) -> int | None:
    d = OPS[op]
    return d.fan_in.get(d.inputs[pos]) if pos < len(d.inputs) else None


def _uniform(seed: int, name: str, shape: tuple[int, ...], bound: np.float32) -> np.ndarray:
    """Uniform in [-bound, bound], float32 drawn in place, from the parameter's own generator."""
    value = np.random.default_rng([seed, zlib.crc32(name.encode())]).random(shape, dtype=np.float32)
    value *= 2 * bound
    value -= bound
    return value


def default_parameters(graph: GraphCore, seed: int = 0, skip: Collection[str] = ()) -> dict[str, np.ndarray]:
    """Initial values for every parameter of ``graph`` by name (float32), except those in ``skip``
    (parameters the caller already has values for: drawing 135M random numbers costs a second)."""
    uses: dict[int, list[tuple[str, int]]] = {}
    for n in graph.nodes():
        for pos, i in enumerate(n.inputs):
            uses.setdefault(i, []).append((n.op, pos))
    out: dict[str, np.ndarray] = {}
    draws: list[tuple[str, tuple[int, ...], np.float32]] = []
    for n in graph.nodes():
        if n.op != "parameter":
            continue
        name, shape = n.attrs["name"], n.ty.shape
        if name in skip:
            continue
        used = uses.get(n.id, [])
        if len(shape) == 1 and any(_role(op, pos) == "ones" for op, pos in used):
            out[name] = np.ones(shape, np.float32)
        elif len(shape) == 1:
            out[name] = np.zeros(shape, np.float32)
        else:
            fan_in = next((shape[axis] for op, pos in used if (axis := _fan_in_axis(op, pos)) is not None), shape[-1])
            draws.append((name, shape, np.float32(1.0 / np.sqrt(fan_in))))
    # numpy fills the arrays without the GIL and every parameter has its own seeded generator, so
    # the draws run on all cores with the same values as one thread would give.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        out.update(zip((d[0] for d in draws), pool.map(lambda d: _uniform(seed, *d), draws), strict=True))
    return out
