"""A CPU session's parameters side by side in one block of host memory advised for 2 MB pages.

A decode step streams every weight once per token. With 4 KB pages the CPU's stream prefetchers stop
at every page boundary and each page costs a TLB walk; Linux backs memory with transparent huge
pages (2 MB) in its default ``madvise`` mode only where ``madvise(MADV_HUGEPAGE)`` asked for them,
and numpy asks only for arrays of 4 MB and more (a SmolLM2-135M layer's weights are 0.4-3.5 MB). One
advised block for all of them: SmolLM2-135M's decode on one thread of the 2-core VM took 37-41 ms of
CPU per token against 44-49 ms with the weights in separate numpy arrays.
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping

import numpy as np

ALIGN = 64
"""Bytes each array's start is aligned to (a cache line; the kernels' vector loads need less)."""


def huge_page_copies(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """C-ordered copies of ``arrays`` (same dtypes and shapes) placed in one anonymous private
    mapping advised for transparent huge pages, each at a multiple of :data:`ALIGN`; each copy's
    ``base`` chain keeps the mapping alive (it is unmapped when the last copy is freed). Where the
    platform has no ``MADV_HUGEPAGE`` (not Linux), plain numpy copies."""
    offsets, total = {}, 0
    for name, arr in arrays.items():
        offsets[name] = total
        total += -(-arr.nbytes // ALIGN) * ALIGN
    if total == 0 or not hasattr(mmap, "MADV_HUGEPAGE") or not hasattr(mmap, "MAP_PRIVATE"):
        return {name: np.array(arr, order="C", copy=True) for name, arr in arrays.items()}
    # Private anonymous memory (MAP_SHARED anonymous memory is shmem, which THP's default leaves alone).
    block = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    block.madvise(mmap.MADV_HUGEPAGE)
    raw = np.frombuffer(block, np.uint8)
    out = {}
    for name, arr in arrays.items():
        start = offsets[name]
        view = raw[start : start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
        view[...] = arr
        out[name] = view
    return out
