"""CPU fused training attention against the decomposed graph: FlashAttention + FlashAttentionGrad.

    python benchmarks/flash_cpu.py                  # prints a table
    python benchmarks/flash_cpu.py --json out.json  # and writes JSON (machine, load average, commit)

One ONNX model holds the forward (output and log-sum-exp) and the backward (dq, dk, dv) of causal
attention over ``batch`` stacked sequences. It runs twice: with our CPU kernel library (the fused,
tiled kernels) and without it (ONNX Runtime inlines the ops' function bodies: batched MatMul,
Softmax pieces, the ``seq x seq`` matrices materialised), at ``--threads`` intra-op threads. The
median of ``--iters`` runs after two warm-ups is reported, wall and process CPU time (steadier on a
loaded machine at one thread); the load average is recorded because a shared machine skews both.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import run_info

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from meganeura_onnx import Graph  # noqa: E402
from meganeura_onnx.export import to_model  # noqa: E402
from meganeura_onnx.runtime.custom_ops import custom_op_library  # noqa: E402

SHAPES = [  # (batch, seq, heads, kv_heads, head_dim): the tiny LLaMA's, and SmolLM2-135M's heads at short sequences
    (4, 64, 4, 2, 16),
    (2, 128, 9, 3, 64),
    (1, 256, 9, 3, 64),
]


def attention_train_model(b: int, t: int, h: int, kvh: int, hd: int) -> bytes:
    g = Graph()
    q, dy = g.input("q", [b * t, h * hd]), g.input("dy", [b * t, h * hd])
    k, v = g.input("k", [b * t, kvh * hd]), g.input("v", [b * t, kvh * hd])
    a = {"num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "causal": True, "batch": b}
    out, lse = (g.apply("flash_attention", q, k, v, **a, part=p) for p in (0, 1))
    grads = [g.apply("flash_attention_backward", q, k, v, out, dy, lse, **a, part=p) for p in range(3)]
    g.set_outputs({"out": out, "dq": grads[0], "dk": grads[1], "dv": grads[2]})
    model, _ = to_model(g)
    return model.SerializeToString()


def time_session(model: bytes, library: str | None, feeds: dict, threads: int, iters: int) -> tuple[float, float]:
    """Median wall and process-CPU milliseconds per run (CPU time is steadier on a loaded machine)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    if library is not None:
        so.register_custom_ops_library(library)
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    for _ in range(2):
        sess.run(None, feeds)
    wall, cpu = [], []
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.process_time()
        sess.run(None, feeds)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return float(np.median(wall)) * 1e3, float(np.median(cpu)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    library = custom_op_library("cpu")
    if library is None:
        sys.exit("flash_cpu: the CPU kernel library is not built (make -C custom_ops cpu)")
    load_before = run_info.load_average()
    rows = []
    for b, t, h, kvh, hd in SHAPES:
        rng = np.random.default_rng(0)
        feeds = {n: rng.standard_normal((b * t, w * hd)).astype(np.float32) for n, w in (("q", h), ("dy", h), ("k", kvh), ("v", kvh))}
        model = attention_train_model(b, t, h, kvh, hd)
        for threads in args.threads:
            (fused, fused_cpu), (decomposed, decomposed_cpu) = (
                time_session(model, lib, feeds, threads, args.iters) for lib in (library, None)
            )
            row = {"batch": b, "seq": t, "heads": h, "kv_heads": kvh, "head_dim": hd, "threads": threads}
            row |= {
                "fused_ms": round(fused, 3),
                "decomposed_ms": round(decomposed, 3),
                "fused_over_decomposed": round(fused / decomposed, 3),
            }
            row |= {"fused_cpu_ms": round(fused_cpu, 3), "decomposed_cpu_ms": round(decomposed_cpu, 3)}
            rows.append(row)
            print(
                f"B={b} T={t} H={h}/{kvh} hd={hd} threads={threads}: fused {fused:.2f} ms (cpu {fused_cpu:.2f}), "
                f"decomposed {decomposed:.2f} ms (cpu {decomposed_cpu:.2f}): {fused / decomposed:.2f}x",
                flush=True,
            )
    info = {
        "benchmark": "flash_cpu",
        "what": "forward + backward of causal attention, median ms per run (ORT CPU EP)",
        "cpu": run_info.cpu_model(),
        "load_average_before": load_before,
        "load_average_after": run_info.load_average(),
        "commit": run_info.git_commit(),
        "dirty": run_info.git_dirty(),
        "onnxruntime": ort.__version__,
        "rows": rows,
    }
    print(f"load average before {load_before}, after {info['load_average_after']}")
    if args.json:
        args.json.write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
