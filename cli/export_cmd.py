"""``meganeura export MODEL -o OUT.onnx [--weights FILE.safetensors]`` (and ``--training-artifacts DIR``).

MODEL is a model file (``models/llama.py``) or the name of a built-in model (``mnist_mlp``, ``llama``,
``tiny_llama``, ``bert``: the modules of ``meganeura_onnx.models``). Weights come from ``--weights`` (a Hugging
Face ``model.safetensors`` or a checkpoint written by ``meganeura train``), matched by parameter
name; without ``--weights`` the file holds the default init, and a line on stderr says so.

Model-file contract (beside ``build(**kwargs) -> Graph``):

- ``IGNORE_WEIGHTS``: regexes of checkpoint tensors the model deliberately does not use (e.g.
  BERT's pooler); never reported as unexpected.
- ``build`` may take ``config``: ``--config`` (default: the ``config.json`` beside ``--weights``)
  is passed as ``config=PATH``.
- ``export_folder(out_dir, *, weights, config, allow_missing, seed, opset, **sets)``: when ``-o``
  names a folder (ends with ``/`` or exists as one), the model writes its own layout there (LLaMA:
  the ``model.onnx`` + ``genai_config.json`` folder that onnxruntime-genai and Optimum read).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import click

from .model_file import MODEL, build_graph, load_module, parse_sets


def load_weights(graph, weights: str, allow_missing: bool, ignore=()) -> dict:
    """Parameters for ``graph`` from ``weights``; a ClickException lists every problem at once."""
    from meganeura_onnx.io import WeightLoadError, parameters_from_file

    try:
        values, report = parameters_from_file(graph, weights, allow_missing=allow_missing, ignore=ignore)
    except WeightLoadError as e:
        hint = "\n  (--allow-missing gives missing parameters the default init)" if e.report.missing and not allow_missing else ""
        raise click.ClickException(f"{e}{hint}") from e
    except (OSError, ValueError) as e:
        raise click.ClickException(f"cannot read --weights {weights}: {e}") from e
    if report.missing:
        click.echo(f"note: {len(report.missing)} parameters are not in {weights} and take the default init: {report.missing[:8]}", err=True)
    return values


def _config_for(module, sets: dict, config: str | None, weights: str | None) -> None:
    """Pass ``--config`` (or the config.json beside the weights) to a build() that takes ``config``."""
    takes = "config" in inspect.signature(module.build).parameters
    if config is None and weights is not None and takes and "config" not in sets:
        beside = Path(weights).with_name("config.json")
        config = str(beside) if beside.is_file() else None
    if config is None:
        return
    if not takes:
        raise click.BadParameter(f"{module.__file__}'s build() takes no config argument", param_hint="--config")
    sets["config"] = config


@click.command()
@click.argument("model", type=MODEL)
@click.option(
    "-o",
    "--output",
    default=None,
    type=click.Path(),
    help="The .onnx file to write (folders are created), or a folder (ending in /) for models with their own layout.",
)
@click.option(
    "--weights", type=click.Path(exists=True, dir_okay=False), default=None, help="Parameters by name from this safetensors file."
)
@click.option("--config", type=click.Path(exists=True, dir_okay=False), default=None, help="config.json for build(config=...).")
@click.option("--allow-missing", is_flag=True, help="With --weights: parameters missing from the file take the default init.")
@click.option("--opset", type=click.IntRange(21, 24), default=None, help="ONNX opset (default 21: portable to ORT 1.19+).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Keyword argument for the model's build(), e.g. --set batch=64.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the default parameter init.")
@click.option(
    "--training-artifacts",
    "artifacts_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Also write onnxruntime-training artifacts (training/eval/optimizer models + checkpoint) to this folder; needs `make ort-training`.",
)
@click.option(
    "--optimizer", type=click.Choice(["adamw", "sgd"]), default="adamw", show_default=True, help="Optimizer of --training-artifacts."
)
def export(
    model: str,
    output: str | None,
    weights: str | None,
    config: str | None,
    allow_missing: bool,
    opset: int | None,
    sets: tuple[str, ...],
    seed: int,
    artifacts_dir: str | None,
    optimizer: str,
) -> None:
    """Export the Graph returned by MODEL's build() to ONNX (MODEL: a .py file or a built-in model:
    mnist_mlp, llama, tiny_llama, bert).

    MODEL.py is Python code that runs with your permissions: only pass files you trust.
    """
    from meganeura_onnx import export_onnx

    if output is None and artifacts_dir is None:
        raise click.UsageError("give -o/--output, --training-artifacts, or both")
    if allow_missing and weights is None:
        raise click.UsageError("--allow-missing only applies with --weights")
    path = model
    module = load_module(path)
    kw = parse_sets(sets)
    if output is not None and (output.endswith(("/", os.sep)) or Path(output).is_dir()):
        _export_folder(module, path, Path(output), weights, config, allow_missing, seed, opset, kw)
        return
    if callable(getattr(module, "build", None)):
        _config_for(module, kw, config, weights)
    graph = build_graph(path, kw)
    params = load_weights(graph, weights, allow_missing, getattr(module, "IGNORE_WEIGHTS", ())) if weights else {}
    if weights is None:
        click.echo(f"note: no --weights: {output or artifacts_dir} holds the default init (seed {seed}), not trained weights", err=True)
    if artifacts_dir is not None:
        _training_artifacts(graph, artifacts_dir, optimizer, seed, params)
    if output is None:
        return
    try:
        m = export_onnx(graph, output, opset=opset, seed=seed, parameters=params)
    except OSError as e:
        raise click.ClickException(f"cannot write {output}: {e}") from e
    custom = sorted({n.op_type for n in m.graph.node if n.domain == "com.meganeura"})
    click.echo(
        f"wrote {output}: {len(m.graph.node)} nodes, opset {m.opset_import[0].version}, IR {m.ir_version}"
        + (f", com.meganeura ops {custom}" if custom else "")
        + f", outputs {[o.name for o in m.graph.output]}"
    )


def _export_folder(module, path: str, out_dir: Path, weights, config, allow_missing: bool, seed: int, opset, kw: dict) -> None:
    fn = getattr(module, "export_folder", None)
    if not callable(fn):
        raise click.BadParameter(f"{path} defines no export_folder(); give -o FILE.onnx for a single file", param_hint="-o")
    if weights is None:
        click.echo(f"note: no --weights: {out_dir} holds the default init (seed {seed}), not trained weights", err=True)
    args = {"weights": weights, "config": config, "allow_missing": allow_missing, "seed": seed, "opset": opset, **kw}
    try:
        inspect.signature(fn).bind(out_dir, **args)
    except TypeError as e:
        raise click.BadParameter(f"export_folder() rejected the --set values {kw}: {e}", param_hint="--set") from e
    try:
        written = fn(out_dir, **args)
    except (OSError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"wrote {out_dir}: {', '.join(sorted(p.name for p in written))}")


def _training_artifacts(graph, out_dir: str, optimizer: str, seed: int, params: dict) -> None:
    from meganeura_onnx.training_artifacts import TrainingArtifactsError, generate_training_artifacts

    try:
        arts = generate_training_artifacts(graph, out_dir, optimizer, parameters=params or None, seed=seed)
    except (TrainingArtifactsError, ImportError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(
        f"wrote {out_dir}: {', '.join(sorted(p.name for p in arts.files.values()))} ({optimizer}, {len(arts.parameters)} trainable parameters)"
    )
