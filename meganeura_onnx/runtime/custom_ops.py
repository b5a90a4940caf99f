"""Finding and registering the com.meganeura custom-op library (built by ``make`` into custom_ops/build)."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

_NAMES = {"cpu": "libmeganeura_ops_cpu.so", "cuda": "libmeganeura_ops_cuda.so"}


def _search_dirs() -> list[Path]:
    pkg = Path(__file__).resolve().parent.parent
    return [pkg / "_lib", pkg.parent / "custom_ops" / "build"]


def custom_op_library(device: str = "cpu") -> str | None:
    """Absolute path of the built custom-op library for ``device`` ("cpu" or "cuda"), or None.

    Any ONNX Runtime user can register it: ``so.register_custom_ops_library(path)``.
    """
    if device not in _NAMES:
        raise ValueError(f"custom_op_library: device must be 'cpu' or 'cuda', got {device!r}")
    for d in _search_dirs():
        p = d / _NAMES[device]
        if p.is_file():
            return str(p)
    return None


def register(options: ort.SessionOptions, device: str = "cpu") -> str | None:
    """Register the library for ``device`` in ``options``; returns its path, or None when not built."""
    path = custom_op_library(device)
    if path is not None:
        options.register_custom_ops_library(path)
    return path
