"""What a size change costs a Session with symbolic dimensions.

One inference session of an MLP 784-128-10 whose batch is the symbol ``batch``: steps at one batch
size (buffers bound once) against steps that alternate between two sizes (every step allocates the
input and output buffers of the new size and rebuilds the two IOBindings), and the same MLP built
with a static batch as the baseline. Median of ``--repeat`` runs of ``--steps`` steps each.
Results go to ``<out-dir>/symbolic-sizes-<host>-<time>.json`` with the machine, versions, commit and
load averages (the numbers of a shared VM are distorted by its load).

    python benchmarks/symbolic_sizes.py --out-dir benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import run_info

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from meganeura_onnx import Graph, build_inference_session  # noqa: E402


def mlp(batch: int | str) -> Graph:
    g = Graph()
    x = g.input("x", [batch, 784])
    h = g.relu(g.bias_add(g.matmul(x, g.parameter("fc1.weight", [784, 128])), g.parameter("fc1.bias", [128])))
    g.set_outputs([g.bias_add(g.matmul(h, g.parameter("fc2.weight", [128, 10])), g.parameter("fc2.bias", [10]))])
    return g


def us_per_step(session, batches: list[np.ndarray], steps: int) -> float:
    for x in batches * 10:  # warm-up: every size once at least
        session.set_input("x", x)
        session.step()
    start = time.perf_counter()
    for i in range(steps):
        session.set_input("x", batches[i % len(batches)])
        session.step()
    return (time.perf_counter() - start) / steps * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out-dir", type=Path, default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (n, 784)).astype(np.float32) for n in (args.batch, args.batch + 1))
    symbolic = build_inference_session(mlp("batch"))
    static = build_inference_session(mlp(args.batch))
    runs: dict[str, list[float]] = {"static": [], "symbolic_fixed_size": [], "symbolic_alternating_sizes": []}
    for _ in range(args.repeat):
        runs["static"].append(us_per_step(static, [a], args.steps))
        runs["symbolic_fixed_size"].append(us_per_step(symbolic, [a], args.steps))
        runs["symbolic_alternating_sizes"].append(us_per_step(symbolic, [a, b], args.steps))
    median = {k: statistics.median(v) for k, v in runs.items()}
    result = {
        "what": f"MLP 784-128-10 inference step, CPU, batch {args.batch} (alternating {args.batch}/{args.batch + 1})",
        "us_per_step_median": median,
        "size_change_cost_us": median["symbolic_alternating_sizes"] - median["symbolic_fixed_size"],
        "runs_us_per_step": runs,
        "steps": args.steps,
        "machine": run_info.host(),
        "commit": run_info.git_commit(),
        "load_average": os.getloadavg(),
        "time": run_info.utc_now(),
    }
    print(json.dumps({k: result[k] for k in ("what", "us_per_step_median", "size_change_cost_us", "load_average")}, indent=1))
    if args.out_dir is not None:
        print(f"wrote {run_info.write_stamped(args.out_dir, 'symbolic-sizes', result)}")


if __name__ == "__main__":
    main()
