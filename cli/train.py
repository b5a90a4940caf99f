"""``meganeura train MODEL``: train a model file's graph with the native engine.

The model-file contract for training
------------------------------------
``build(**kwargs) -> Graph``
    The training graph: output 0 is the ``[1]`` loss to minimise. It is called with
    ``batch=<--batch-size>`` (when ``build`` takes a ``batch`` argument) plus the ``--set`` values.
    An output 1 with the shape of a float input (e.g. logits beside one-hot labels) turns on the
    accuracy metric: ``argmax(output 1) == argmax(that input)`` per row.
``data(**kwargs) -> dict``
    The examples, first axis = example. Either ``{"train": {input: array}, "test": {input: array}}``
    keyed by the graph's input names, or the supervised shorthand ``x_train, y_train, x_test,
    y_test`` which feeds the graph's first declared data input with x and its second with y.
    ``--set`` values that ``data`` accepts are passed to it too.
``metric(outputs: list[np.ndarray], batch: dict[str, np.ndarray]) -> float`` (optional)
    A custom per-batch metric (averaged over the test batches), named by ``METRIC_NAME``.

Every epoch: a tqdm bar with the loss and samples/s, then the test loss and metric. Batches are
drawn from a seeded shuffle; a last partial batch is dropped in training and padded (with rows
from the start, not counted in the metric) in evaluation. ``--checkpoint`` is written after every
epoch and on Ctrl-C (to ``--checkpoint``, or ``<model>.interrupted.safetensors`` without one) before
exiting with status 130; ``--resume`` continues from it (epoch count in its metadata).
"""

from __future__ import annotations

import inspect
import math
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from .model_file import MODEL, build_graph, load_module, parse_sets


def _split_data(d: dict, names: list[str]) -> tuple[dict, dict]:
    if "train" in d and "test" in d:
        return d["train"], d["test"]
    if {"x_train", "y_train", "x_test", "y_test"} <= set(d):
        if len(names) != 2:
            raise click.UsageError(
                f"data() returned x/y arrays, but the graph has {len(names)} data inputs {names}; return train/test dicts"
            )
        return {names[0]: d["x_train"], names[1]: d["y_train"]}, {names[0]: d["x_test"], names[1]: d["y_test"]}
    raise click.UsageError(f"data() must return train/test dicts or x_train/y_train/x_test/y_test, got keys {sorted(d)}")


def _batches(arrays: dict, batch: int, order: np.ndarray, pad: bool):
    n = len(order)
    for start in range(0, n, batch):
        idx = order[start : start + batch]
        real = len(idx)
        if real < batch:
            if not pad:
                return
            idx = np.concatenate([idx, order[: batch - real]])
        yield {k: v[idx] for k, v in arrays.items()}, real


def _feed(session: Any, graph: Any, batch: dict) -> None:
    u32 = {n for n, _ in graph.leaves("input_u32")}
    for name, value in batch.items():
        (session.set_input_u32 if name in u32 else session.set_input)(name, value)


def _evaluate(graph: Any, params: dict, test: dict, batch: int, module: Any, device: str) -> dict[str, float]:
    from meganeura_onnx.runtime import build_inference_session

    s = build_inference_session(graph, device, parameters=params)
    outs = graph.outputs()
    labels = None
    if len(outs) > 1:
        shape = graph.node(outs[1]).ty.shape
        labels = next((n for n, nid in graph.leaves("input") if graph.node(nid).ty.shape == shape), None)
    custom = getattr(module, "metric", None)
    losses, hits, seen, scores = [], 0, 0, []
    n = len(next(iter(test.values())))
    for b, real in _batches(test, batch, np.arange(n), pad=True):
        _feed(s, graph, b)
        s.step()
        if real == batch:  # the loss is a batch mean: padded batches would bias it
            losses.append(s.read_loss())
        if custom is not None:
            scores.append(float(custom([s.read_output_by_index(i) for i in range(s.num_outputs())], b)))
        elif labels is not None:
            pred = s.read_output_by_index(1).argmax(axis=1)[:real]
            hits += int((pred == b[labels].argmax(axis=1)[:real]).sum())
            seen += real
    out = {"test_loss": float(np.mean(losses)) if losses else math.nan}
    if custom is not None:
        out[getattr(module, "METRIC_NAME", "metric")] = float(np.mean(scores))
    elif labels is not None:
        out["accuracy"] = hits / max(seen, 1)
    return out


