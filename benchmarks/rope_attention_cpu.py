"""CPU decode step with and without the rope + cache-write + attention fusion (RopeCachedAttention).

    python benchmarks/rope_attention_cpu.py [--preset smollm2-135m] [--steps 64] [--out FILE]

The decode step of ``models/llama.py`` is optimized as a CPU session does (the e-graph optimizer, no norm
+ projection fusion) once without and once with ``rope_attention``, and each is run for ``--steps``
tokens from position ``--start`` with the same parameters; the logits of the two must agree. Prints
(and with ``--out`` writes) JSON: the median and mean step time of each (wall clock, ORT's intra-op
threads as configured), the ONNX nodes per step, machine and load average. Sessions alternate per
repeat so that load drift hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import run_info


def _session(g, params, rope_attention: bool):
    from meganeura_onnx import build_inference_session
    from meganeura_onnx.transforms.rewrite import optimize

    compiled, _ = optimize(g, stage="inference", decode_fusion=False, rope_attention=rope_attention)
    return build_inference_session(compiled, "cpu", parameters=params, optimize=False)


def main(argv: list[str] | None = None) -> dict:
    import numpy as np
    from meganeura_onnx.models import llama

    from meganeura_onnx.init import default_parameters

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smollm2-135m")
    ap.add_argument("--max-seq", type=int, default=512)
    ap.add_argument("--start", type=int, default=128, help="position of the first timed token")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    g = llama.build_graph(llama.PRESETS[args.preset], "decode", 1, args.max_seq)
    params = default_parameters(g, 0)
    sessions = {"separate ops": _session(g, params, False), "RopeCachedAttention": _session(g, params, True)}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(0, 1000, args.start + args.steps)]
    for _ in range(args.repeats):
        for name, s in sessions.items():
            for pos, tok in enumerate(tokens):
                s.set_input_u32("input_ids", [tok])
                s.set_input_u32("kv_pos", [pos])
                t0 = time.perf_counter()
                s.step()
                if pos >= args.start:
                    times[name].append(time.perf_counter() - t0)
    a, b = (s.read_output_by_index(0) for s in sessions.values())
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    result = {
        "what": f"CPU decode step of {args.preset}, positions {args.start}..{args.start + args.steps - 1}, {args.repeats} repeats",
        "ms_per_step": {k: {"median": 1e3 * statistics.median(v), "mean": 1e3 * statistics.fmean(v)} for k, v in times.items()},
        "onnx_nodes": {k: len(s.onnx_model().graph.node) for k, s in sessions.items()},
        "machine": run_info.stamp(),
    }
    return run_info.report(result, args.out)


if __name__ == "__main__":
    main()
