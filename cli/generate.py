"""``meganeura generate MODEL --weights W.safetensors --tokenizer tokenizer.json --prompt "..."``."""

from __future__ import annotations

import inspect
import json
import sys
import time
from pathlib import Path

import click

from .model_file import MODEL, load_module
from .options import device_option, precision_option


@click.command()
@click.argument("model", type=MODEL)
@click.option("--weights", type=click.Path(exists=True, dir_okay=False), help="HF safetensors weights (omit for random weights).")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False), help="HF config.json [default: beside the weights].")
@click.option("--preset", default=None, help="A built-in config of the model file instead of a config.json (e.g. smollm2-135m, tiny).")
@click.option("--tokenizer", type=click.Path(exists=True, dir_okay=False), help="tokenizer.json [default: beside the weights].")
@click.option("--prompt", multiple=True, help="Text to continue (needs a tokenizer); repeat it for a batch decoded together.")
@click.option(
    "--prompt-ids", multiple=True, help="Comma-separated token ids instead of --prompt (no tokenizer needed); repeat it for a batch."
)
@click.option("--max-new-tokens", type=click.IntRange(0), default=64, show_default=True)
@click.option("--temperature", type=click.FloatRange(0), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-k", type=click.IntRange(0), default=0, show_default=True, help="Sample from the k most likely tokens (0 = all).")
@click.option("--seed", type=int, default=None, help="Seed of the sampler.")
@click.option("--max-seq", type=click.IntRange(1), default=None, help="KV-cache length [default: prompt + new tokens, rounded up to 64].")
@click.option(
    "--prefill-chunk",
    type=click.IntRange(1),
    default=None,
    help="Rows per prefill step [default: the longest prompt, rounded up to 64: the whole prompt in one step].",
)
@device_option
@precision_option("bf16/fp16: weights in half precision, MatMul in half with fp32 accumulation, fp32 logits; tf32: CUDA only.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
def generate(
    model: str,
    weights: str | None,
    config: str | None,
    preset: str | None,
    tokenizer: str | None,
    prompt: tuple[str, ...],
    prompt_ids: tuple[str, ...],
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    seed: int | None,
    max_seq: int | None,
    prefill_chunk: int | None,
    device: str,
    precision: str,
    as_json: bool,
) -> None:
    """Continue a prompt with the causal LM of MODEL (a .py file or the built-in llama): prefill, then
    KV-cache decode, streaming tokens as they come; tokens/s goes to stderr. Greedy at temperature 0.
    Several prompts (--prompt or --prompt-ids repeated) are decoded together as one batch, each at
    its own positions, and printed one line each when all are done.

    A MODEL.py file is Python code that runs with your permissions: only pass files you trust.
    """
    from meganeura_onnx.generation import check_budget

    module = load_module(model)
    if not callable(getattr(module, "load_generator", None)):
        raise click.BadParameter(f"{model} defines no load_generator() (the generate contract)", param_hint="MODEL")
    if bool(prompt) == bool(prompt_ids):
        raise click.UsageError("give --prompt or --prompt-ids (one kind, repeated for a batch)")
    if tokenizer is None and weights is not None and (Path(weights).parent / "tokenizer.json").is_file():
        tokenizer = str(Path(weights).parent / "tokenizer.json")
    tok = None
    if tokenizer is not None:
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(tokenizer)
        except Exception as e:  # the tokenizers library raises a bare Exception on malformed files
            raise click.BadParameter(f"cannot read {tokenizer} as a tokenizer.json: {e}", param_hint="--tokenizer") from e
        tok.no_padding()  # a tokenizer.json may pad to a fixed length (BERT's do); the prompt is exactly its tokens
        tok.no_truncation()  # too long is reported against the KV cache instead of silently cut
    if prompt:
        if tok is None:
            raise click.UsageError("--prompt needs --tokenizer (or a tokenizer.json beside the weights); or pass --prompt-ids")
        prompts = [tok.encode(p).ids for p in prompt]
    else:
        prompts = [_ids(p) for p in prompt_ids]
    max_seq, prefill_chunk = _sizes(max(map(len, prompts)), max_new_tokens, max_seq, prefill_chunk)
    if precision == "tf32" and device != "cuda":
        raise click.BadParameter(
            f"tf32 is a CUDA tensor-core mode; it needs --device cuda, got --device {device}", param_hint="--precision"
        )
    extra = {}
    if precision != "fp32":
        if "precision" not in inspect.signature(module.load_generator).parameters:
            raise click.BadParameter(f"{model}'s load_generator() takes no precision argument", param_hint="--precision")
        extra["precision"] = precision
    if len(prompts) > 1:
        if "batch" not in inspect.signature(module.load_generator).parameters:
            raise click.BadParameter(f"{model}'s load_generator() takes no batch argument (several prompts)", param_hint="--prompt")
        extra["batch"] = len(prompts)
    try:
        for ids in prompts:
            check_budget(len(ids), max_new_tokens, max_seq)
        gen = module.load_generator(
            weights, config=config, preset=preset, max_seq=max_seq, prefill_chunk=prefill_chunk, device=device, **extra
        )
    except (ValueError, FileNotFoundError) as e:
        raise click.ClickException(str(e)) from e
    stop = set(module.stop_ids(gen.cfg)) if hasattr(module, "stop_ids") else set()
    sampling = dict(temperature=temperature, top_k=top_k, seed=seed, stop_ids=stop)
    if len(prompts) > 1:
        _run_batch(gen, prompts, max_new_tokens, sampling, tok, as_json, device)
    else:
        _stream(gen, prompts[0], max_new_tokens, sampling, tok, as_json, device)


def _sizes(longest: int, max_new_tokens: int, max_seq: int | None, prefill_chunk: int | None) -> tuple[int, int]:
    """The KV cache's length (default: the longest prompt and the new tokens, rounded up to 64) and the
    rows per prefill step (default: the longest prompt, rounded up to 64: one step, because a step costs
    mostly per layer, not per row; on an H200 a 2048-token prompt took 5.7 ms as one step, 26 ms in 16)."""
    if max_seq is None:
        max_seq = max(64, -(-(longest + max_new_tokens) // 64) * 64)
    if prefill_chunk is None:
        prefill_chunk = min(max_seq, max(64, -(-longest // 64) * 64))
    return max_seq, prefill_chunk


def _ids(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError as e:
        raise click.BadParameter(f"expected comma-separated integers: {e}", param_hint="--prompt-ids") from e


def _stream(gen, ids: list[int], max_new_tokens: int, sampling: dict, tok, as_json: bool, device: str) -> None:
    """One prompt: the new tokens printed as they come."""
    from meganeura_onnx.generation import generate as run

    out: list[int] = []
    printed = ""
    start = time.perf_counter()
    first_at = None
    for token in run(gen, ids, max_new_tokens, **sampling):
        if first_at is None:
            first_at = time.perf_counter()
        out.append(token)
        if not as_json:
            # Decode the whole continuation and print what is new, so multi-token characters come out whole.
            text = tok.decode(out) if tok is not None else " ".join(map(str, out)) + " "
            if text.startswith(printed):
                sys.stdout.write(text[len(printed) :])
                sys.stdout.flush()
                printed = text
    end = time.perf_counter()
    decoded = len(out) - 1
    tokens_per_s = decoded / (end - first_at) if decoded > 0 and first_at is not None and end > first_at else 0.0
    prefill_s = (first_at - start) if first_at is not None else 0.0
    text = tok.decode(out) if tok is not None else ""
    if as_json:
        click.echo(json.dumps({"prompt_ids": ids, "generated_ids": out, "text": text, "tokens_per_s": round(tokens_per_s, 3)}))
    else:
        if text.startswith(printed):
            sys.stdout.write(text[len(printed) :])
        sys.stdout.write("\n")
    plan = getattr(gen, "prefill_plan", None)  # LlamaRunner's prefill steps (a model file's generator may have none)
    steps = " in {} step(s) of {} rows".format(*plan(len(ids))) if callable(plan) else ""
    click.echo(
        f"{len(ids)} prompt tokens, prefill {prefill_s * 1e3:.1f} ms{steps}; {len(out)} new tokens, decode {tokens_per_s:.1f} tokens/s"
        f" ({device})",
        err=True,
    )


def _run_batch(gen, prompts: list[list[int]], max_new_tokens: int, sampling: dict, tok, as_json: bool, device: str) -> None:
    """Several prompts as one batch: one line (or one JSON object) per prompt when all are done."""
    from meganeura_onnx.generation import generate_batch

    start = time.perf_counter()
    outs = generate_batch(gen, prompts, max_new_tokens, **sampling)
    seconds = time.perf_counter() - start
    texts = [tok.decode(o) if tok is not None else "" for o in outs]
    if as_json:
        sequences = [{"prompt_ids": p, "generated_ids": o, "text": t} for p, o, t in zip(prompts, outs, texts, strict=True)]
        click.echo(json.dumps({"sequences": sequences, "seconds": round(seconds, 3)}))
    else:
        for o, t in zip(outs, texts, strict=True):
            click.echo(t if tok is not None else " ".join(map(str, o)))
    total = sum(map(len, outs))
    click.echo(
        f"{len(prompts)} prompts ({sum(map(len, prompts))} prompt tokens), {total} new tokens in {seconds:.2f} s: "
        f"{total / max(seconds, 1e-9):.1f} tokens/s over the batch, prefill included ({device})",
        err=True,
    )