@click.command("train")
@click.argument("model", type=MODEL)
@click.option("--epochs", default=10, show_default=True, help="Passes over the training set.")
@click.option("--batch-size", default=32, show_default=True, help="Examples per step (passed to build() as batch=).")
@click.option("--optimizer", type=click.Choice(["sgd", "adam", "adamw"]), default="adam", show_default=True)
@click.option("--lr", type=float, default=None, help="Learning rate [default: 1e-3 for adam/adamw, 0.1 for sgd].")
@click.option("--weight-decay", type=float, default=0.01, show_default=True, help="AdamW's decoupled weight decay.")
@click.option("--clip", type=float, default=None, help="Clip the global gradient norm to this value.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--checkpoint", type=click.Path(dir_okay=False), default=None, help="Safetensors checkpoint written after each epoch.")
@click.option("--resume", is_flag=True, help="Continue from --checkpoint (parameters, Adam state, step, epoch).")
@click.option("--export", "export_path", type=click.Path(dir_okay=False), default=None, help="Write the trained model as ONNX.")
@click.option("--seed", default=0, show_default=True, help="Seeds the parameter init and the shuffle.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Arguments for build() (and data()), e.g. --set hidden=64.")
def train(model, epochs, batch_size, optimizer, lr, weight_decay, clip, device, checkpoint, resume, export_path, seed, sets) -> None:
    """Train MODEL's graph on its data (MODEL: a .py file or a built-in model such as mnist_mlp; see the
    module docstring for the model-file contract)."""
    from tqdm import tqdm

    from meganeura_onnx.runtime.training import build_session

    kw = parse_sets(sets)
    module = load_module(model)
    if "batch" in inspect.signature(module.build).parameters:
        kw.setdefault("batch", batch_size)
    graph = build_graph(model, kw)
    if not callable(getattr(module, "data", None)):
        raise click.BadParameter(f"{model} defines no data() function (needed by train; see meganeura train --help)", param_hint="MODEL")
    data_kw = {k: v for k, v in kw.items() if k in inspect.signature(module.data).parameters}
    names = [n for n in (x.attrs.get("name") for x in graph.nodes() if x.op in ("input", "input_u32")) if n]
    train_set, test_set = _split_data(module.data(**data_kw), names)
    batch = graph.node(graph.leaves("input")[0][1]).ty.shape[0] if graph.leaves("input") else batch_size

    session = build_session(graph, device, optimizer=optimizer, seed=seed, clip=clip is not None)
    lr = lr if lr is not None else (0.1 if optimizer == "sgd" else 1e-3)
    {
        "sgd": lambda: session.set_learning_rate(lr),
        "adam": lambda: session.set_adam(lr),
        "adamw": lambda: session.set_adamw(lr, weight_decay=weight_decay),
    }[optimizer]()
    if clip is not None:
        session.set_grad_clip(clip)
    ckpt_path = Path(checkpoint) if checkpoint else None
    first_epoch = 1
    if resume:
        if ckpt_path is None or not ckpt_path.is_file():
            raise click.BadParameter(f"--resume needs an existing --checkpoint file, got {checkpoint!r}", param_hint="--resume")
        meta = session.load_checkpoint(ckpt_path)
        first_epoch = int(meta.get("epoch", "0")) + 1
        click.echo(f"resumed from {ckpt_path} (epoch {first_epoch - 1}, step {session.optimizer_step})")

    n = len(next(iter(train_set.values())))
    epoch = first_epoch - 1
    try:
        for epoch in range(first_epoch, epochs + 1):
            order = np.random.default_rng([seed, epoch]).permutation(n)
            bar = tqdm(total=n // batch * batch, desc=f"epoch {epoch}/{epochs}", unit="ex", leave=True, file=sys.stderr)
            t0, losses = time.perf_counter(), []
            for k, (b, _) in enumerate(_batches(train_set, batch, order, pad=False)):
                _feed(session, graph, b)
                session.step()
                if k % 10 == 0:  # reading the loss is a device->host copy: not every step
                    losses.append(session.read_loss())
                    bar.set_postfix(loss=f"{losses[-1]:.4f}", samples_s=f"{(k + 1) * batch / (time.perf_counter() - t0):.0f}")
                bar.update(batch)
            bar.close()
            params = {name: session.read_param(name) for name in session.parameter_names()}
            res = _evaluate(graph, params, test_set, batch, module, device)
            shown = ", ".join(f"{k} {v:.2%}" if k == "accuracy" else f"{k} {v:.4f}" for k, v in res.items())
            click.echo(f"epoch {epoch}: train loss {np.mean(losses):.4f}, {shown}")
            if ckpt_path:
                session.save_checkpoint(ckpt_path, metadata={"epoch": str(epoch)})
    except KeyboardInterrupt:
        path = ckpt_path or Path(model).with_suffix(".interrupted.safetensors")  # a built-in's name: the current folder
        session.save_checkpoint(path, metadata={"epoch": str(epoch - 1)})
        click.echo(f"\ninterrupted: checkpoint written to {path} (resume with --checkpoint {path} --resume)", err=True)
        sys.exit(130)
    if export_path:
        from meganeura_onnx import export_onnx

        export_onnx(graph, export_path, parameters={name: session.read_param(name) for name in session.parameter_names()})
        click.echo(f"wrote {export_path}")
