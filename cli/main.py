"""``meganeura``: export, inspect and view models (train/generate/embed join as they land)."""

from __future__ import annotations

import click

from .embed import embed
from .export_cmd import export
from .generate import generate
from .inspect_cmd import inspect_cmd
from .train import train
from .view_cmd import view


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="meganeura-onnx")
def main() -> None:
    """Write a model once as a Graph; export it to ONNX, train it, run it with ONNX Runtime."""


main.add_command(export)
main.add_command(inspect_cmd)
main.add_command(view)
main.add_command(train)
main.add_command(generate)
main.add_command(embed)

if __name__ == "__main__":
    main()
