"""``meganeura inspect MODEL.onnx``: inputs, outputs, parameters, op histogram, custom-op status.
``meganeura inspect --optimize MODEL.py``: what the e-graph optimizer does to a model file's graph."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import click

from .model_file import MODEL, build_graph, parse_sets


def describe(path: str) -> dict:
    """A JSON-able summary of an ONNX model file (what ``inspect`` prints)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from meganeura_onnx.runtime import custom_op_library

    try:
        model = onnx.load(path)
    except Exception as e:  # protobuf's DecodeError and friends: the file is not an ONNX model
        raise click.ClickException(f"{path} is not a readable ONNX model ({type(e).__name__}: {e})") from e
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise click.ClickException(f"{path} is not an ONNX model (no IR version or graph)")
    props = {p.key: p.value for p in model.metadata_props}
    inits = {t.name: t for t in model.graph.initializer}
    names = (
        json.loads(props["meganeura.parameters"])
        if "meganeura.parameters" in props
        else [n for n, t in inits.items() if t.data_type == onnx.TensorProto.FLOAT]
    )
    count = sum(int(np.prod(inits[n].dims)) for n in names if n in inits)
    nbytes = sum(numpy_helper.to_array(inits[n]).nbytes for n in names if n in inits)

    def io(values):
        return [
            {
                "name": v.name,
                "dtype": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower(),
                "shape": [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim],
            }
            for v in values
        ]

    hist = Counter(f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node)
    custom = sorted({n.op_type for n in model.graph.node if n.domain == "com.meganeura"})
    kernels = {}
    if custom:
        lib = custom_op_library("cpu")
        opts = ort.SessionOptions()
        opts.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        if lib:
            opts.register_custom_ops_library(lib)
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        ran = {n.op_type for sub in sess.get_provider_graph_assignment_info() for n in sub.get_nodes() if n.domain == "com.meganeura"}
        kernels = {op: ("kernel" if op in ran else "function body (library not built)" if not lib else "function body") for op in custom}
    return {
        "file": path,
        "ir_version": model.ir_version,
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": io([i for i in model.graph.input if i.name not in inits]),
        "outputs": io(model.graph.output),
        "parameters": {"count": count, "tensors": len(names), "bytes": nbytes},
        "op_histogram": dict(hist.most_common()),
        "custom_ops": kernels,
        "custom_op_libraries": {dev: custom_op_library(dev) for dev in ("cpu", "cuda")},
        "functions": [f"{f.domain}.{f.name}" for f in model.functions],
    }


def memory_report(path: str) -> dict:
    """Liveness of the model's intermediates (``meganeura_onnx.runtime.liveness``) in its own node
    order and in the memory-aware order: the peak, where it is reached, the largest tensors then."""
    import onnx

    from meganeura_onnx.runtime.liveness import liveness, memory_order

    model = onnx.load(path)
    out = {}
    try:
        for name, order in (("model_order", None), ("memory_order", memory_order(model))):
            live = liveness(model, order)
            out[name] = {
                "peak_bytes": live.peak_bytes,
                "peak_at": live.nodes[live.order[live.peak_step]],
                "largest_at_peak": [{"tensor": t, "op": op, "bytes": b} for t, op, b in live.top(8)],
            }
    except ValueError as e:  # symbolic or untyped sizes
        raise click.ClickException(f"--memory: {e}") from e
    return {**out, "held_bytes": live.held_bytes, "lower_bound_bytes": live.lower_bound_bytes}


def _print_memory(m: dict) -> None:
    click.echo(f"memory (intermediates; inputs, initializers and outputs hold {m['held_bytes'] / 1e6:.1f} MB):")
    for name in ("model_order", "memory_order"):
        r = m[name]
        click.echo(f"  {name.replace('_', ' ')}: peak {r['peak_bytes'] / 1e6:.1f} MB at {r['peak_at']}")
        for t in r["largest_at_peak"][:5]:
            click.echo(f"    {t['bytes'] / 1e6:9.1f} MB  {t['op']:<20} {t['tensor']}")
    click.echo(f"  lower bound (the largest node's working set): {m['lower_bound_bytes'] / 1e6:.1f} MB")


