"""kill -9 during training: every checkpoint left behind loads and equals a completed save, and
resuming from it equals an uninterrupted run bit for bit.

A tiny MLP trains with Adam and saves a checkpoint after every step (``save_checkpoint``: atomic
write). This driver forks a trainer, SIGKILLs it at a random moment (while it builds its session,
steps, or writes), loads the checkpoint it left, forks the next trainer that resumes from it, and
so on, ``--kills`` times; a last trainer runs ten more steps. Then a reference trainer runs the
same number of steps without interruption, saving every step. Checked:

- every checkpoint found after a kill loads (header, metadata, checksum) and equals, tensor for
  tensor and bit for bit, the reference's save of the same step;
- the final parameters and Adam state equal the reference's, bit for bit;
- no temp file of a killed writer survives the next save.

The trainers are forked from this process after the imports (no ONNX Runtime session exists here),
so a kill costs no interpreter start. Prints one JSON summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np

from meganeura_onnx import Graph
from meganeura_onnx.io import load_checkpoint
from meganeura_onnx.runtime.training import build_session_cached

BATCH = 8


def tiny_mlp() -> Graph:
    g = Graph()
    x = g.input("x", [BATCH, 8])
    h = g.relu(g.bias_add(g.matmul(x, g.parameter("fc1.weight", [8, 16])), g.parameter("fc1.bias", [16])))
    logits = g.bias_add(g.matmul(h, g.parameter("fc2.weight", [16, 4])), g.parameter("fc2.bias", [4]))
    g.set_outputs([g.cross_entropy_loss(logits, g.input("labels", [BATCH, 4]))])
    return g


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The data of optimizer step ``step`` (0-based): a function of the step alone, so a resumed run sees the same."""
    rng = np.random.default_rng([7, step])
    return rng.standard_normal((BATCH, 8)).astype(np.float32), np.eye(4, dtype=np.float32)[rng.integers(0, 4, BATCH)]


def trainer(model_cache: Path, ckpt: Path, until: int, every_step_dir: Path | None = None, ready_fd: int | None = None) -> None:
    """Resume from ``ckpt`` when it exists; step and save after every step until ``until`` steps.
    ``ready_fd`` gets one byte once the session is built and resumed (training starts)."""
    s = build_session_cached(tiny_mlp(), model_cache, optimizer="adam")
    s.set_adam(1e-2)
    if ckpt.exists():
        s.load_checkpoint(ckpt)
    if ready_fd is not None:
        os.write(ready_fd, b"r")
    while s.optimizer_step < until:
        x, y = batch(s.optimizer_step)
        s.set_input("x", x)
        s.set_input("labels", y)
        s.step()
        s.save_checkpoint(ckpt)
        if every_step_dir is not None:
            s.save_checkpoint(every_step_dir / f"step{s.optimizer_step}.safetensors")


def fork(fn, *args) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001 - report, then leave without running the parent's cleanup
            import traceback

            traceback.print_exc()
            code = 1
        os._exit(code)
    return pid


def wait_ok(pid: int, what: str) -> None:
    _, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        raise SystemExit(f"{what} failed (wait status {status})")


def same(a, b) -> bool:
    groups = ((a.params, b.params), (a.adam_m, b.adam_m), (a.adam_v, b.adam_v))
    return a.step == b.step and all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in groups)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-delay", type=float, default=0.15, help="seconds: a kill lands uniformly in [0, this] after training starts")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    cache, ckpt = work / "train_step.onnx", work / "run" / "ckpt.safetensors"
    ckpt.parent.mkdir(exist_ok=True)
    wait_ok(fork(trainer, cache, work / "warmup.safetensors", 0), "the warm-up trainer")  # compiles the model once

    seen: dict[int, object] = {}
    kills = mid_save = no_progress = 0
    t0 = time.perf_counter()
    while kills < args.kills:
        before = load_checkpoint(ckpt).step if ckpt.exists() else 0
        ready_r, ready_w = os.pipe()
        pid = fork(trainer, cache, ckpt, 10**9, None, ready_w)
        os.close(ready_w)
        if rnd.random() < 0.8:  # most kills land while it trains (steps and saves); the rest while it starts
            os.read(ready_r, 1)
        time.sleep(rnd.uniform(0.0, args.max_delay))
        os.kill(pid, signal.SIGKILL)
        os.close(ready_r)
        os.waitpid(pid, 0)
        kills += 1
        if any(p.name.endswith(".tmp") and f".{pid}." in p.name for p in ckpt.parent.iterdir()):
            mid_save += 1  # the kill interrupted a write: its temp file is left for the next save to remove
        if not ckpt.exists():
            no_progress += 1
            continue
        c = load_checkpoint(ckpt)  # must load: validated header, metadata and checksum
        if c.step < before:
            raise SystemExit(f"kill {kills}: the checkpoint went back from step {before} to {c.step}")
        no_progress += c.step == before
        seen[c.step] = c
    last = load_checkpoint(ckpt).step
    final_steps = last + 10
    wait_ok(fork(trainer, cache, ckpt, final_steps), "the final trainer")
    leftovers = [p.name for p in ckpt.parent.iterdir() if p.name.endswith(".tmp")]
    kill_seconds = time.perf_counter() - t0

    ref_dir = work / "reference"
    ref_dir.mkdir(exist_ok=True)
    wait_ok(fork(trainer, cache, ref_dir / "ckpt.safetensors", final_steps, ref_dir), "the reference trainer")
    mismatched = [s for s, c in seen.items() if not same(c, load_checkpoint(ref_dir / f"step{s}.safetensors"))]
    resumed_equal = same(load_checkpoint(ckpt), load_checkpoint(ref_dir / "ckpt.safetensors"))
    summary = {
        "kills": kills,
        "kills_inside_a_save": mid_save,
        "kills_before_any_new_step": no_progress,
        "distinct_checkpoints_checked": len(seen),
        "checkpoints_not_equal_to_the_reference": mismatched,
        "steps": final_steps,
        "resume_equals_uninterrupted": resumed_equal,
        "temp_files_left": leftovers,
        "seconds": round(kill_seconds, 2),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(summary), flush=True)
    sys.exit(0 if resumed_equal and not mismatched and not leftovers else 1)


if __name__ == "__main__":
    main()
