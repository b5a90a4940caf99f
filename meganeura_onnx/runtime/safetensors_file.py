"""The one validator of safetensors headers, used by every reader of the project (training
checkpoints, Hugging Face weights), and the atomic file write shared by every writer.

A safetensors file is ``u64 little-endian header length N``, ``N`` bytes of JSON, then the tensor
data. :func:`read_header` checks, before any tensor is read: the length fits the file; the header
is UTF-8 JSON and an object; ``__metadata__`` (if any) maps strings to strings; every tensor entry
has a known ``dtype``, a ``shape`` of non-negative ints, ``data_offsets`` ``[begin, end]`` inside the
data section whose size is exactly ``prod(shape) * itemsize``; no two tensors overlap. Every error
is a :class:`SafetensorsError` (a ``ValueError``) naming the file and the tensor.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
"""Bytes per element of every dtype the safetensors format defines (and this project reads)."""

NUMPY_DTYPE = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "?"}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library's own limit


class SafetensorsError(ValueError):
    """A safetensors file that is malformed or does not hold what the reader needs."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # byte offsets into the data section
    end: int


@dataclass(frozen=True)
class Header:
    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int  # file offset of the data section

    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a numpy array of its own dtype (BF16 as raw ``uint16`` bits)."""
        info = self.tensors[name]
        if info.dtype not in NUMPY_DTYPE:
            raise SafetensorsError(f"{self.path}: tensor {name!r} has dtype {info.dtype}, which this reader does not convert")
        count = math.prod(info.shape)
        if count == 0:
            return np.zeros(info.shape, NUMPY_DTYPE[info.dtype])
        arr = np.fromfile(self.path, dtype=NUMPY_DTYPE[info.dtype], count=count, offset=self.data_start + info.begin)
        if arr.size != count:  # the file shrank since the header was read
            raise SafetensorsError(f"{self.path}: tensor {name!r} is truncated ({arr.size} of {count} elements)")
        return arr.reshape(info.shape)


def _fail(path: Path, what: str) -> SafetensorsError:
    return SafetensorsError(f"{path} is not a valid safetensors file: {what}")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _tensor_info(path: Path, name: str, entry: object, data_bytes: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _fail(path, f"tensor {name!r}: expected an object with dtype/shape/data_offsets, got {type(entry).__name__}")
    missing = {"dtype", "shape", "data_offsets"} - set(entry)
    if missing:
        raise _fail(path, f"tensor {name!r}: missing {sorted(missing)}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in ITEMSIZE:
        raise _fail(path, f"tensor {name!r}: unknown dtype {dtype!r} (known: {sorted(ITEMSIZE)})")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise _fail(path, f"tensor {name!r}: shape must be a list of non-negative ints, got {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise _fail(path, f"tensor {name!r}: data_offsets must be [begin, end] ints, got {offsets!r}")
    begin, end = offsets
    if not 0 <= begin <= end <= data_bytes:
        raise _fail(path, f"tensor {name!r}: data_offsets {offsets} lie outside the data section of {data_bytes} bytes")
    want = math.prod(shape) * ITEMSIZE[dtype]
    if end - begin != want:
        raise _fail(path, f"tensor {name!r}: {dtype} {shape} needs {want} bytes, data_offsets {offsets} give {end - begin}")
    return TensorInfo(dtype, tuple(shape), begin, end)


def read_header(path: str | os.PathLike) -> Header:
    """The validated header of the safetensors file at ``path`` (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no safetensors file at {path}")
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise _fail(path, f"{size} bytes, shorter than the 8-byte header length")
        n = int.from_bytes(raw, "little")
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise _fail(path, f"header length {n} exceeds the file ({size} bytes) or the {MAX_HEADER_BYTES}-byte limit")
        text = f.read(n)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(path, f"the header is not UTF-8 JSON ({e})") from e
    if not isinstance(header, dict):
        raise _fail(path, f"the header must be a JSON object, got {type(header).__name__}")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise _fail(path, f"__metadata__ must map strings to strings, got {metadata!r:.200}")
    data_bytes = size - 8 - n
    tensors = {name: _tensor_info(path, name, entry, data_bytes) for name, entry in header.items()}
    spans = sorted((t.begin, t.end, name) for name, t in tensors.items() if t.end > t.begin)
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:], strict=False):
        if begin_b < end_a:
            raise _fail(path, f"tensors {a!r} and {b!r} overlap in the data section")
    return Header(path, tensors, metadata, 8 + n)


# ---- writing ------------------------------------------------------------------------------------

_TEMP = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)\.[^.]+\.tmp$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete temp files of ``path`` left by writers that were killed (their process is gone)."""
    removed = []
    if not path.parent.is_dir():
        return removed
    for p in path.parent.iterdir():
        m = _TEMP.match(p.name)
        if m and m["target"] == path.name and int(m["pid"]) != os.getpid() and not _pid_alive(int(m["pid"])):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def write_atomic(path: str | os.PathLike, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old file or the new one, never a torn one.

    A temp file in the same folder (``.<name>.<pid>.<random>.tmp``, unique per writer) is written,
    fsynced and renamed over ``path``; it is removed if anything fails, and temp files of writers
    that were killed (``kill -9``: no cleanup ran) are removed by the next write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
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
