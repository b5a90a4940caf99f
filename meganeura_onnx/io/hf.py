"""Hugging Face safetensors weights -> parameters by name.

Names match exactly, because ``meganeura_onnx.nn`` layers use HF names and HF's storage layout
(a Linear weight stays ``[out, in]`` and is applied with ``matmul_bt``), so nothing is transposed.
Handled on the way:

- dtypes: F32 as is; F16, BF16 and F64 are converted to float32 (BF16 by widening the bits, as
  numpy has no bfloat16).
- tied embeddings: a graph that wants ``lm_head.weight`` gets ``model.embed_tokens.weight`` when the
  checkpoint has no ``lm_head.weight`` (HF omits it when ``tie_word_embeddings`` is true).
- buffers that HF writes but that are not parameters (``*.position_ids``, ``*.rotary_emb.inv_freq``)
  are ignored.

Missing, unexpected and mis-shaped tensors are collected and reported together: one
:class:`WeightLoadError` in strict mode, one warning otherwise. Only the safetensors format is read
(never pickle).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..graph import Graph
from ..ir import TensorType
from ..runtime.safetensors_file import read_header
from ..runtime.session import Session
from ..runtime.values import parameter_array

TIED = {"lm_head.weight": "model.embed_tokens.weight"}
"""Parameter -> checkpoint tensor it falls back to when the checkpoint lacks it (tied weights)."""

IGNORED = (r"(^|\.)position_ids$", r"(^|\.)rotary_emb\.inv_freq$", r"(^|\.)masked_bias$", r"(^|\.)attn\.bias$")
"""Checkpoint tensors that are buffers, not parameters: never reported as unexpected."""

_FLOAT_DTYPES = ("F32", "F16", "F64", "BF16")


class WeightLoadError(ValueError):
    """The checkpoint does not fit the graph; ``report`` lists every problem at once."""

    def __init__(self, message: str, report: LoadReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class LoadReport:
    """What a load matched and what it could not."""

    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    """(name, shape the graph expects, shape in the checkpoint)."""
    tied: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def describe(self, source: str, limit: int = 8) -> str:
        def few(items: list[str]) -> str:
            more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
            return ", ".join(items[:limit]) + more

        lines = [f"weights in {source} do not fit the model:"]
        if self.missing:
            lines.append(f"  {len(self.missing)} missing (the model has them, the checkpoint does not): {few(self.missing)}")
        if self.unexpected:
            lines.append(f"  {len(self.unexpected)} unexpected (in the checkpoint, not in the model): {few(self.unexpected)}")
        if self.mismatched:
            shapes = [f"{n} expects {list(want)} got {list(got)}" for n, want, got in self.mismatched]
            lines.append(f"  {len(self.mismatched)} with the wrong shape: {few(shapes)}")
        if self.missing and not self.loaded and not self.mismatched:
            lines.append("  no tensor name matched at all: these weights are probably for another architecture")
        return "\n".join(lines)


def read_safetensors(path: str | os.PathLike, names: Iterable[str] | None = None, *, mapped: bool = False) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file as float32 numpy arrays (all of them, or only ``names``).

    The header is validated first (:func:`~meganeura_onnx.runtime.safetensors_file.read_header`:
    errors name the file and the tensor). F32/F16/F64 are read as stored; BF16 (which numpy cannot
    represent) is widened to float32 bit-exactly. Integer tensors are skipped (never parameters).
    ``mapped``: F32 tensors are read-only memory maps of the file instead of copies (an exporter then
    copies their bytes once, file to file).
    """
    header = read_header(path)
    wanted = set(header.tensors) if names is None else set(names) & set(header.tensors)
    out: dict[str, np.ndarray] = {}
    for name in sorted(wanted):
        dtype = header.tensors[name].dtype
        if dtype not in _FLOAT_DTYPES:
            continue  # integer buffers (position_ids, ...) are never parameters
        info = header.tensors[name]
        if mapped and dtype == "F32" and info.end > info.begin:
            out[name] = np.memmap(path, dtype="<f4", mode="r", offset=header.data_start + info.begin, shape=info.shape)
            continue
        arr = header.read(name)
        if dtype == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = np.ascontiguousarray(arr, dtype=np.float32)
    return out


