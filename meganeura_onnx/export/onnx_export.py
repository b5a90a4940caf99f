"""Graph -> ``onnx.ModelProto``.

Standard ONNX wherever it expresses the op; ``com.meganeura`` nodes with model-local function
bodies for the custom ops. Every ONNX node's name starts with ``n<NodeId>_<op>/`` and its
doc_string names the Graph node, so a Netron view leads back to the program.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..ir import DType, GraphCore, NodeId
from ..ops import OPS
from ..ops.lowering import CUSTOM_DOMAIN, LoweringContext

DEFAULT_OPSET = 21
"""Portable default: loads in ORT 1.19 (the last onnxruntime-training) up to today's ORT."""
IR_VERSION = 10
"""ORT accepts IR <= 13 (1.31) and <= 10 (1.19); onnx 1.23 would default to 14."""
EXTERNAL_DATA_BYTES = 32 << 20
"""Parameter bytes above which ``export_onnx`` streams weights to a side file (protobuf caps at 2 GiB,
and serialising large weights through protobuf costs seconds)."""

ONNX_DTYPE = {DType.F32: TensorProto.FLOAT, DType.U32: TensorProto.UINT32}


@dataclass
class ExportSpec:
    """What becomes a graph input/output. Sessions use it to bind buffers by name."""

    inputs: list[str] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    state: dict[str, str] = field(default_factory=dict)
    """state input name -> the output carrying its next value (KV caches written by cache_write)."""
    inplace: set[str] = field(default_factory=set)
    """State inputs read by nothing but their cache_write: one buffer may serve as input and output
    when the in-place CacheWrite kernel runs."""


def state_pairs(graph: GraphCore) -> dict[str, NodeId]:
    """Input leaves written in place by an op (the op table's ``inplace_input``: ``cache_write``'s
    cache) -> the node holding their value after the step.

    A chain ``cache_write(.., cache_write(.., X, ..), ..)`` pairs X with the last write.
    """
    pairs: dict[str, NodeId] = {}
    final: dict[NodeId, NodeId] = {}
    for n in graph.nodes():
        written = OPS[n.op].written_input(n.attrs)
        if written is not None:
            k = OPS[n.op].inputs.index(written)
            src = final.get(n.inputs[k], n.inputs[k])
            leaf = graph.node(src)
            if leaf.op == "input":
                final[n.id] = src
                pairs[leaf.attrs["name"]] = n.id
    return pairs


