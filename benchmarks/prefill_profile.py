"""Where a CPU prefill's time goes, by ONNX op type: ONNX Runtime's own profile of ``LlamaRunner``'s
prefill session (``session_options={"enable_profiling": True}``).

One runner (random weights of ``--preset``, one prefill step of ``--rows`` tokens) prefills ``--repeat``
+ 1 times; the first run is left out. Per op type: the nodes per run, and the median over runs of the
summed node time (ORT's ``*_kernel_time`` events inside each ``model_run``), in ms and as a share of
all node time. Node time excludes what ORT spends between nodes, so the shares add up to the nodes'
part of the wall time, which is reported too.

    python benchmarks/prefill_profile.py --rows 128 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import run_info
from meganeura_onnx.models import llama


def runs_by_op(trace: list[dict]) -> list[tuple[Counter, Counter, float]]:
    """Per ``model_run`` event of the trace: (microseconds per op type, nodes per op type, run us)."""
    runs = sorted((e for e in trace if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"])
    nodes = [e for e in trace if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    out = []
    for run in runs:
        lo, hi = run["ts"], run["ts"] + run["dur"]
        us, count = Counter(), Counter()
        for e in nodes:
            if lo <= e["ts"] <= hi:
                us[e["args"]["op_name"]] += e["dur"]
                count[e["args"]["op_name"]] += 1
        out.append((us, count, float(run["dur"])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=128, help="prompt tokens (one prefill step)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = ap.parse_args()
    if args.repeat < 1:
        raise SystemExit(f"--repeat: at least 1 timed run is needed, got {args.repeat}")
    cfg = llama.PRESETS[args.preset]
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, args.rows).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        opts = {"enable_profiling": True, "profile_file_prefix": str(Path(tmp) / "prefill")}
        runner = llama.LlamaRunner(cfg, max_seq=max(256, args.rows), prefill_chunk=args.rows, seed=1, session_options=opts)
        wall = []
        for _ in range(args.repeat + 1):
            t0 = time.perf_counter()
            runner.prefill(prompt)
            wall.append((time.perf_counter() - t0) * 1e3)
        trace = json.loads(Path(runner.prefiller.end_profiling()).read_text())
        runner.decoder.end_profiling()  # its trace too is written now, while the directory exists
    runs = runs_by_op(trace)[1:]  # the first run is left out (allocations, first touches)
    if len(runs) != args.repeat:
        raise SystemExit(f"the profile has {len(runs) + 1} runs of the prefill session, expected {args.repeat + 1}")
    total = statistics.median(sum(us.values()) for us, _, _ in runs)
    ops = sorted({op for us, _, _ in runs for op in us}, key=lambda op: -statistics.median(us[op] for us, _, _ in runs))
    rows = []
    for op in ops:
        ms = statistics.median(us[op] for us, _, _ in runs) / 1e3
        rows.append(
            {"op_type": op, "nodes_per_run": runs[0][1][op], "median_ms": round(ms, 3), "share_of_node_time": round(ms * 1e3 / total, 4)}
        )
        print(f"{op:30s} {rows[-1]['nodes_per_run']:4d} nodes {ms:9.2f} ms {100 * rows[-1]['share_of_node_time']:6.1f}%")
    result = {
        "what": __doc__.splitlines()[0],
        "command": " ".join(["python", *sys.argv]),
        "preset": args.preset,
        "rows": args.rows,
        "node_time_median_ms": round(total / 1e3, 3),
        "run_median_ms": round(statistics.median(d for _, _, d in runs) / 1e3, 3),
        "prefill_wall_ms": [round(w, 3) for w in wall[1:]],
        **run_info.stamp(),
        "results": rows,
    }
    run_info.report(result, args.out)


if __name__ == "__main__":
    main()