def checkpoint_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor in a safetensors file, without reading the data."""
    return {name: info.shape for name, info in read_header(path).tensors.items()}


def match(
    expected: Mapping[str, tuple[int, ...]],
    available: Mapping[str, tuple[int, ...]],
    *,
    aliases: Mapping[str, str] = TIED,
    ignore: Iterable[str] = IGNORED,
) -> tuple[dict[str, str], LoadReport]:
    """Pair every expected parameter with a checkpoint tensor: ``(param -> tensor name, report)``."""
    patterns = [re.compile(p) for p in ignore]
    report = LoadReport()
    pairs: dict[str, str] = {}
    for name, shape in expected.items():
        src = name if name in available else aliases.get(name)
        if src is None or src not in available:
            report.missing.append(name)
        elif tuple(available[src]) != tuple(shape):
            report.mismatched.append((name, tuple(shape), tuple(available[src])))
        else:
            pairs[name] = src
            (report.tied if src != name else report.loaded).append(name)
    used = set(pairs.values()) | {n for n, _, _ in report.mismatched}
    report.unexpected = [n for n in available if n not in used and n not in expected and not any(p.search(n) for p in patterns)]
    if not report.loaded and report.tied:
        report.loaded, report.tied = report.tied, []
    return pairs, report


def _resolve(
    expected: Mapping[str, tuple[int, ...]], path: str | os.PathLike, strict: bool, ignore: Iterable[str]
) -> tuple[dict[str, np.ndarray], LoadReport]:
    available = checkpoint_shapes(path)
    pairs, report = match(expected, available, ignore=tuple(IGNORED) + tuple(ignore))
    if not report.ok:
        message = report.describe(str(path))
        if strict:
            raise WeightLoadError(message, report)
        warnings.warn(message + "\n  (strict=False: loading what matches)", stacklevel=3)
    tensors = read_safetensors(path, set(pairs.values()))
    unreadable = sorted(name for name, src in pairs.items() if src not in tensors)
    if unreadable:  # an integer tensor where a float parameter belongs
        raise WeightLoadError(f"{path}: tensors {unreadable} are not floating point (F32/F16/BF16/F64)", report)
    return {name: tensors[src] for name, src in pairs.items()}, report


def hf_parameters(graph: Graph, path: str | os.PathLike, *, strict: bool = True, ignore: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Parameter name -> float32 array for ``graph`` from a HF safetensors file, ready for
    ``build_inference_session(graph, parameters=...)``. ``ignore``: extra regexes of checkpoint
    tensors the model deliberately does not use (e.g. BERT's ``pooler``)."""
    expected = {name: ty.shape for name, ty in graph.parameters().items()}
    values, _ = _resolve(expected, path, strict, ignore)
    return values


OPTIMIZER_STATE = (r"^adam_m\.", r"^adam_v\.")
"""Tensors of our training checkpoints that are optimizer state, not parameters."""


def parameters_from_file(
    graph: Graph, path: str | os.PathLike, *, allow_missing: bool = False, ignore: Iterable[str] = ()
) -> tuple[dict[str, np.ndarray], LoadReport]:
    """Parameters of ``graph`` from a safetensors file: a Hugging Face checkpoint (tied weights and
    HF buffers handled as in :func:`hf_parameters`) or our training checkpoint (Adam state skipped).

    Every unexpected or mis-shaped tensor, and every missing parameter unless ``allow_missing``, is
    listed in one :class:`WeightLoadError`. With ``allow_missing`` the report's ``missing`` names
    the parameters the file lacks (the caller gives them a default). Only the tensors used are read;
    F32 ones are read-only memory maps of the file (no copy until they are written somewhere).
    """
    expected = {name: ty.shape for name, ty in graph.parameters().items()}
    pairs, report = match(expected, checkpoint_shapes(path), ignore=tuple(IGNORED) + OPTIMIZER_STATE + tuple(ignore))
    if report.unexpected or report.mismatched or (report.missing and not allow_missing):
        raise WeightLoadError(report.describe(str(path)), report)
    tensors = read_safetensors(path, set(pairs.values()), mapped=True)
    return {name: tensors[src] for name, src in pairs.items()}, report


def load_safetensors(session: Session, path: str | os.PathLike, strict: bool = True, *, ignore: Iterable[str] = ()) -> LoadReport:
    """Upload the weights of a HF safetensors file into ``session``'s parameters, by name.

    Strict: every parameter must be found with its shape and every checkpoint tensor used, else one
    :class:`WeightLoadError` lists all the problems. ``strict=False`` warns and loads what matches.
    """
    expected = {name: session.parameter_shape(name) for name in session.parameter_names()}
    values, report = _resolve(expected, path, strict, ignore)
    # Every value checked (shape, finite) before the first is written: a bad tensor loads nothing.
    types = {name: TensorType(tuple(shape)) for name, shape in expected.items()}
    checked = {name: parameter_array(name, value, types[name], f"load_safetensors({str(path)!r})") for name, value in values.items()}
    for name, value in checked.items():
        session.set_parameter(name, value)
    return report
