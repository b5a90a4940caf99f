"""Training checkpoints in Meganeura's safetensors layout.

- every parameter under its own name, F32;
- Adam moments as ``adam_m.<name>`` and ``adam_v.<name>`` (absent for SGD);
- metadata (strings, as safetensors requires): ``step`` (optimizer steps taken), ``format``
  (``meganeura-checkpoint-2``), the optimizer kind and ``tensors_sha256``, a SHA-256 of every
  tensor (name, shape and bytes, in name order) and of the other metadata entries, which
  :func:`load_checkpoint` verifies.

Writing is atomic (:func:`~meganeura_onnx.runtime.safetensors_file.write_atomic`): a crash at any
point leaves either the previous checkpoint or the new one, never a torn file, and temp files of
killed writers are removed by the next save. Reading validates the header, the metadata, the
checksum, every dtype and the Adam moments before returning anything. Never pickle.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from safetensors.numpy import save

from .safetensors_file import SafetensorsError, read_header, write_atomic

FORMAT = "meganeura-checkpoint-2"
UNCHECKED_FORMATS = ("meganeura-checkpoint-1",)  # written before checksums: read without one
MOMENTS = ("adam_m.", "adam_v.")
CHECKSUM_KEY = "tensors_sha256"


@dataclass
class Checkpoint:
    """Parameters by name, Adam moments by parameter name, and the step count."""

    params: dict[str, np.ndarray]
    adam_m: dict[str, np.ndarray] = field(default_factory=dict)
    adam_v: dict[str, np.ndarray] = field(default_factory=dict)
    step: int = 0
    metadata: dict[str, str] = field(default_factory=dict)


def tensors_sha256(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> str:
    """SHA-256 of every tensor's name, shape and float32 bytes in name order, then of the metadata
    entries (sorted): independent of the file's layout, so any reader can recompute it."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        v = np.ascontiguousarray(tensors[name], np.float32)
        h.update(f"{name}|{list(v.shape)}|".encode())
        h.update(v.reshape(-1).view(np.uint8))
    h.update(json.dumps(sorted((metadata or {}).items())).encode())
    return h.hexdigest()


def save_checkpoint(path: str | os.PathLike, ckpt: Checkpoint) -> None:
    """Write ``ckpt`` to ``path`` atomically (temp file in the same directory + fsync + rename)."""
    step = ckpt.step
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"save_checkpoint: step must be a non-negative int, got {step!r}")
    tensors = {name: np.ascontiguousarray(v, np.float32) for name, v in ckpt.params.items()}
    for prefix, moments in zip(MOMENTS, (ckpt.adam_m, ckpt.adam_v), strict=True):
        tensors.update({prefix + name: np.ascontiguousarray(v, np.float32) for name, v in moments.items()})
    meta = {k: v for k, v in ckpt.metadata.items() if k != CHECKSUM_KEY}
    meta.update(format=FORMAT, step=str(int(step)))
    meta[CHECKSUM_KEY] = tensors_sha256(tensors, meta)
    write_atomic(path, save(tensors, metadata=meta))


def _checked_metadata(path: object, meta: dict[str, str]) -> tuple[int, dict[str, str]]:
    step_text = meta.pop("step", "0")
    if not step_text.isascii() or not step_text.isdigit():
        raise SafetensorsError(f"{path}: metadata 'step' must be a non-negative integer, got {step_text!r}")
    fmt = meta.get("format", FORMAT)
    if fmt != FORMAT and fmt not in UNCHECKED_FORMATS:
        raise SafetensorsError(f"{path}: metadata 'format' is {fmt!r}, this reader knows {[FORMAT, *UNCHECKED_FORMATS]}")
    return int(step_text), meta


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` (or by Meganeura), validated whole.

    Raises ``SafetensorsError`` (a ``ValueError``) naming the file and the tensor for a malformed
    header, a non-F32 tensor, a bad ``step``/``format``, Adam moments without their twin or of
    another shape than their parameter, negative second moments, or a checksum that is missing or
    does not match (files without a ``format``, e.g. Meganeura's own, and ``meganeura-checkpoint-1``
    files have none and are read unchecked).
    """
    header = read_header(path)
    meta = dict(header.metadata)
    want = meta.pop(CHECKSUM_KEY, None)
    signed = dict(meta)
    step, meta = _checked_metadata(path, meta)
    for name, info in header.tensors.items():
        if info.dtype != "F32":
            raise SafetensorsError(f"{path}: tensor {name!r} is {info.dtype}; checkpoint tensors are F32")
    tensors = {name: header.read(name) for name in header.tensors}
    if want is None and meta.get("format") == FORMAT:
        raise SafetensorsError(f"{path}: metadata '{CHECKSUM_KEY}' is missing (every {FORMAT} file has one)")
    if want is not None and tensors_sha256(tensors, signed) != want:
        raise SafetensorsError(f"{path}: the tensor data does not match the checksum in its metadata (the file was modified or damaged)")
    ckpt = Checkpoint({}, step=step, metadata=meta)
    for name, v in tensors.items():
        if name.startswith(MOMENTS[0]):
            ckpt.adam_m[name[len(MOMENTS[0]) :]] = v
        elif name.startswith(MOMENTS[1]):
            ckpt.adam_v[name[len(MOMENTS[1]) :]] = v
        else:
            ckpt.params[name] = v
    _check_moments(path, ckpt)
    return ckpt


def _check_moments(path: object, ckpt: Checkpoint) -> None:
    for name in sorted(set(ckpt.adam_m) ^ set(ckpt.adam_v)):
        have, lacks = ("adam_m", "adam_v") if name in ckpt.adam_m else ("adam_v", "adam_m")
        raise SafetensorsError(f"{path}: tensor '{have}.{name}' has no '{lacks}.{name}' twin")
    for name, m in ckpt.adam_m.items():
        if name not in ckpt.params:
            raise SafetensorsError(f"{path}: tensor 'adam_m.{name}' belongs to no parameter of the checkpoint")
        for kind, v in (("adam_m", m), ("adam_v", ckpt.adam_v[name])):
            if v.shape != ckpt.params[name].shape:
                raise SafetensorsError(
                    f"{path}: tensor '{kind}.{name}' has shape {list(v.shape)}, its parameter {list(ckpt.params[name].shape)}"
                )
        if (ckpt.adam_v[name] < 0).any():
            raise SafetensorsError(f"{path}: tensor 'adam_v.{name}' has negative values (a second moment is >= 0)")


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
