"""Graph -> ``onnx.ModelProto``.

Standard ONNX wherever it expresses the op; ``com.meganeura`` nodes with model-local function
bodies for the custom ops. Every ONNX node's name starts with ``n<NodeId>_<op>/`` and its
doc_string names the Graph node, so a Netron view leads back to the program.
"""

from __future__ import annotations

import json
import os
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
EXTERNAL_DATA_BYTES = 1 << 30
"""Parameter bytes above which ``export_onnx`` writes weights to a side file (protobuf caps at 2 GiB)."""

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
        written = OPS[n.op].inplace_input
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
) -> tuple[onnx.ModelProto, ExportSpec]:
    """Lower ``graph`` to ONNX.

    ``parameters``: values for initializers (required unless ``params_as_inputs``).
    ``with_state``: expose each cache_write'd input's next value as an output ``<name>.next``.
    ``extra_outputs``: more named outputs (used by the training transform).
    """
    opset = DEFAULT_OPSET if opset is None else int(opset)
    if not 21 <= opset <= 24:
        raise ValueError(f"export: opset must be between 21 and 24, got {opset}")
    if not graph.outputs():
        raise ValueError("export: the graph has no outputs; call set_outputs([...]) first")
    ctx = LoweringContext(opset)
    ctx.graph = graph
    spec = ExportSpec()
    names: dict[NodeId, str] = {}
    g_inputs: list[onnx.ValueInfoProto] = []

    def vinfo(name: str, nid: NodeId) -> onnx.ValueInfoProto:
        ty = graph.node(nid).ty
        return helper.make_tensor_value_info(name, ONNX_DTYPE[ty.dtype], list(ty.shape))

    for n in graph.nodes():
        if n.op in ("input", "input_u32"):
            names[n.id] = n.attrs["name"]
            g_inputs.append(vinfo(n.attrs["name"], n.id))
            spec.inputs.append(n.attrs["name"])
        elif n.op == "parameter":
            name = n.attrs["name"]
            names[n.id] = name
            spec.parameters.append(name)
            if params_as_inputs:
                g_inputs.append(vinfo(name, n.id))
            else:
                if parameters is None or name not in parameters:
                    raise ValueError(f"export: no value for parameter {name!r}")
                value = np.asarray(parameters[name], dtype=np.float32)
                if value.shape != n.ty.shape:
                    raise ValueError(f"export: parameter {name!r} has shape {list(value.shape)}, expected {list(n.ty.shape)}")
                ctx.initializers.append(numpy_helper.from_array(value, name))
        elif n.op == "constant":
            names[n.id] = f"const_{n.id}"
            ctx.initializers.append(numpy_helper.from_array(n.attrs["value"].astype(np.float32), names[n.id]))
        else:
            ctx.prefix = f"n{n.id}_{n.op}/"
            ctx.doc = f"meganeura Graph node {n.id}: {n.op}({', '.join(map(str, n.inputs))}) -> {n.ty}"
            names[n.id] = OPS[n.op].lowering(ctx, n, *(names[i] for i in n.inputs))
    ctx.prefix, ctx.doc = "", ""

    outputs: list[tuple[str, NodeId]] = [(f"output_{k}", nid) for k, nid in enumerate(graph.outputs())]
    if with_state:
        consumers: dict[NodeId, int] = {}
        for n in graph.nodes():
            for i in n.inputs:
                consumers[i] = consumers.get(i, 0) + 1
        leaf_ids = {n.attrs["name"]: n.id for n in graph.nodes() if n.op == "input"}
        for name, nid in state_pairs(graph).items():
            outputs.append((f"{name}.next", nid))
            spec.state[name] = f"{name}.next"
            writer = graph.node(nid)
            if (
                consumers[leaf_ids[name]] == 1
                and writer.inputs[OPS[writer.op].inputs.index(OPS[writer.op].inplace_input)] == leaf_ids[name]
            ):
                spec.inplace.add(name)
    outputs += list((extra_outputs or {}).items())
    # A graph output takes over the name of the value that computes it (no Identity copy: an
    # in-place CacheWrite must write straight into the bound state buffer). Values that are graph
    # inputs/initializers or already claimed by another output go through an Identity.
    produced = {o for n in ctx.nodes for o in n.output}
    renamed: dict[str, str] = {}
    copies = []
    g_outputs = []
    for name, nid in outputs:
        src = names[nid]
        if src in produced and src not in renamed:
            renamed[src] = name
        else:
            copies.append(helper.make_node("Identity", [renamed.get(src, src)], [name], name=f"{name}/Identity"))
        g_outputs.append(vinfo(name, nid))
        spec.outputs.append(name)
    for n in ctx.nodes:
        n.input[:] = [renamed.get(i, i) for i in n.input]
        n.output[:] = [renamed.get(o, o) for o in n.output]
    ctx.nodes += copies

    onnx_graph = helper.make_graph(ctx.nodes, model_name, g_inputs, g_outputs, ctx.initializers)
    opsets = [helper.make_opsetid("", opset)]
    if ctx.functions:
        opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    model = helper.make_model(
        onnx_graph, opset_imports=opsets, functions=list(ctx.functions.values()), producer_name="meganeura-onnx", ir_version=IR_VERSION
    )
    model.doc_string = "Exported by meganeura-onnx from a Graph."
    helper.set_model_props(model, {"meganeura.parameters": json.dumps(spec.parameters), "meganeura.graph_nodes": str(len(graph))})
    return model, spec


def export_onnx(
    graph: GraphCore,
    path: str | os.PathLike | None = None,
    *,
    opset: int | None = None,
    parameters: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
) -> onnx.ModelProto:
    """Export ``graph`` as a standalone inference model (parameters as initializers).

    ``parameters`` gives weights by name; missing ones take the documented default init
    (:func:`meganeura_onnx.init.default_parameters` with ``seed``). With ``path`` the file is
    written too; parameters over 1 GiB go to ``<path>.data`` beside it (ONNX external data).
    The model passes ``onnx.checker.check_model(full_check=True)``.
    """
    from ..init import default_parameters

    values = default_parameters(graph, seed)
    unknown = set(parameters or {}) - set(values)
    if unknown:
        raise ValueError(f"export_onnx: parameters {sorted(unknown)} are not in the graph (it has {sorted(values)})")
    values.update(parameters or {})
    model, _ = to_model(graph, opset=opset, parameters=values)
    if path is not None:
        path = Path(path)
        large = sum(v.nbytes for v in values.values()) > EXTERNAL_DATA_BYTES
        tmp = path.with_name(path.name + ".tmp")
        onnx.save_model(
            model, tmp, save_as_external_data=large, all_tensors_to_one_file=True, location=path.name + ".data", size_threshold=1024
        )
        os.replace(tmp, path)
    return model
