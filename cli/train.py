"""``meganeura train MODEL``: train a model file's graph with the native engine.

The model-file contract for training
------------------------------------
``build(**kwargs) -> Graph``
    The training graph: output 0 is the ``[1]`` loss to minimise. It is called with
    ``batch=<--batch-size>`` (when ``build`` takes a ``batch`` argument) plus the ``--set`` values.
    An output 1 with the shape of a float input (e.g. logits beside one-hot labels) turns on the
    accuracy metric: ``argmax(output 1) == argmax(that input)`` per row.
``data(**kwargs) -> dict``
    The examples, first axis = example. An example may be a token window: ``input_ids`` and
    ``labels`` as U32 ``[N, T]`` feed a graph whose inputs are ``[batch * T]`` (one step = ``batch``
    whole windows; windows are shuffled, never the tokens inside them). The examples per step are
    read from the graph (its first data input's size over one example's); ``--batch-size`` is
    passed to ``build(batch=)`` when build takes it, and refused when it cannot be honoured. Either ``{"train": {input: array}, "test": {input: array}}``
    keyed by the graph's input names, or the supervised shorthand ``x_train, y_train, x_test,
    y_test`` which feeds the graph's first declared data input with x and its second with y.
    ``--set`` values that ``data`` accepts are passed to it too.
``metric(outputs: list[np.ndarray], batch: dict[str, np.ndarray]) -> float`` (optional)
    A custom per-batch metric (averaged over the test batches), named by ``METRIC_NAME``.
``PREDICTION = "logits"`` (optional; that is the default)
    The name of the training graph's prediction output (``set_outputs({"loss": loss, "logits":
    logits})``). ``--export`` writes the graph that computes only it, from the trained weights: no
    loss, no label inputs, so the file runs with the model's data input alone.

Every epoch: a tqdm bar with the loss and samples/s, then the test loss and metric (also every
``--eval-every`` updates). ``--lr-schedule constant|cosine|linear`` with ``--warmup`` updates sets
the learning rate of every update (transformers' schedules with warm-up); ``--grad-accum K``
averages the gradients of K batches per update (an epoch uses whole windows of K batches);
``--precision fp32|tf32|bf16|fp16`` picks the compute precision (parameters, optimizer state and
checkpoints stay fp32; tf32 needs ``--device cuda``; fp16 scales the loss dynamically and skips the
steps whose gradients overflow; data-parallel runs are fp32 only). Batches are
drawn from a seeded shuffle; a last partial batch is dropped in training and padded (with rows
from the start, not counted in the metric) in evaluation. ``--checkpoint`` is written after every
epoch and on Ctrl-C (to ``--checkpoint``, or ``<model>.interrupted.safetensors`` without one) before
exiting with status 130; ``--resume`` continues from it (epoch count in its metadata).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

from .errors import check_writable_file, finite_float
from .model_file import MODEL, build_graph, load_module, parse_sets
from .options import device_option, precision_option


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


def _examples_per_step(graph: Any, train: dict, batch_size: int, takes_batch: bool) -> int:
    """How many examples (first-axis entries of data()'s arrays) one step consumes: the graph's
    first data input holds that many examples (e.g. ``input_ids [batch*seq]`` = batch windows of seq)."""
    name, nid = next(((n, i) for n, i in graph.leaves("input") + graph.leaves("input_u32") if n in train), (None, None))
    if name is None:
        raise click.UsageError(f"data() has no array for any graph input; the graph's inputs are {[n for n, _ in graph.leaves('input')]}")
    per_example = int(np.prod(np.shape(train[name])[1:], dtype=np.int64))
    graph_elems = graph.node(nid).ty.num_elements()
    if not isinstance(graph_elems, int) or per_example == 0 or graph_elems % per_example:
        raise click.UsageError(
            f"graph input {name!r} {list(graph.node(nid).ty.shape)} does not hold a whole number of data() examples of shape {list(np.shape(train[name])[1:])}"
        )
    batch = graph_elems // per_example
    given = click.get_current_context().get_parameter_source("batch_size") is click.core.ParameterSource.COMMANDLINE
    if not takes_batch and given and batch_size != batch:
        raise click.BadParameter(
            f"build() takes no batch argument, and its graph trains on {batch} examples per step ({name!r} is {list(graph.node(nid).ty.shape)}); "
            f"--batch-size {batch_size} cannot be honoured (drop it, or add a batch parameter to build())",
            param_hint="--batch-size",
        )
    return batch


def _feed(session: Any, graph: Any, batch: dict) -> None:
    u32 = {n for n, _ in graph.leaves("input_u32")}
    for name, value in batch.items():
        (session.set_input_u32 if name in u32 else session.set_input)(name, value)


def inference_graph(graph: Any, module: Any) -> Any:
    """The part of the training graph that computes the prediction output (see ``PREDICTION``)."""
    name = getattr(module, "PREDICTION", "logits")
    outs = graph.named_outputs()
    if name not in outs:
        raise click.BadParameter(
            f"--export writes the inference graph, i.e. the training graph's output named {name!r}; its outputs are {list(outs)} "
            f"(name it with set_outputs({{'loss': loss, {name!r}: ...}}), or set PREDICTION = '<output name>' in the model file)",
            param_hint="--export",
        )
    pruned = graph.toposort()  # a copy: the training graph keeps its outputs
    pruned.set_outputs({name: pruned.named_outputs()[name]})
    return pruned.toposort()  # drops the loss and the label inputs


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
@click.option("--epochs", type=click.IntRange(1), default=10, show_default=True, help="Passes over the training set.")
@click.option(
    "--batch-size", type=click.IntRange(1), default=32, show_default=True, help="Examples per step (passed to build() as batch=)."
)
@click.option("--optimizer", type=click.Choice(["sgd", "adam", "adamw"]), default="adam", show_default=True)
@click.option(
    "--lr", type=float, default=None, callback=finite_float(0.0), help="Learning rate [default: 1e-3 for adam/adamw, 0.1 for sgd]."
)
@click.option(
    "--weight-decay", type=float, default=0.01, show_default=True, callback=finite_float(0.0), help="AdamW's decoupled weight decay."
)
@click.option(
    "--clip", type=float, default=None, callback=finite_float(0.0, strict=True), help="Clip the global gradient norm to this value."
)
@device_option
@click.option("--checkpoint", type=click.Path(dir_okay=False), default=None, help="Safetensors checkpoint written after each epoch.")
@click.option("--resume", is_flag=True, help="Continue from --checkpoint (parameters, Adam state, step, epoch).")
@click.option("--export", "export_path", type=click.Path(dir_okay=False), default=None, help="Write the trained model as ONNX.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Seeds the parameter init and the shuffle.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Arguments for build() (and data()), e.g. --set hidden=64.")
@click.option(
    "--lr-schedule",
    type=click.Choice(["constant", "cosine", "linear"]),
    default="constant",
    show_default=True,
    help="Learning rate over the run: constant, or a cosine / linear decay to 0 at the last update.",
)
@click.option("--warmup", type=click.IntRange(0), default=0, show_default=True, help="Updates of linear warm-up from lr 0.")
@click.option(
    "--grad-accum",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Average the gradients of K batches per update (an update sees K * batch examples).",
)
@click.option("--eval-every", type=click.IntRange(1), default=None, help="Also evaluate on the test set every N updates.")
@precision_option(
    "Compute precision: bf16/fp16 run MatMul in half with fp32 master weights (fp16 with dynamic loss scaling); tf32: CUDA only."
)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    default=None,
    help="Data-parallel over N processes of this host (torchrun; one GPU each with --device cuda); --batch-size is the global batch.",
)
def train(
    model,
    epochs,
    batch_size,
    optimizer,
    lr,
    weight_decay,
    clip,
    device,
    checkpoint,
    resume,
    export_path,
    seed,
    sets,
    lr_schedule,
    warmup,
    grad_accum,
    eval_every,
    precision,
    nproc_per_node,
) -> None:
    """Train MODEL's graph on its data (MODEL: a .py file or a built-in model such as mnist_mlp; see the
    module docstring for the model-file contract).

    A MODEL.py file is Python code that runs with your permissions: only pass files you trust.
    """
    from meganeura_onnx.runtime.training import build_session

    from .dist_train import data_parallel_run, launch_torchrun

    kw = _checked_options(device, precision, nproc_per_node, sets, checkpoint, export_path, resume)
    module = load_module(model)
    takes_batch = callable(getattr(module, "build", None)) and "batch" in inspect.signature(module.build).parameters
    if nproc_per_node is not None and "LOCAL_RANK" not in os.environ:  # options checked; not yet inside torchrun
        sys.exit(launch_torchrun(click.get_current_context(), nproc_per_node, batch_size if takes_batch else None))
    dist = data_parallel_run(device, batch_size if takes_batch else None)  # None outside torchrun
    if takes_batch:
        kw.setdefault("batch", batch_size // dist.world_size if dist else batch_size)
    graph = build_graph(model, kw)
    train_set, test_set = _load_examples(module, model, graph, kw)
    batch = _examples_per_step(graph, train_set, batch_size, takes_batch)
    predict = inference_graph(graph, module) if export_path else None  # fails before training, not after

    if dist:
        session = dist.session(graph, optimizer=optimizer, seed=seed, clip=clip is not None)
    else:
        session = build_session(graph, device, optimizer=optimizer, seed=seed, clip=clip is not None, precision=precision)
    lr = lr if lr is not None else (0.1 if optimizer == "sgd" else 1e-3)
    set_lr = _configure_updates(session, optimizer, lr, weight_decay, clip, grad_accum)
    ckpt_path = Path(checkpoint) if checkpoint else None
    loop = _TrainLoop(session, graph, module, device, dist, train_set, test_set, batch, grad_accum, set_lr, precision)
    first_epoch = _resume(session, ckpt_path, loop.main) if resume else 1
    loop.plan(epochs, lr, lr_schedule, warmup)
    epoch = first_epoch - 1
    try:
        for epoch in range(first_epoch, epochs + 1):
            losses = loop.run_epoch(epoch, epochs, seed, eval_every)
            if not loop.main:  # rank 0 evaluates, reports, writes the checkpoint
                continue
            click.echo(f"epoch {epoch}: train loss {np.mean(losses):.4f}, {loop.test_report()}")
            if ckpt_path:
                session.save_checkpoint(ckpt_path, metadata={"epoch": str(epoch)})
    except KeyboardInterrupt:
        if not loop.main:
            sys.exit(130)
        path = ckpt_path or Path(model).with_suffix(".interrupted.safetensors")  # a built-in's name: the current folder
        session.save_checkpoint(path, metadata={"epoch": str(epoch - 1)})
        click.echo(f"\ninterrupted: checkpoint written to {path} (resume with --checkpoint {path} --resume)", err=True)
        sys.exit(130)
    if export_path and loop.main:
        _export_trained(session, predict, export_path)
    if dist:
        dist.close()


def _checked_options(device, precision, nproc_per_node, sets, checkpoint, export_path, resume) -> dict:
    """The ``--set`` values, after refusing option combinations that cannot run (before any work)."""
    if precision == "tf32" and device != "cuda":
        raise click.BadParameter(
            f"tf32 is a CUDA tensor-core mode; it needs --device cuda, got --device {device}", param_hint="--precision"
        )
    if precision != "fp32" and nproc_per_node is not None:
        raise click.BadParameter(
            f"data-parallel training (--nproc-per-node) runs in fp32 only, got --precision {precision}", param_hint="--precision"
        )
    kw = parse_sets(sets)
    if "batch" in kw and (isinstance(kw["batch"], bool) or not isinstance(kw["batch"], int) or kw["batch"] < 1):
        raise click.BadParameter(f"batch must be a positive integer, got {kw['batch']!r}", param_hint="--set")
    check_writable_file(checkpoint, "--checkpoint")
    check_writable_file(export_path, "--export")
    if resume and (checkpoint is None or not Path(checkpoint).is_file()):
        raise click.BadParameter(f"--resume needs an existing --checkpoint file, got {checkpoint!r}", param_hint="--resume")
    return kw


def _load_examples(module: Any, model: str, graph: Any, kw: dict) -> tuple[dict, dict]:
    """(train set, test set) from the model file's ``data()``, keyed by the graph's input names."""
    if not callable(getattr(module, "data", None)):
        raise click.BadParameter(f"{model} defines no data() function (needed by train; see meganeura train --help)", param_hint="MODEL")
    data_kw = {k: v for k, v in kw.items() if k in inspect.signature(module.data).parameters}
    names = [n for n in (x.attrs.get("name") for x in graph.nodes() if x.op in ("input", "input_u32")) if n]
    try:
        examples = module.data(**data_kw)
    except Exception as e:
        raise click.ClickException(f"data() in {model} raised {type(e).__name__}: {e}") from e
    if not isinstance(examples, dict):
        raise click.ClickException(f"data() in {model} returned {type(examples).__name__}, expected a dict")
    return _split_data(examples, names)


def _configure_updates(session: Any, optimizer: str, lr: float, weight_decay: float, clip, grad_accum: int) -> Callable[[float], None]:
    """Sets the optimizer's learning rate, clipping and accumulation; returns the learning-rate setter
    (the schedule calls it before every update)."""
    set_lr = {
        "sgd": lambda value: session.set_learning_rate(value),
        "adam": lambda value: session.set_adam(value),
        "adamw": lambda value: session.set_adamw(value, weight_decay=weight_decay),
    }[optimizer]
    set_lr(lr)
    if clip is not None:
        session.set_grad_clip(clip)
    if grad_accum > 1:
        session.set_grad_accumulation(grad_accum)
    return set_lr


def _resume(session: Any, ckpt_path: Path, main: bool) -> int:
    """Loads the checkpoint into the session; returns the first epoch still to run."""
    meta = session.load_checkpoint(ckpt_path)
    epoch_text = str(meta.get("epoch", "0"))
    if not epoch_text.isdigit():
        raise click.ClickException(f"checkpoint {ckpt_path}: metadata 'epoch' must be a non-negative integer, got {epoch_text!r}")
    if main:
        click.echo(f"resumed from {ckpt_path} (epoch {int(epoch_text)}, step {session.optimizer_step})")
    return int(epoch_text) + 1


@dataclasses.dataclass
class _TrainLoop:
    """The epochs of one training run: batches in a seeded shuffle, the lr schedule, periodic evaluation."""

    session: Any
    graph: Any
    module: Any
    device: str
    dist: Any  # the data-parallel run, None outside torchrun
    train_set: dict
    test_set: dict
    batch: int  # examples per step on one process
    grad_accum: int
    set_lr: Callable[[float], None]
    precision: str
    lr: float = 0.0
    lr_schedule: str = "constant"
    warmup: int = 0
    micro_per_epoch: int = 0
    total_updates: int = 0

    @property
    def main(self) -> bool:
        return not self.dist or self.dist.is_main

    @property
    def step_batch(self) -> int:  # the global batch
        return self.batch * (self.dist.world_size if self.dist else 1)

    def plan(self, epochs: int, lr: float, lr_schedule: str, warmup: int) -> None:
        """Steps per epoch (whole accumulation windows only) and updates of the whole run (for the schedule)."""
        self.lr, self.lr_schedule, self.warmup = lr, lr_schedule, warmup
        n = len(next(iter(self.train_set.values())))
        self.micro_per_epoch = n // self.step_batch // self.grad_accum * self.grad_accum
        if self.micro_per_epoch == 0:
            raise click.UsageError(f"{n} training examples do not fill one update of {self.grad_accum} x {self.step_batch} examples")
        self.total_updates = epochs * self.micro_per_epoch // self.grad_accum

    def run_epoch(self, epoch: int, epochs: int, seed: int, eval_every: int | None) -> list[float]:
        """One pass over the training set; returns the losses read along the way."""
        from tqdm import tqdm

        from meganeura_onnx.runtime.schedules import scheduled_lr

        session, step_batch = self.session, self.step_batch
        n = len(next(iter(self.train_set.values())))
        order = np.random.default_rng([seed, epoch]).permutation(n)
        total = self.micro_per_epoch * step_batch
        bar = tqdm(total=total, desc=f"epoch {epoch}/{epochs}", unit="ex", leave=True, file=sys.stderr, disable=not self.main)
        t0, losses = time.perf_counter(), []
        for k, (b, _) in enumerate(_batches(self.train_set, step_batch, order[:total], pad=False)):
            _feed(session, self.graph, self.dist.shard(b) if self.dist else b)
            if self.lr_schedule != "constant" or self.warmup:
                self.set_lr(scheduled_lr(self.lr_schedule, self.lr, session.optimizer_step, self.total_updates, self.warmup))
            updates = session.optimizer_step
            session.step()
            if eval_every and self.main and session.optimizer_step != updates and session.optimizer_step % eval_every == 0:
                res = self.evaluate()
                bar.write(f"step {session.optimizer_step}: " + ", ".join(f"{k} {v:.4f}" for k, v in res.items()))
            if k % 10 == 0:  # reading the loss is a device->host copy: not every step
                losses.append(session.read_loss())
                bar.set_postfix(loss=f"{losses[-1]:.4f}", samples_s=f"{(k + 1) * step_batch / (time.perf_counter() - t0):.0f}")
            bar.update(step_batch)
        bar.close()
        return losses

    def evaluate(self) -> dict[str, float]:
        params = {name: self.session.read_param(name) for name in self.session.parameter_names()}
        return _evaluate(self.graph, params, self.test_set, self.batch, self.module, self.device)

    def test_report(self) -> str:
        """The test loss and metric, as the end-of-epoch line shows them."""
        shown = ", ".join(f"{k} {v:.2%}" if k == "accuracy" else f"{k} {v:.4f}" for k, v in self.evaluate().items())
        if self.precision == "fp16":  # overflowed steps are dropped, never applied: say how many
            shown += f"; fp16: {self.session.skipped_steps} steps skipped on overflow, loss scale {self.session.loss_scale:g}"
        return shown


def _export_trained(session: Any, predict: Any, export_path: str) -> None:
    from meganeura_onnx import export_onnx

    trained = {name: session.read_param(name) for name in predict.parameters()}
    export_onnx(predict, export_path, parameters=trained)
    inputs = [n for n, _ in predict.leaves("input") + predict.leaves("input_u32")]
    click.echo(f"wrote {export_path} (inference graph: inputs {inputs}, outputs {predict.output_names()})")
