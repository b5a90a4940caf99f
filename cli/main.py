"""``meganeura``: export, inspect, view, train, generate and embed models."""

from __future__ import annotations

import click

from .embed import embed
from .errors import ErrorReportingGroup
from .export_cmd import export
from .generate import generate
from .inspect_cmd import inspect_cmd
from .train import train
from .view_cmd import view


@click.group(cls=ErrorReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="meganeura-onnx", prog_name="meganeura")
@click.option("--debug", is_flag=True, help="Show Python tracebacks instead of one-line errors (also MEGANEURA_DEBUG=1).")
def main(debug: bool) -> None:
    """Write a model once as a Graph; export it to ONNX, train it, run it with ONNX Runtime.

    MODEL arguments take a .py model file or a built-in model: mnist_mlp, llama, tiny_llama, bert.
    A model file is Python code: the commands that take one import and run it, with your
    permissions. Only pass model files you trust.

    Every failure is one line "Error: ..." on stderr and a non-zero exit status; a command that
    needs an optional dependency names the extra that installs it.
    """


main.add_command(export)
main.add_command(inspect_cmd)
main.add_command(view)
main.add_command(train)
main.add_command(generate)
main.add_command(embed)

if __name__ == "__main__":
    main()
