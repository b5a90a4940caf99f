"""Training checkpoints in Meganeura's safetensors layout.

- every parameter under its own name, F32;
- Adam moments as ``adam_m.<name>`` and ``adam_v.<name>`` (absent for SGD);
- metadata (strings, as safetensors requires): ``step`` (optimizer steps taken), ``format``
  (``meganeura-checkpoint-1``) and the optimizer kind.

Writing is atomic: the file is written to a temporary name in the same directory, flushed to disk
(fsync), then renamed over the target with ``os.replace``; a crash at any point leaves either the
previous checkpoint or the new one, never a torn file. Never pickle.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save

FORMAT = "meganeura-checkpoint-1"
MOMENTS = ("adam_m.", "adam_v.")


@dataclass
class Checkpoint:
    """Parameters by name, Adam moments by parameter name, and the step count."""

    params: dict[str, np.ndarray]
    adam_m: dict[str, np.ndarray] = field(default_factory=dict)
    adam_v: dict[str, np.ndarray] = field(default_factory=dict)
    step: int = 0
    metadata: dict[str, str] = field(default_factory=dict)


def save_checkpoint(path: str | os.PathLike, ckpt: Checkpoint) -> None:
    """Write ``ckpt`` to ``path`` atomically (temp file in the same directory + fsync + rename)."""
    path = Path(path)
    tensors = {name: np.ascontiguousarray(v, np.float32) for name, v in ckpt.params.items()}
    for prefix, moments in zip(MOMENTS, (ckpt.adam_m, ckpt.adam_v), strict=True):
        tensors.update({prefix + name: np.ascontiguousarray(v, np.float32) for name, v in moments.items()})
    meta = {**ckpt.metadata, "format": FORMAT, "step": str(int(ckpt.step))}
    data = save(tensors, metadata=meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` (or by Meganeura)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata() or {})
    tensors = load_file(str(path))
    ckpt = Checkpoint({}, step=int(meta.pop("step", "0")), metadata=meta)
    for name, v in tensors.items():
        if name.startswith(MOMENTS[0]):
            ckpt.adam_m[name[len(MOMENTS[0]) :]] = v
        elif name.startswith(MOMENTS[1]):
            ckpt.adam_v[name[len(MOMENTS[1]) :]] = v
        else:
            ckpt.params[name] = v
    return ckpt


def check_compatible(ckpt: Checkpoint, expected: Mapping[str, tuple[int, ...]], what: str) -> None:
    """Raise ``ValueError`` listing every missing, unexpected or mis-shaped parameter."""
    problems = []
    for name, shape in expected.items():
        if name not in ckpt.params:
            problems.append(f"missing {name} {list(shape)}")
        elif tuple(ckpt.params[name].shape) != tuple(shape):
            problems.append(f"{name}: checkpoint has {list(ckpt.params[name].shape)}, the graph has {list(shape)}")
    problems += [f"unexpected {name} {list(v.shape)}" for name, v in ckpt.params.items() if name not in expected]
    for kind, moments in (("adam_m", ckpt.adam_m), ("adam_v", ckpt.adam_v)):
        for name, v in moments.items():
            if name in expected and tuple(v.shape) != tuple(expected[name]):
                problems.append(f"{kind}.{name}: checkpoint has {list(v.shape)}, the graph has {list(expected[name])}")
    if problems:
        raise ValueError(f"{what}: the checkpoint does not match this graph:\n  " + "\n  ".join(problems))
