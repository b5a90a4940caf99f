"""A tiny MLP for the data-parallel tests: a model file for ``meganeura train`` (``build``/``data``)
and, run as a script under ``torchrun``, a worker that trains it on its shard of fixed batches.

    torchrun --standalone --nproc-per-node 2 tests/dist_worker.py CASE.npz OUT_DIR

``CASE.npz`` holds the initial parameters (``param.<name>``), the global batches ``x [steps, B, 6]``
and ``labels [steps, B, 3]``, and ``lr``, ``clip`` (optionally ``bucket_mb`` and ``device``). Every rank writes ``OUT_DIR/rank<r>.npz``
(its parameters after the steps and the per-step averaged losses); rank 0 also writes
``OUT_DIR/ckpt.safetensors``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from meganeura_onnx import Graph

FEATURES, HIDDEN, CLASSES = 6, 16, 3


def build(batch: int = 8, named: bool = False) -> Graph:
    g = Graph()
    x = g.input("x", [batch, FEATURES])
    h = g.relu(g.bias_add(g.matmul(x, g.parameter("fc1.weight", [FEATURES, HIDDEN])), g.parameter("fc1.bias", [HIDDEN])))
    logits = g.bias_add(g.matmul(h, g.parameter("fc2.weight", [HIDDEN, CLASSES])), g.parameter("fc2.bias", [CLASSES]))
    loss = g.cross_entropy_loss(logits, g.input("labels", [batch, CLASSES]))
    g.set_outputs({"loss": loss, "logits": logits} if named else [loss, logits])
    return g


def data(n_train: int = 64, n_test: int = 16) -> dict:
    """Separable-ish classes: the label is the argmax of a fixed projection of x."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(n_train + n_test, FEATURES)).astype(np.float32)
    y = np.eye(CLASSES, dtype=np.float32)[(x @ rng.normal(size=(FEATURES, CLASSES))).argmax(1)]
    return {"x_train": x[:n_train], "y_train": y[:n_train], "x_test": x[n_train:], "y_test": y[n_train:]}


def main(case_path: str, out_dir: str) -> None:
    from meganeura_onnx.runtime.distributed import DataParallelSession, init_distributed, leave_distributed

    case = np.load(case_path)
    device = str(case["device"]) if "device" in case.files else "cpu"
    ctx = init_distributed(device)
    steps, global_batch = case["x"].shape[:2]
    local = global_batch // ctx.world_size
    params = {k[6:]: case[k] for k in case.files if k.startswith("param.")}
    bucket_mb = float(case["bucket_mb"]) if "bucket_mb" in case.files else None
    s = DataParallelSession(build(local), device=device, optimizer="adam", parameters=params, context=ctx, bucket_mb=bucket_mb)
    s.set_adam(float(case["lr"]))
    if float(case["clip"]) > 0:
        s.set_grad_clip(float(case["clip"]))
    shard = slice(ctx.rank * local, (ctx.rank + 1) * local)
    losses = []
    for k in range(steps):
        s.set_input("x", case["x"][k, shard])
        s.set_input("labels", case["labels"][k, shard])
        s.step()
        losses.append(s.read_loss())
    out = Path(out_dir)
    np.savez(out / f"rank{ctx.rank}.npz", losses=np.array(losses), **{f"param.{n}": s.read_param(n) for n in s.parameter_names()})
    s.save_checkpoint(out / "ckpt.safetensors", metadata={"epoch": "1"})
    leave_distributed()  # as the CLI does: a gloo group left to interpreter shutdown can abort a rank


if __name__ == "__main__":
    main(*sys.argv[1:])
