"""Reading and writing onnxruntime-training's checkpoint file (a flatbuffer, file identifier ``ODTC``).

``onnxruntime.training.api`` exposes parameters but not the optimizer state (Adam moments, step), so
moving a run between this backend and the native engine's safetensors checkpoints goes through the
file itself: ORT saves its state with ``include_optimizer_state=True``, :func:`read_ort_checkpoint`
parses it; :func:`write_ort_checkpoint` builds a file ORT loads, with the moments and step in place.
The schema classes ship inside onnxruntime (``tools/ort_format_model/ort_flatbuffers_py``), and the
``flatbuffers`` runtime is one of onnxruntime-training's own dependencies.

Layout written by ORT 1.19 (checkpoint version 2), which is what this module reads and writes:
module state = one F32 tensor per trainable parameter; one optimizer group ``group0`` with ``step``,
``initial_learning_rate`` and, per parameter, momentums ``momentum0`` (Adam m) and ``momentum1``
(Adam v). SGD groups have no momentums.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CHECKPOINT_VERSION = 2
FILE_IDENTIFIER = b"ODTC"
FLOAT = 1  # TensorDataType.FLOAT (the ONNX enum value)
GROUP = "group0"
MOMENTS = ("momentum0", "momentum1")


@dataclass
class OrtCheckpoint:
    """Contents of an ORT training checkpoint: parameters, Adam moments (m, v) by name, step and lr."""

    parameters: dict[str, np.ndarray]
    moments: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    step: int = 0
    learning_rate: float = 0.0
    has_optimizer_group: bool = False


def _fbs():
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py import fbs

    return fbs


def _tensor_array(t, size: int) -> np.ndarray:
    name = t.Name().decode()
    if t.DimsLength() > 16 or t.RawDataLength() > size:  # lengths read from a damaged file
        raise ValueError(f"tensor {name!r} claims {t.DimsLength()} dims and {t.RawDataLength()} bytes in a {size}-byte file")
    if t.DataType() != FLOAT:
        raise ValueError(f"tensor {name!r} has data type {t.DataType()}, only FLOAT is supported")
    dims = [int(d) for d in t.DimsAsNumpy()] if t.DimsLength() else []
    if any(d < 0 for d in dims):
        raise ValueError(f"tensor {name!r} has a negative dimension {dims}")
    raw = t.RawDataAsNumpy().tobytes() if t.RawDataLength() else b""
    if len(raw) != 4 * int(np.prod(dims, dtype=np.int64)):
        raise ValueError(f"tensor {name!r} of shape {dims} needs {4 * int(np.prod(dims, dtype=np.int64))} bytes, has {len(raw)}")
    return np.frombuffer(raw, dtype="<f4").reshape(dims).astype(np.float32)


def read_ort_checkpoint(path: str | os.PathLike) -> OrtCheckpoint:
    """Parse a checkpoint written by ``CheckpointState.save_checkpoint`` (or :func:`write_ort_checkpoint`).

    A malformed file (truncated, not a checkpoint, inconsistent tensors) raises ``ValueError``
    naming the file; nothing is returned half-read."""
    buf = Path(path).read_bytes()
    if len(buf) < 8 or buf[4:8] != FILE_IDENTIFIER:
        raise ValueError(f"{path}: not an onnxruntime-training checkpoint (file identifier {buf[4:8]!r}, expected {FILE_IDENTIFIER!r})")
    try:
        return _parse(_fbs(), buf)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e
    except (struct.error, IndexError, KeyError, TypeError, UnicodeDecodeError, AttributeError, OverflowError) as e:
        # flatbuffers reads offsets from the file: a damaged one points past the buffer
        raise ValueError(f"{path}: malformed onnxruntime-training checkpoint ({type(e).__name__}: {e})") from e


def _parse(fbs, buf: bytes) -> OrtCheckpoint:
    ck = fbs.Checkpoint.Checkpoint.GetRootAs(buf, 0)
    ms = ck.ModuleState()
    if ms is None:
        raise ValueError("no module state")
    if ms.HasExternalData() or ms.IsNominalState():
        raise ValueError("nominal checkpoints and external data are not supported here")
    size = len(buf)
    counts = [ms.RequiresGradParamsLength(), ck.OptimizerGroupsLength()]
    if any(c > size // 4 for c in counts):
        raise ValueError(f"vector lengths {counts} cannot fit in a {size}-byte file")
    params = {}
    for i in range(ms.RequiresGradParamsLength()):
        t = ms.RequiresGradParams(i)
        params[t.Name().decode()] = _tensor_array(t, size)
    out = OrtCheckpoint(params)
    if ck.OptimizerGroupsLength() > 1:
        raise ValueError(f"{ck.OptimizerGroupsLength()} optimizer groups; this backend writes one")
    if ck.OptimizerGroupsLength() == 1:
        group = ck.OptimizerGroups(0)
        out.has_optimizer_group = True
        out.step = int(group.Step())
        if out.step < 0:
            raise ValueError(f"optimizer step {out.step} is negative")
        out.learning_rate = float(group.InitialLearningRate())
        if group.OptimizerStatesLength() > size // 4:
            raise ValueError(f"{group.OptimizerStatesLength()} optimizer states cannot fit in a {size}-byte file")
        for j in range(group.OptimizerStatesLength()):
            ps = group.OptimizerStates(j)
            if ps.MomentumsLength() > 2:
                raise ValueError(f"optimizer state {j} has {ps.MomentumsLength()} momentums, Adam has 2")
            moments = {ps.Momentums(k).Name().decode(): _tensor_array(ps.Momentums(k), size) for k in range(ps.MomentumsLength())}
            if moments:
                name = ps.ParamName().decode()
                if set(moments) != set(MOMENTS) or name not in params or any(v.shape != params[name].shape for v in moments.values()):
                    raise ValueError(f"parameter {name!r}: expected momentums {MOMENTS} of its shape, got {sorted(moments)}")
                out.moments[name] = (moments[MOMENTS[0]], moments[MOMENTS[1]])
    return out


def write_ort_checkpoint(path: str | os.PathLike, ck: OrtCheckpoint) -> None:
    """Write ``ck`` in ORT's format. With ``has_optimizer_group`` the file carries the optimizer group
    (step, learning rate, moments for every parameter in ``ck.moments``), and an ``Optimizer`` built
    on the loaded state resumes from it instead of starting at zero."""
    import flatbuffers

    fbs = _fbs()
    b = flatbuffers.Builder(1024 + sum(v.nbytes for v in ck.parameters.values()) * 3)

    def tensor(name: str, value: np.ndarray) -> int:
        value = np.ascontiguousarray(value, dtype="<f4")
        name_off = b.CreateString(name)
        dims_off = b.CreateNumpyVector(np.asarray(value.shape, dtype=np.int64))
        raw_off = b.CreateNumpyVector(np.frombuffer(value.tobytes(), dtype=np.uint8))
        T = fbs.Tensor
        T.TensorStart(b)
        T.TensorAddName(b, name_off)
        T.TensorAddDims(b, dims_off)
        T.TensorAddDataType(b, FLOAT)
        T.TensorAddRawData(b, raw_off)
        return T.TensorEnd(b)

    def vector(start, offsets: list[int]) -> int:
        start(b, len(offsets))
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    MS = fbs.ModuleState
    param_offs = [tensor(n, v) for n, v in ck.parameters.items()]
    params_vec = vector(MS.ModuleStateStartRequiresGradParamsVector, param_offs)
    frozen_vec = vector(MS.ModuleStateStartFrozenParamsVector, [])
    MS.ModuleStateStart(b)
    MS.ModuleStateAddRequiresGradParams(b, params_vec)
    MS.ModuleStateAddFrozenParams(b, frozen_vec)
    module_state = MS.ModuleStateEnd(b)

    groups_vec = None
    if ck.has_optimizer_group:
        PS, OG = fbs.ParameterOptimizerState, fbs.OptimizerGroup
        state_offs = []
        for name, (m, v) in ck.moments.items():
            mom_vec = vector(PS.ParameterOptimizerStateStartMomentumsVector, [tensor(MOMENTS[0], m), tensor(MOMENTS[1], v)])
            name_off = b.CreateString(name)
            PS.ParameterOptimizerStateStart(b)
            PS.ParameterOptimizerStateAddParamName(b, name_off)
            PS.ParameterOptimizerStateAddMomentums(b, mom_vec)
            state_offs.append(PS.ParameterOptimizerStateEnd(b))
        states_vec = vector(OG.OptimizerGroupStartOptimizerStatesVector, state_offs)
        group_name = b.CreateString(GROUP)
        OG.OptimizerGroupStart(b)
        OG.OptimizerGroupAddGroupName(b, group_name)
        OG.OptimizerGroupAddStep(b, int(ck.step))
        OG.OptimizerGroupAddInitialLearningRate(b, float(ck.learning_rate))
        OG.OptimizerGroupAddOptimizerStates(b, states_vec)
        groups_vec = vector(fbs.Checkpoint.CheckpointStartOptimizerGroupsVector, [OG.OptimizerGroupEnd(b)])

    C = fbs.Checkpoint
    C.CheckpointStart(b)
    C.CheckpointAddVersion(b, CHECKPOINT_VERSION)
    C.CheckpointAddModuleState(b, module_state)
    if groups_vec is not None:
        C.CheckpointAddOptimizerGroups(b, groups_vec)
    b.Finish(C.CheckpointEnd(b), file_identifier=FILE_IDENTIFIER)
    from .safetensors_file import write_atomic

    write_atomic(path, bytes(b.Output()))
