"""Benchmark: one Adam training step of the MNIST MLP (784-128-10, batch 32, fp32, CPU).

Side by side in one run: this project's native engine (one train-step ONNX model on ORT,
parameters and Adam state bound with IOBinding, the fused AdamUpdate kernel), onnxruntime-training
1.19 (its artifacts + TrainingSession, in its own venv ``.venv-ort-training``: ``make
ort-training``; otherwise the JSON says it was not measured) and PyTorch eager (torch.optim.Adam).

Both ORT engines are timed the same way: per step (ours: upload the batch + forward + backward +
update; onnxruntime-training: its ``train_step`` on inputs set once), ``--steps`` steps per repeat,
the repeat's median step. The repeats interleave the engines (A B A B ...) so that load from other
processes hits both alike; the report gives the median over repeats, the spread (min / max) and
the load average (``os.getloadavg``) around every repeat. Default threads on every engine.
Writes ``benchmarks/results/train_mlp_cpu.json`` (machine, git commit, versions).

    python benchmarks/train_mlp.py [--steps 300] [--repeats 9]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import run_info

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "models"))

BATCH, LR = 32, 1e-3


def _data(n: int):
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(BATCH, 784)).astype(np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, BATCH)]) for _ in range(n)]


def _median_step_ms(step, data, steps: int) -> float:
    times = []
    for i in range(steps):
        x, y = data[i % len(data)]
        t0 = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def native(fused: bool = True):
    """(step(x, y), info) of our engine."""
    import mnist_mlp

    from meganeura_onnx.runtime.training import build_session

    s = build_session(mnist_mlp.build(batch=BATCH), optimizer="adam", fused_optimizer=fused)
    s.set_adam(LR)

    def step(x, y):
        s.set_input("x", x)
        s.set_input("labels", y)
        s.step()

    return step, {"onnx_nodes": len(s.onnx_model().graph.node), "kernels": s.plan().kernels()}


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

    for x, y in data[:50]:
        step(x, y)
    runs = [_median_step_ms(step, data, steps) for _ in range(repeats)]
    return runs, {"torch": torch.__version__, "threads": torch.get_num_threads()}


ORT_TRAINING_PY = ROOT / ".venv-ort-training" / "bin" / "python"


def ort_training_repeat(steps: int) -> tuple[float, dict]:
    """One repeat of onnxruntime-training 1.19 (artifacts + TrainingSession, AdamW with weight decay
    0 = Adam) in its own venv: the median step in ms, and its record."""
    from meganeura_onnx.runtime.ort_training import ort_training_step_time_subprocess

    info = ort_training_step_time_subprocess(ORT_TRAINING_PY, ROOT / "models" / "mnist_mlp.py", {"batch": BATCH}, steps=steps)
    return info.pop("step_s") * 1e3, info


def interleaved(data, steps: int, repeats: int) -> dict:
    """Ours (fused Adam), ours (decomposed Adam) and onnxruntime-training, A B C A B C ..."""
    engines = {"meganeura_onnx": native(True), "meganeura_onnx_decomposed_adam": native(False)}
    for step, _ in engines.values():
        for x, y in data[:50]:
            step(x, y)
    have_ort_training = ORT_TRAINING_PY.exists()
    runs: dict[str, list[float]] = {k: [] for k in [*engines, "onnxruntime_training"]}
    loads, ort_info = [], {}
    for _ in range(repeats):
        loads.append(os.getloadavg()[0])
        for name, (step, _) in engines.items():
            runs[name].append(_median_step_ms(step, data, steps))
        if have_ort_training:
            ms, ort_info = ort_training_repeat(steps)
            runs["onnxruntime_training"].append(ms)
    loads.append(os.getloadavg()[0])
    out = {name: {"runs_ms": r, **_summary(r), **info} for name, (_, info) in engines.items() for r in [runs[name]]}
    if have_ort_training:
        out["onnxruntime_training"] = {"runs_ms": runs["onnxruntime_training"], **_summary(runs["onnxruntime_training"]), **ort_info}
    else:
        out["onnxruntime_training"] = {
            "step_ms": None,
            "skipped": f"{ORT_TRAINING_PY.relative_to(ROOT)} does not exist (make ort-training); not measured",
        }
    out["_load_average_1min"] = loads
    return out


def _summary(runs: list[float]) -> dict:
    return {"step_ms": statistics.median(runs), "min_ms": min(runs), "max_ms": max(runs)}


def machine() -> dict:
    return {
        "cpu": run_info.cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "git_commit": run_info.git_commit(),
        "git_dirty": run_info.git_dirty(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "train_mlp_cpu.json"))
    a = ap.parse_args()
    import onnxruntime

    data = _data(64)
    results = interleaved(data, a.steps, a.repeats)
    loads = results.pop("_load_average_1min")
    runs, info = bench_torch(data, a.steps, a.repeats)
    results["pytorch"] = {"runs_ms": runs, **_summary(runs), **info}

    ours = results["meganeura_onnx"]["step_ms"]
    ratios = {f"vs_{k}": ours / v["step_ms"] for k, v in results.items() if k != "meganeura_onnx" and v["step_ms"]}
    report = {
        "benchmark": "MLP 784-128-10, batch 32, fp32, Adam lr 1e-3, one step = upload batch + forward + backward + update",
        "method": "per repeat the median of --steps single-step times; ORT engines interleaved per repeat; step_ms = median over repeats",
        "load_average_1min_around_repeats": loads,
        "machine": machine(),
        "onnxruntime": onnxruntime.__version__,
        "steps": a.steps,
        "repeats": a.repeats,
        "results": results,
        "ratio_ours_over": ratios,
    }
    print(f"load average (1 min) around the repeats: {[round(x, 1) for x in loads]}")
    print(f"{'engine':<34}{'median ms':>10}{'min':>8}{'max':>8}")
    for k, v in results.items():
        if v["step_ms"] is None:
            print(f"{k:<34}{'-':>10}  {v.get('skipped', '')}")
        else:
            print(f"{k:<34}{v['step_ms']:>10.4f}{v['min_ms']:>8.3f}{v['max_ms']:>8.3f}")
    for k, v in ratios.items():
        print(f"meganeura_onnx / {k[3:]}: {v:.2f}x")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