def optimize_report(path: str, sets: dict) -> object:
    """The optimizer's report for a model file: its forward graph, then (output 0 a ``[1]`` loss) the
    train step that ``build_session`` compiles from it (gradients only)."""
    from meganeura_onnx.runtime.training import compile_program
    from meganeura_onnx.transforms.rewrite import OptimizeReport, optimize

    graph = build_graph(path, sets)
    if not graph.outputs():
        raise click.BadParameter(f"build() in {path} returned a graph with no outputs (call set_outputs)", param_hint="MODEL")
    forward, report = optimize(graph, stage="forward")
    if graph.node(graph.outputs()[0]).ty.shape != (1,):
        return report
    return OptimizeReport.combine([report, compile_program(forward, None, optimize_graph=True).report])


def _model_param() -> tuple[click.Parameter, click.Context]:
    """The MODEL argument and the context, so errors name the argument as click's own do."""
    ctx = click.get_current_context()
    return next(p for p in ctx.command.params if p.name == "model"), ctx


def _print_optimize(model: str, sets: tuple[str, ...], as_json: bool, program: bool) -> None:
    if Path(model).is_file() and not model.endswith(".py"):
        raise click.BadParameter(
            f"--optimize takes a model file (.py defining build()) or a built-in model, got {model!r}", param_hint="MODEL"
        )
    model = MODEL.convert(model, *_model_param())
    report = optimize_report(model, parse_sets(sets))
    if as_json:
        stages = report.stages or [report]
        fields = ("stage", "nodes_before", "nodes_after", "eclasses", "enodes", "iterations", "stop_reason", "fusions", "removed")
        out = [
            {
                **{f: getattr(r, f) for f in fields},
                "rules_fired": r.rewrites,
                "saturation_s": r.saturation_seconds,
                "extraction_s": r.extraction_seconds,
            }
            for r in stages
        ]
        click.echo(json.dumps({"file": model, "stages": out, **({"program": report.program} if program else {})}, indent=2))
        return
    click.echo(report.summary())
    if program:
        click.echo(report.program)


@click.command("inspect")
@click.argument("model")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--optimize", is_flag=True, help="MODEL is a model file (.py) or a built-in model: print what the e-graph optimizer does to its graph."
)
@click.option("--program", is_flag=True, help="With --optimize: also print the egglog program (declarations, rules, the graph as facts).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="With --optimize: keyword argument for the model's build().")
@click.option(
    "--memory", is_flag=True, help="Also the liveness of the model's intermediate tensors: the peak bytes, where, and which tensors."
)
def inspect_cmd(model: str, as_json: bool, optimize: bool, program: bool, sets: tuple[str, ...], memory: bool) -> None:
    """Summarise MODEL: inputs, outputs, parameter count/bytes, op histogram, custom ops (kernel or function body).

    With --optimize, MODEL is a model file or a built-in model (mnist_mlp, llama, ...) and the e-graph optimizer's report is printed: nodes
    before/after, e-classes, e-nodes, rules fired with counts, fusions applied, saturation and
    extraction times, for the forward graph and (when output 0 is a loss) the train step.
    """
    if optimize:
        _print_optimize(model, sets, as_json, program)
        return
    click.Path(exists=True, dir_okay=False).convert(model, *_model_param())
    d = describe(model)
    if memory:
        d["memory"] = memory_report(model)
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(f"{d['file']}: IR {d['ir_version']}, opsets {d['opsets']}")
    for kind in ("inputs", "outputs"):
        click.echo(f"{kind}:")
        for v in d[kind]:
            click.echo(f"  {v['name']}: {v['dtype']}{v['shape']}")
    p = d["parameters"]
    click.echo(f"parameters: {p['count']:,} in {p['tensors']} tensors ({p['bytes'] / 1e6:.2f} MB)")
    click.echo("ops: " + ", ".join(f"{k} x{v}" for k, v in d["op_histogram"].items()))
    for op, how in d["custom_ops"].items():
        click.echo(f"com.meganeura.{op}: runs as {how} on CPUExecutionProvider")
    for dev, path in d["custom_op_libraries"].items():
        click.echo(f"{dev} kernel library: {path or 'not built (built with the package when nvcc is found; in a checkout: make kernels)'}")
    if memory:
        _print_memory(d["memory"])