def to_model(
    graph: GraphCore,
    *,
    opset: int | None = None,
    parameters: Mapping[str, np.ndarray] | None = None,
    params_as_inputs: bool = False,
    with_state: bool = False,
    extra_outputs: Mapping[str, NodeId] | None = None,
    model_name: str = "meganeura",
    deferred: dict[str, np.ndarray] | None = None,
    int64_indices: bool = False,
) -> tuple[onnx.ModelProto, ExportSpec]:
    """Lower ``graph`` to ONNX.

    ``parameters``: values for initializers (required unless ``params_as_inputs``).
    ``with_state``: expose each cache_write'd input's next value as an output ``<name>.next``.
    ``extra_outputs``: more named outputs (used by the training transform).
    ``deferred``: when given, parameter initializers are left without data (name, type and shape
    only) and their arrays are put in this dict, for :func:`save_model` to stream to the file.
    ``int64_indices``: U32 inputs are declared int64 in the file (token ids, masks and positions are
    int64 in the ONNX ecosystem's LLM files) and cast to uint32 on entry.
    """
    opset = DEFAULT_OPSET if opset is None else int(opset)
    if not 21 <= opset <= 24:
        raise ValueError(f"export: opset must be between 21 and 24, got {opset}")
    if not graph.outputs():
        raise ValueError("export: the graph has no outputs; call set_outputs([...]) first")
    ctx = LoweringContext(opset)
    ctx.graph = graph
    spec = ExportSpec()
    names, expands, g_inputs = _lower_nodes(
        graph, ctx, spec, parameters=parameters, params_as_inputs=params_as_inputs, deferred=deferred, int64_indices=int64_indices
    )

    outputs: list[tuple[str, NodeId]] = list(graph.named_outputs().items())
    if with_state:
        outputs += _state_outputs(graph, spec)
    outputs += list((extra_outputs or {}).items())
    _check_output_names([name for name, _ in outputs], spec.inputs + spec.parameters)
    _check_generated_names(ctx, [name for name, _ in outputs], spec.parameters)
    g_outputs = [_value_info(graph, name, nid) for name, nid in outputs]
    spec.outputs += [name for name, _ in outputs]
    _bind_outputs(ctx, [(name, names[nid]) for name, nid in outputs])
    _drop_unused(ctx, expands.values(), {o.name for o in g_outputs})
    _drop_folded_reshapes(ctx, {o.name for o in g_outputs})

    value_info = _declared(ctx)
    noted = {v.name for v in value_info}
    value_info += [v for v in _custom_output_types(graph, ctx, names, {o.name for o in g_outputs}) if v.name not in noted]
    onnx_graph = helper.make_graph(ctx.nodes, model_name, g_inputs, g_outputs, ctx.initializers, value_info=value_info)
    opsets = [helper.make_opsetid("", opset)]
    if ctx.functions:
        opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    model = helper.make_model(
        onnx_graph, opset_imports=opsets, functions=list(ctx.functions.values()), producer_name="meganeura-onnx", ir_version=IR_VERSION
    )
    model.doc_string = "Exported by meganeura-onnx from a Graph."
    helper.set_model_props(model, {"meganeura.parameters": json.dumps(spec.parameters), "meganeura.graph_nodes": str(len(graph))})
    return model, spec


def _value_info(graph: GraphCore, name: str, nid: NodeId, elem_type: int | None = None) -> onnx.ValueInfoProto:
    ty = graph.node(nid).ty
    # A symbolic dim is written as dim_param (its name, or the canonical expression "batch*seq").
    return helper.make_tensor_value_info(name, elem_type or ONNX_DTYPE[ty.dtype], list(ty.shape))


def _custom_output_types(
    graph: GraphCore, ctx: LoweringContext, names: Mapping[NodeId, str], graph_outputs: set[str]
) -> list[onnx.ValueInfoProto]:
    """Type and shape of every ``com.meganeura`` node output that a Graph node computes (not a graph
    output: those are declared already). ONNX's shape inference and ORT's cannot see through the
    custom ops to all of their outputs (ORT's kernels infer output 0 at most); declared, every
    output has its type for ``onnx.shape_inference``, ORT's memory planner and Netron."""
    custom = {o for n in ctx.nodes if n.domain == CUSTOM_DOMAIN for o in n.output if o and o not in graph_outputs}
    types: dict[str, set] = {}
    for nid, name in names.items():
        if name in custom:
            types.setdefault(name, set()).add(nid)
    infos = []
    for name, nids in types.items():
        if len({graph.node(nid).ty for nid in nids}) == 1:  # one Graph type per ONNX value
            infos.append(_value_info(graph, name, next(iter(nids))))
    return infos


