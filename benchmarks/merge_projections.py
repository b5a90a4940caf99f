"""The train step with and without ``merge_projections``, side by side on one device:

    python benchmarks/merge_projections.py [--device cpu|cuda] [--layers 4] [--batch 2] [--seq 128]
        [--vocab 8192] [--pairs 7] [--steps 3] [--out result.json]

Builds the LLaMA-style decoder of ``models/tiny_llama.py`` with SmolLM2-135M's widths (hidden 576,
9 heads / 3 KV heads of 64, intermediate 1536; layers, batch, sequence and vocabulary as given) and
two AdamW training sessions from the same weights: q/k/v and gate/up merged into one product each
(the default) and kept separate (``merge_projections=False``). Reports each model's ONNX node counts
by op type and the step time: ``--pairs`` rounds of ``--steps`` steps on A then B (interleaved, so a
change in the machine's load hits both), the median per-step time of each, their ratio and the median
of the rounds' ratios, and the first losses (equal up to float32 rounding). On the CUDA machine, for the full SmolLM2 shape::

    python benchmarks/merge_projections.py --device cuda --layers 30 --batch 8 --seq 256 --vocab 49152
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import run_info

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "models"):
    sys.path.insert(0, str(p))

WIDTHS = {"hidden": 576, "heads": 9, "kv_heads": 3, "intermediate": 1536}


def sessions(a: argparse.Namespace) -> dict:
    import tiny_llama

    from meganeura_onnx.init import default_parameters
    from meganeura_onnx.runtime.training import build_session

    graph = tiny_llama.build(**WIDTHS, vocab=a.vocab, layers=a.layers, seq=a.seq, batch=a.batch)
    params = default_parameters(graph, 0)
    ids = np.random.default_rng(0).integers(0, a.vocab, (a.batch, a.seq + 1))
    out = {}
    for name, merge in (("merged", True), ("separate", False)):
        s = build_session(graph, a.device, optimizer="adamw", parameters=params, merge_projections=merge)
        s.set_input_u32("input_ids", ids[:, :-1].reshape(-1).astype(np.uint32))
        s.set_input_u32("labels", ids[:, 1:].reshape(-1).astype(np.uint32))
        s.step()  # warm-up (and the first loss)
        out[name] = s
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="train step with and without merge_projections, interleaved")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3, help="steps per timed round")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    runs = sessions(a)
    result: dict = {"stamp": run_info.stamp(), "cpu": run_info.cpu_model(), "config": {**WIDTHS, **vars(a), "out": None}}
    for name, s in runs.items():
        nodes = Counter(n.op_type for n in s.onnx_model().graph.node)
        result[name] = {"first_loss": s.read_loss(), "onnx_nodes": sum(nodes.values()), "by_op": dict(nodes.most_common()), "step_ms": []}
    for _ in range(a.pairs):
        for name, s in runs.items():
            t0 = time.perf_counter()
            for _ in range(a.steps):
                s.step()
            s.read_loss()  # waits for the device
            result[name]["step_ms"].append((time.perf_counter() - t0) * 1e3 / a.steps)
    for name in runs:
        result[name]["median_ms"] = statistics.median(result[name]["step_ms"])
    result["merged_over_separate"] = result["merged"]["median_ms"] / result["separate"]["median_ms"]
    paired = [m / s for m, s in zip(result["merged"]["step_ms"], result["separate"]["step_ms"], strict=True)]
    result["paired_ratio_median"] = statistics.median(paired)  # each round's merged / separate: robust to drifting load
    result["stamp"]["load_average_after"] = run_info.load_average()
    run_info.report(result, a.out)


if __name__ == "__main__":
    main()
