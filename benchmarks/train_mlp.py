"""Benchmark: one Adam training step of the MNIST MLP (784-128-10, batch 32, fp32, CPU).

Side by side in one run: this project's native engine (one fused train-step ONNX model on ORT,
parameters and Adam state bound with IOBinding), PyTorch eager (torch.optim.Adam, foreach), and
onnxruntime-training 1.19 (its artifacts + TrainingSession) when its virtual environment
``.venv-ort-training`` exists at the repository root (otherwise the JSON says it was not measured).
Step = upload one batch + forward + backward + update; same threads (ORT and torch default to
all cores). Per engine: warm-up, then ``--repeats`` runs of ``--steps`` steps; the median is
reported. Writes ``benchmarks/results/train_mlp_cpu.json`` (machine, git commit, versions).

    python benchmarks/train_mlp.py [--steps 500] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "models"))

BATCH, LR = 32, 1e-3


def _data(n: int):
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(BATCH, 784)).astype(np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, BATCH)]) for _ in range(n)]


def _time(step, data, steps: int, repeats: int) -> list[float]:
    for x, y in data[:50]:
        step(x, y)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(steps):
            x, y = data[i % len(data)]
            step(x, y)
        runs.append((time.perf_counter() - t0) / steps * 1e3)
    return runs


def bench_native(data, steps, repeats):
    import mnist_mlp

    from meganeura_onnx.runtime.training import build_session

    s = build_session(mnist_mlp.build(batch=BATCH), optimizer="adam")
    s.set_adam(LR)

    def step(x, y):
        s.set_input("x", x)
        s.set_input("labels", y)
        s.step()

    runs = _time(step, data, steps, repeats)
    return runs, {"onnx_nodes": len(s.onnx_model().graph.node), "final_loss": s.read_loss()}


def bench_torch(data, steps, repeats):
    import torch

    w1 = torch.nn.Parameter(torch.randn(784, 128) * 0.03)
    b1 = torch.nn.Parameter(torch.zeros(128))
    w2 = torch.nn.Parameter(torch.randn(128, 10) * 0.09)
    b2 = torch.nn.Parameter(torch.zeros(10))
    opt = torch.optim.Adam([w1, b1, w2, b2], lr=LR)

    def step(x, y):
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        opt.zero_grad(set_to_none=True)
        logits = torch.relu(xt @ w1 + b1) @ w2 + b2
        loss = -(yt * torch.log_softmax(logits, -1)).sum() / BATCH
        loss.backward()
        opt.step()

    runs = _time(step, data, steps, repeats)
    return runs, {"torch": torch.__version__, "threads": torch.get_num_threads()}


def bench_ort_training(steps, repeats):
    """onnxruntime-training 1.19 (artifacts + TrainingSession, AdamW with weight decay 0) in its own venv."""
    py = ROOT / ".venv-ort-training" / "bin" / "python"
    if not py.exists():
        return None, {"skipped": f"{py.relative_to(ROOT)} does not exist (make ort-training); not measured"}
    from meganeura_onnx.runtime.ort_training import ort_training_step_time_subprocess

    runs, info = [], {}
    for _ in range(repeats):
        info = ort_training_step_time_subprocess(py, ROOT / "models" / "mnist_mlp.py", {"batch": BATCH}, steps=steps)
        runs.append(info.pop("step_s") * 1e3)
    return runs, info


def machine() -> dict:
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", False
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "git_commit": commit,
        "git_dirty": dirty,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "train_mlp_cpu.json"))
    a = ap.parse_args()
    import onnxruntime

    data = _data(64)
    results = {}
    for name, fn in (
        ("meganeura_onnx", lambda: bench_native(data, a.steps, a.repeats)),
        ("pytorch", lambda: bench_torch(data, a.steps, a.repeats)),
    ):
        runs, info = fn()
        results[name] = {"step_ms": statistics.median(runs), "runs_ms": runs, **info}
    runs, info = bench_ort_training(a.steps, a.repeats)
    results["onnxruntime_training"] = {"step_ms": statistics.median(runs) if runs else None, "runs_ms": runs, **info}

    ours = results["meganeura_onnx"]["step_ms"]
    ratios = {f"vs_{k}": ours / v["step_ms"] for k, v in results.items() if k != "meganeura_onnx" and v["step_ms"]}
    report = {
        "benchmark": "MLP 784-128-10, batch 32, fp32, Adam lr 1e-3, one step = upload batch + forward + backward + update",
        "machine": machine(),
        "onnxruntime": onnxruntime.__version__,
        "steps": a.steps,
        "repeats": a.repeats,
        "results": results,
        "ratio_ours_over": ratios,
    }
    print(f"{'engine':<22}{'step (ms)':>12}")
    for k, v in results.items():
        print(f"{k:<22}{v['step_ms'] if v['step_ms'] is None else round(v['step_ms'], 4)!s:>12}  {v.get('skipped', '')}")
    for k, v in ratios.items():
        print(f"meganeura_onnx / {k[3:]}: {v:.2f}x")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