def _lower_nodes(
    graph: GraphCore,
    ctx: LoweringContext,
    spec: ExportSpec,
    *,
    parameters: Mapping[str, np.ndarray] | None,
    params_as_inputs: bool,
    deferred: dict[str, np.ndarray] | None,
    int64_indices: bool,
) -> tuple[dict[NodeId, str], dict[NodeId, tuple[int, int]], list[onnx.ValueInfoProto]]:
    """Declares the graph's inputs and parameters (in ``spec``) and lowers every other node into
    ``ctx`` (see :func:`to_model` for the arguments). Returns the ONNX name of each node's value,
    the ``[start, end)`` range of ONNX nodes each ``broadcast_to`` lowered to, and the graph inputs."""
    names: dict[NodeId, str] = {}
    expands: dict[NodeId, tuple[int, int]] = {}
    g_inputs: list[onnx.ValueInfoProto] = []
    for n in graph.nodes():  # where lowerings read each symbolic size (Shape of the first input naming it)
        for axis, d in enumerate(n.ty.shape if n.op in ("input", "input_u32") else ()):
            if isinstance(d, str):
                ctx.symbols.setdefault(d, (n.attrs["name"], axis))
    for n in graph.nodes():
        if n.op == "input_u32" and int64_indices:
            names[n.id] = ctx.op("Cast", n.attrs["name"], to=TensorProto.UINT32)
            g_inputs.append(_value_info(graph, n.attrs["name"], n.id, TensorProto.INT64))
            spec.inputs.append(n.attrs["name"])
        elif n.op in ("input", "input_u32"):
            names[n.id] = n.attrs["name"]
            g_inputs.append(_value_info(graph, n.attrs["name"], n.id))
            spec.inputs.append(n.attrs["name"])
        elif n.op == "parameter":
            names[n.id] = n.attrs["name"]
            spec.parameters.append(n.attrs["name"])
            if params_as_inputs:
                g_inputs.append(_value_info(graph, n.attrs["name"], n.id))
            else:
                ctx.initializers.append(_parameter_initializer(n, parameters, deferred))
        elif n.op == "constant":
            names[n.id] = f"const_{n.id}"
            ctx.initializers.append(numpy_helper.from_array(n.attrs["value"].astype(np.float32), names[n.id]))
        else:
            ctx.prefix = f"n{n.id}_{n.op}/"
            ctx.doc = f"meganeura Graph node {n.id}: {n.op}({', '.join(map(str, n.inputs))}) -> {n.ty}"
            start = len(ctx.nodes)
            names[n.id] = OPS[n.op].lowering(ctx, n, *_operands(graph, n, names))
            if n.op == "broadcast_to":
                expands[n.id] = (start, len(ctx.nodes))
    ctx.prefix, ctx.doc = "", ""
    return names, expands, g_inputs


def _parameter_initializer(node, parameters: Mapping[str, np.ndarray] | None, deferred: dict[str, np.ndarray] | None) -> TensorProto:
    """The initializer of parameter ``node`` from ``parameters``; without data (its array put in
    ``deferred``) when ``deferred`` is given."""
    name = node.attrs["name"]
    if parameters is None or name not in parameters:
        raise ValueError(f"export: no value for parameter {name!r}")
    value = parameters[name]
    if not (isinstance(value, np.ndarray) and value.dtype == np.float32):  # memory maps stay maps
        value = np.asarray(value, dtype=np.float32)
    if value.shape != node.ty.shape:
        raise ValueError(f"export: parameter {name!r} has shape {list(value.shape)}, expected {list(node.ty.shape)}")
    if deferred is None:
        return numpy_helper.from_array(value, name)
    deferred[name] = value
    return TensorProto(name=name, data_type=TensorProto.FLOAT, dims=value.shape)


_BROADCASTING = frozenset({"add", "sub", "mul", "div"})  # their ONNX ops broadcast (multidirectional)


def _operands(graph: GraphCore, node, names: Mapping[NodeId, str]) -> list[str]:
    """The ONNX names of ``node``'s inputs. An operand of add/sub/mul/div that a ``broadcast_to``
    only repeats to the other operand's shape is passed un-repeated: ONNX broadcasting gives the
    same values without the Expand copy (an RMSNorm backward has three per layer)."""
    args = [names[i] for i in node.inputs]
    if node.op not in _BROADCASTING:
        return args
    for k in (0, 1):
        src, other = graph.node(node.inputs[k]), graph.node(node.inputs[1 - k])
        if src.op != "broadcast_to" or other.op == "broadcast_to" or other.ty.shape != node.ty.shape:
            continue
        inner, full = graph.node(src.inputs[0]).ty.shape, node.ty.shape
        if all(isinstance(d, int) for d in (*inner, *full)) and len(inner) <= len(full) and np.broadcast_shapes(inner, full) == tuple(full):
            args[k] = names[src.inputs[0]]
    return args


