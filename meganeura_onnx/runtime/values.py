"""Host values checked against a session's buffer types before they are uploaded: the one place
where ``set_input``, ``set_parameter`` and the session builders' ``parameters=`` say what they
expected and what they were given."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..ir import DType, TensorType

NUMPY = {DType.F32: np.float32, DType.U32: np.uint32}


def host_array(name: str, data: object, ty: TensorType, dtype: DType, what: str) -> np.ndarray:
    """``data`` checked against the buffer type ``ty`` (wanted as ``dtype``) and converted to it.

    Raises TypeError/ValueError naming the call (``what``), the buffer and expected vs given.
    """
    if ty.dtype is not dtype:
        other = "set_input_u32" if ty.dtype is DType.U32 else "set_input"
        raise TypeError(f"{what}: {name!r} is {ty.dtype.name} {list(ty.shape)}; use {other}")
    arr = np.asarray(data)
    if dtype is DType.U32:
        if arr.size and (not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() > 0xFFFFFFFF):
            raise ValueError(
                f"{what}: {name!r} takes non-negative integers below 2**32, got dtype {arr.dtype} with range [{arr.min()}, {arr.max()}]"
            )
    elif not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{what}: {name!r} takes numbers, got dtype {arr.dtype}")
    if arr.size != ty.num_elements():
        raise ValueError(
            f"{what}: {name!r} expects {ty.num_elements()} values (shape {list(ty.shape)}), got {arr.size} (shape {list(arr.shape)})"
        )
    return np.ascontiguousarray(arr.reshape(ty.shape), dtype=NUMPY[dtype])


def parameter_array(name: str, data: object, ty: TensorType, what: str) -> np.ndarray:
    """A parameter value checked like ``set_parameter``: numbers (not bool/complex/object), either
    flat or of exactly the parameter's shape (a transposed weight is refused), all finite."""
    arr = np.asarray(data)
    if arr.ndim > 1 and tuple(arr.shape) != tuple(ty.shape):
        raise ValueError(f"{what}: parameter {name!r} has shape {list(ty.shape)}, got an array of shape {list(arr.shape)}")
    out = host_array(name, arr, ty, DType.F32, what)
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out.reshape(-1)))[0])
        raise ValueError(f"{what}: parameter {name!r} has a non-finite value ({out.reshape(-1)[bad]} at flat index {bad})")
    return out


def checked_parameters(given: Mapping[str, object] | None, types: Mapping[str, TensorType], what: str) -> dict[str, np.ndarray]:
    """``parameters=`` of a session builder: every name a parameter of the graph, every value checked
    by :func:`parameter_array`. Returns float32 arrays of the parameters' shapes."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(types))
    if unknown:
        raise ValueError(f"{what}: parameters {unknown} are not in the graph (it has {sorted(types)})")
    return {name: parameter_array(name, value, types[name], what) for name, value in given.items()}


def first_non_finite(arr: np.ndarray) -> str | None:
    """``"nan at index 3"``-style description of the first non-finite element, or None."""
    flat = np.asarray(arr).reshape(-1)
    if not np.issubdtype(flat.dtype, np.floating):
        return None
    bad = np.flatnonzero(~np.isfinite(flat))
    return f"{flat[bad[0]]} at flat index {int(bad[0])}" if bad.size else None
