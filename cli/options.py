"""Options that several commands share, declared once (same name, choices and default everywhere)."""

from __future__ import annotations

import click

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

device_option = click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)


def precision_option(help: str):  # noqa: A002 - click's keyword
    """``--precision fp32|tf32|bf16|fp16`` (default fp32); ``help`` says what it does in this command."""
    return click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True, help=help)
