"""``meganeura export MODEL -o OUT.onnx`` (and ``--training-artifacts DIR`` for onnxruntime-training)."""

from __future__ import annotations

import click

from .model_file import MODEL, build_graph, parse_sets


@click.command()
@click.argument("model", type=MODEL)
@click.option(
    "-o",
    "--output",
    default=None,
    type=click.Path(dir_okay=False),
    help="Where to write the .onnx file (required unless --training-artifacts).",
)
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
    model: str, output: str | None, opset: int | None, sets: tuple[str, ...], seed: int, artifacts_dir: str | None, optimizer: str
) -> None:
    """Export the Graph returned by MODEL's build() to ONNX (MODEL: a .py file or a built-in model:
    mnist_mlp, llama, tiny_llama, bert).

    Parameters are written as initializers with the default init (train or load weights through a
    Session to export trained values).
    """
    from meganeura_onnx import export_onnx

    if output is None and artifacts_dir is None:
        raise click.UsageError("give -o/--output, --training-artifacts, or both")
    graph = build_graph(model, parse_sets(sets))
    if artifacts_dir is not None:
        _training_artifacts(graph, artifacts_dir, optimizer, seed)
    if output is None:
        return
    m = export_onnx(graph, output, opset=opset, seed=seed)
    custom = sorted({n.op_type for n in m.graph.node if n.domain == "com.meganeura"})
    click.echo(
        f"wrote {output}: {len(m.graph.node)} nodes, opset {m.opset_import[0].version}, IR {m.ir_version}"
        + (f", com.meganeura ops {custom}" if custom else "")
    )


def _training_artifacts(graph, out_dir: str, optimizer: str, seed: int) -> None:
    from meganeura_onnx.training_artifacts import TrainingArtifactsError, generate_training_artifacts

    try:
        arts = generate_training_artifacts(graph, out_dir, optimizer, seed=seed)
    except (TrainingArtifactsError, ImportError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(
        f"wrote {out_dir}: {', '.join(sorted(p.name for p in arts.files.values()))} ({optimizer}, {len(arts.parameters)} trainable parameters)"
    )
