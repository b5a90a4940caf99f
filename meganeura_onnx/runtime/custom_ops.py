"""Locate and register the ``com.meganeura`` ONNX Runtime custom-op library.

Two shared libraries are built from ``custom_ops/`` (``custom_ops/CMakeLists.txt``): ``pip install``
puts them into the package (``meganeura_onnx/_lib/``), ``make kernels`` into ``custom_ops/build/`` of
a source checkout.

* ``libmeganeura_ops_cpu.so``  -- CPU kernels only; loads on any machine.
* ``libmeganeura_ops_cuda.so`` -- CPU *and* CUDA kernels (CUDA runtime linked
  statically); use it with ``CUDAExecutionProvider``.

Models exported by meganeura-onnx carry a model-local ONNX function for every
custom op, so they run without the library (ORT inlines the function body);
with the library registered, ORT runs the kernel instead.

Any ONNX Runtime user can use the library directly::

    so = onnxruntime.SessionOptions()
    so.register_custom_ops_library(custom_op_library("cpu"))
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["custom_op_library", "register", "library_candidates"]

_NAMES = {
    "cpu": "libmeganeura_ops_cpu.so",
    "cuda": "libmeganeura_ops_cuda.so",
}


def _normalise_device(device: str) -> str:
    d = str(device).lower()
    if d in ("cpu", "cpuexecutionprovider"):
        return "cpu"
    if d in ("cuda", "gpu", "cudaexecutionprovider") or d.startswith("cuda:"):
        return "cuda"
    raise ValueError(f"custom_op_library: device must be 'cpu' or 'cuda', got {device!r}")


def library_candidates(device: str = "cpu") -> list[Path]:
    """The paths searched for the library of ``device``, in order.

    1. ``meganeura_onnx/_lib/``: the copy that ``pip install`` built into the installed package;
    2. ``custom_ops/build/`` of the source checkout this package is imported from (``make kernels``
       builds there; an editable install has no copy of its own).
    """
    name = _NAMES[_normalise_device(device)]
    pkg = Path(__file__).resolve().parent.parent  # .../meganeura_onnx
    candidates = [pkg / "_lib" / name]
    checkout = pkg.parent
    if (checkout / "custom_ops" / "CMakeLists.txt").is_file():
        candidates.append(checkout / "custom_ops" / "build" / name)
    return candidates


def custom_op_library(device: str = "cpu") -> str | None:
    """Absolute path of the built custom-op library for ``device`` ('cpu' or 'cuda'), or None.

    The 'cuda' library also contains the CPU kernels, so one registration serves a
    session whose providers are ``["CUDAExecutionProvider", "CPUExecutionProvider"]``.
    """
    for path in library_candidates(device):
        if path.is_file():
            return str(path)
    return None


def register(session_options, device: str = "cpu") -> str | None:
    """Register the library for ``device`` on an ``onnxruntime.SessionOptions``.

    Returns the registered library's path (truthy), or None when none is built (the model
    then runs its ONNX function bodies). Registration errors propagate.
    """
    path = custom_op_library(device)
    if path is None:
        return None
    session_options.register_custom_ops_library(os.fspath(path))
    return path