def _drop_unused(ctx: LoweringContext, ranges, graph_outputs: set[str]) -> None:
    """Remove the ONNX nodes of each of ``ranges`` (a broadcast_to's lowering, ``[start, end)`` in
    ``ctx.nodes``) when nothing outside the range reads them any more."""
    readers: dict[str, set[int]] = {}
    for j, node in enumerate(ctx.nodes):
        for i in node.input:
            readers.setdefault(i, set()).add(j)
    drop: set[int] = set()
    for start, end in ranges:
        outs = {o for node in ctx.nodes[start:end] for o in node.output}
        if not outs & graph_outputs and all(start <= j < end for o in outs for j in readers.get(o, ())):
            drop.update(range(start, end))
    if drop:
        freed = {i for j in drop for i in ctx.nodes[j].input}
        ctx.nodes[:] = [node for j, node in enumerate(ctx.nodes) if j not in drop]
        still = {i for node in ctx.nodes for i in node.input} | graph_outputs
        # their shape constants too (ORT would log each unused initializer it removes)
        ctx.initializers[:] = [t for t in ctx.initializers if t.name not in freed or t.name in still]


def _drop_folded_reshapes(ctx: LoweringContext, graph_outputs: set[str]) -> None:
    """Remove the Reshapes ``ctx.reshape`` emitted that nothing reads any more (their readers were
    folded onto the Reshape's input), and the shape constants only they read."""
    while True:
        read = {i for node in ctx.nodes for i in node.input} | graph_outputs
        dead = [
            k
            for k, node in enumerate(ctx.nodes)
            if node.op_type == "Reshape" and node.output[0] in ctx.reshape_sources and node.output[0] not in read
        ]
        if not dead:
            break
        freed = {i for k in dead for i in ctx.nodes[k].input}
        drop = set(dead)
        ctx.nodes[:] = [node for k, node in enumerate(ctx.nodes) if k not in drop]
        still = {i for node in ctx.nodes for i in node.input} | graph_outputs
        ctx.initializers[:] = [t for t in ctx.initializers if t.name not in freed or t.name in still]


def _declared(ctx: LoweringContext) -> list[onnx.ValueInfoProto]:
    """value_info of the custom-op outputs whose static shapes the lowerings noted (still node outputs)."""
    produced = {o for node in ctx.nodes for o in node.output}
    return [helper.make_tensor_value_info(t, TensorProto.FLOAT, list(s)) for t, s in ctx.float_shapes.items() if t in produced]


def _state_outputs(graph: GraphCore, spec: ExportSpec) -> list[tuple[str, NodeId]]:
    """``<cache>.next`` for every input an op writes in place (the op table's ``inplace_input``:
    cache_write's cache); records them in ``spec``."""
    consumers: dict[NodeId, set] = {}
    for n in graph.nodes():
        # The IR nodes of one multi-output ONNX node (an ``index`` attribute) read their inputs once.
        reader = (n.op, n.inputs) if "index" in n.attrs else n.id
        for i in n.inputs:
            consumers.setdefault(i, set()).add(reader)
    leaf_ids = {n.attrs["name"]: n.id for n in graph.nodes() if n.op == "input"}
    outputs = []
    for name, nid in state_pairs(graph).items():
        outputs.append((f"{name}.next", nid))
        spec.state[name] = f"{name}.next"
        writer = graph.node(nid)
        written = writer.inputs[OPS[writer.op].inputs.index(OPS[writer.op].written_input(writer.attrs))]
        if len(consumers[leaf_ids[name]]) == 1 and written == leaf_ids[name]:
            spec.inplace.add(name)
    return outputs


