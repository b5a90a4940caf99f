"""``meganeura export MODEL.py -o OUT.onnx``."""

from __future__ import annotations

import click

from .model_file import build_graph, parse_sets


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the .onnx file.")
@click.option("--opset", type=click.IntRange(21, 24), default=None, help="ONNX opset (default 21: portable to ORT 1.19+).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Keyword argument for the model's build(), e.g. --set batch=64.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the default parameter init.")
def export(model: str, output: str, opset: int | None, sets: tuple[str, ...], seed: int) -> None:
    """Export the Graph returned by MODEL.py's build() to ONNX.

    Parameters are written as initializers with the default init (train or load weights through a
    Session to export trained values).
    """
    from meganeura_onnx import export_onnx

    graph = build_graph(model, parse_sets(sets))
    m = export_onnx(graph, output, opset=opset, seed=seed)
    custom = sorted({n.op_type for n in m.graph.node if n.domain == "com.meganeura"})
    click.echo(
        f"wrote {output}: {len(m.graph.node)} nodes, opset {m.opset_import[0].version}, IR {m.ir_version}"
        + (f", com.meganeura ops {custom}" if custom else "")
    )