def _check_generated_names(ctx: LoweringContext, outputs: list[str], parameters: list[str]) -> None:
    """An output may not take the name the exporter gave another value (a constant, a lowered node)."""
    generated = {o for n in ctx.nodes for o in n.output} | {t.name for t in ctx.initializers if t.name not in parameters}
    clash = next((name for name in outputs if name in generated), None)
    if clash is not None:
        raise ValueError(
            f"export: output name {clash!r} is the name the exporter gives another value (a constant or a lowered node); rename the output"
        )


def _bind_outputs(ctx: LoweringContext, outputs: list[tuple[str, str]]) -> None:
    """Give each graph output (name, value computing it) its name in the node list.

    A graph output takes over the name of the value that computes it (no Identity copy: an
    in-place CacheWrite must write straight into the bound state buffer). Values that are graph
    inputs/initializers or already claimed by another output go through an Identity.
    """
    produced = {o for n in ctx.nodes for o in n.output}
    renamed: dict[str, str] = {}
    copies = []
    for name, src in outputs:
        if src in produced and src not in renamed:
            renamed[src] = name
        else:
            copies.append(helper.make_node("Identity", [renamed.get(src, src)], [name], name=f"{name}/Identity"))
    for n in ctx.nodes:
        n.input[:] = [renamed.get(i, i) for i in n.input]
        n.output[:] = [renamed.get(o, o) for o in n.output]
    ctx.nodes += copies


def _check_output_names(outputs: list[str], leaves: list[str]) -> None:
    """ONNX value names are one namespace: an output may not repeat another output or a leaf's name."""
    seen: set[str] = set()
    for name in outputs:
        if name in seen:
            raise ValueError(f"export: output name {name!r} is used twice (outputs {outputs})")
        if name in leaves:
            raise ValueError(f"export: output name {name!r} is also the name of an input or parameter; rename the output")
        seen.add(name)


def export_onnx(
    graph: GraphCore,
    path: str | os.PathLike | None = None,
    *,
    opset: int | None = None,
    parameters: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    external_data: bool | None = None,
    int64_indices: bool = False,
    dim_names: Mapping[str, str] | None = None,
) -> onnx.ModelProto:
    """Export ``graph`` as a standalone inference model (parameters as initializers).

    ``parameters`` gives weights by name; missing ones take the documented default init
    (:func:`meganeura_onnx.init.default_parameters` with ``seed``; drawn only for those missing).
    Every input that ``cache_write`` updates (a KV cache) is also an output ``<input>.next``: its
    value after the step, to feed back as the input of the next step.

    With ``path`` the file is written (missing folders are created; the file appears atomically).
    ``external_data`` (default: parameters over 32 MiB) streams the weights to ``<path>.data``
    beside it (ONNX external data) instead of serialising them through protobuf; the returned
    model then refers to that file. The model passes ``onnx.checker.check_model(full_check=True)``.

    ``int64_indices`` declares U32 inputs int64 (see :func:`to_model`); ``dim_names`` renames
    symbolic dims of the graph's inputs and outputs in the file, e.g.
    ``{"past_sequence_length+sequence_length": "total_sequence_length"}``.
    """
    from ..init import default_parameters

    names = {n.attrs["name"] for n in graph.nodes() if n.op == "parameter"}
    unknown = set(parameters or {}) - names
    if unknown:
        raise ValueError(f"export_onnx: parameters {sorted(unknown)} are not in the graph (it has {sorted(names)})")
    values = default_parameters(graph, seed, skip=set(parameters or {}))
    values.update(parameters or {})
    deferred: dict[str, np.ndarray] = {}
    model, _ = to_model(graph, opset=opset, parameters=values, with_state=True, deferred=deferred, int64_indices=int64_indices)
    if dim_names:
        rename_dims(model, dim_names)
    if external_data is None:
        external_data = path is not None and sum(np.asarray(v).nbytes for v in deferred.values()) > EXTERNAL_DATA_BYTES
    if external_data and path is None:
        raise ValueError("export_onnx: external_data=True needs a path to write the weights beside")
    if not external_data:
        fill_initializers(model, deferred)
    if path is not None:
        save_model(model, path, deferred if external_data else None)
    return model


def rename_dims(model: onnx.ModelProto, names: Mapping[str, str]) -> None:
    """Rename symbolic dims (``dim_param``) of the graph's inputs and outputs."""
    for value in list(model.graph.input) + list(model.graph.output):
        for d in value.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in names:
                d.dim_param = names[d.dim_param]


def fill_initializers(model: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> None:
    """Put the data of ``values`` into the model's empty initializers of the same names."""
    for t in model.graph.initializer:
        if t.name in values:
            t.raw_data = np.ascontiguousarray(values[t.name], dtype=np.float32).tobytes()


def save_model(model: onnx.ModelProto, path: str | os.PathLike, weights: Mapping[str, np.ndarray] | None = None) -> Path:
    """Write ``model`` to ``path``; with ``weights`` (name -> array of an empty initializer) stream
    their bytes to ``<path>.data`` and point the initializers there (ONNX external data).

    Missing folders are created. Both files are first written under unique temporary names in the
    target folder and renamed into place, so a failure leaves no partial file and no fixed name
    (e.g. ``OUT.tmp``) that a planted symlink could redirect.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temps: list[str] = []

    umask = os.umask(0)
    os.umask(umask)

    def temp(name: str) -> tuple[int, str]:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=path.parent)
        temps.append(tmp)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; the result gets a normal file's mode
        return fd, tmp

    try:
        data_tmp = None
        if weights:
            fd, data_tmp = temp(path.name + ".data")
            with os.fdopen(fd, "wb") as f:
                _stream_weights(model, weights, f, path.name + ".data")
        fd, model_tmp = temp(path.name)
        with os.fdopen(fd, "wb") as f:
            f.write(model.SerializeToString())
        if data_tmp is not None:
            os.replace(data_tmp, path.with_name(path.name + ".data"))
        os.replace(model_tmp, path)
    except BaseException:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
    return path


def _write_bytes(f, arr: np.ndarray) -> None:
    """Append ``arr``'s bytes to ``f``; a memory map of a file (weights read with ``mapped=True``) is
    copied file to file by the kernel (``copy_file_range``) without passing through this process."""
    src = getattr(arr, "filename", None)
    if isinstance(arr, np.memmap) and src and hasattr(os, "copy_file_range") and arr.dtype == np.dtype("<f4"):
        f.flush()
        with open(src, "rb") as s:
            done, offset = 0, arr.offset
            while done < arr.nbytes:
                n = os.copy_file_range(s.fileno(), f.fileno(), arr.nbytes - done, offset + done)
                if n <= 0:
                    break
                done += n
        if done == arr.nbytes:
            f.seek(0, os.SEEK_END)
            return
        f.seek(-done, os.SEEK_END)  # a filesystem that stopped early: write the bytes instead
        f.truncate()
    f.write(memoryview(arr).cast("B"))


def _stream_weights(model: onnx.ModelProto, weights: Mapping[str, np.ndarray], f, location: str) -> None:
    """Write each weight's bytes straight from its array; large ones start at page-aligned offsets
    (ONNX Runtime can then map them)."""
    offset = 0
    for t in model.graph.initializer:
        if t.name not in weights:
            continue
        arr = weights[t.name]
        if not (arr.dtype == np.dtype("<f4") and arr.flags.c_contiguous):
            arr = np.ascontiguousarray(arr, dtype="<f4")
        if arr.nbytes >= 1 << 20 and offset % 4096:
            pad = 4096 - offset % 4096
            f.write(b"\0" * pad)
            offset += pad
        _write_bytes(f, arr)
        del t.external_data[:]
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(arr.nbytes))):
            t.external_data.add(key=key, value=value)
        offset += arr.nbytes
