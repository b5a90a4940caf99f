"""LlamaRunner's prefill by prompt length: the default (one step of the prompt's rows: on CUDA a fixed
64-row CUDA graph up to 64 tokens, a symbolic-rows session without a graph beyond) against fixed 64-row
chunks (the default before) and one fixed chunk of the prompt rounded up to 64 (``meganeura generate``'s
session; CUDA graph on CUDA).

Per variant and prompt length: the first prefill (what a one-shot user waits for: on CUDA it includes
capturing the CUDA graph; a new runner each time) and the median, min and max of ``--repeat`` later
prefills of the same prompt (each returns its logits to the host, so each is timed to completion).
Random SmolLM2-135M weights (``--preset``); the variants alternate within each round. ``--mixed``: one
default runner prefills prompts of the given lengths in turn, each timed (the first call past the graph
steps builds the symbolic-rows session; a length new to it allocates its buffers).

    python benchmarks/prefill_any_length.py --device cuda --precision fp16 --lengths 64 128 512 2048
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import run_info
from meganeura_onnx.models import llama

VARIANTS = {
    "default": lambda n: None,  # one step (CUDA: the 64-row graph up to 64 tokens)
    "chunks64": lambda n: 64,  # the default before
    "one_fixed_chunk": lambda n: -(-n // 64) * 64,  # meganeura generate's session
}


def time_variant(cfg, chunk: int | None, prompt: list[int], args) -> dict:
    t0 = time.perf_counter()
    runner = llama.LlamaRunner(cfg, max_seq=args.max_seq, prefill_chunk=chunk, device=args.device, precision=args.precision, seed=1)
    build = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat + 1):
        t0 = time.perf_counter()
        logits = runner.prefill(prompt)
        times.append(time.perf_counter() - t0)
    steps, rows = runner.prefill_plan(len(prompt))
    later = [t * 1e3 for t in times[1:]]
    return {
        "chunk_arg": chunk,
        "steps": steps,
        "rows_per_step": rows,
        "build_s": round(build, 3),
        "first_ms": round(times[0] * 1e3, 3),
        "median_ms": round(statistics.median(later), 3),
        "min_ms": round(min(later), 3),
        "max_ms": round(max(later), 3),
        "argmax": int(np.argmax(logits)),
    }


def time_mixed(cfg, lengths: list[int], rng, args) -> list[dict]:
    runner = llama.LlamaRunner(cfg, max_seq=args.max_seq, device=args.device, precision=args.precision, seed=1)
    rows = []
    for n in lengths:
        prompt = rng.integers(0, cfg.vocab_size, n).tolist()
        t0 = time.perf_counter()
        runner.prefill(prompt)
        rows.append({"prompt_tokens": n, "ms": round((time.perf_counter() - t0) * 1e3, 3), "plan": list(runner.prefill_plan(n))})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--preset", default="smollm2-135m")
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 300])
    ap.add_argument("--max-seq", type=int, default=2112)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mixed", type=int, nargs="*", default=[], help="prompt lengths one default runner takes in turn")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = ap.parse_args()
    cfg = llama.PRESETS[args.preset]
    rng = np.random.default_rng(0)
    rows = []
    for n in args.lengths:
        if n > args.max_seq:
            raise SystemExit(f"--lengths: {n} tokens do not fit --max-seq {args.max_seq}")
        prompt = rng.integers(0, cfg.vocab_size, n).tolist()
        for rnd in range(args.rounds):
            for name, chunk_of in VARIANTS.items():
                row = {"prompt_tokens": n, "round": rnd, "variant": name, **time_variant(cfg, chunk_of(n), prompt, args)}
                print(row, flush=True)
                rows.append(row)
    result = {
        "what": __doc__.splitlines()[0],
        "command": " ".join(["python", *sys.argv]),
        "device": args.device,
        "precision": args.precision,
        "preset": args.preset,
        **run_info.stamp(),
        "results": rows,
        "mixed": time_mixed(cfg, args.mixed, rng, args) if args.mixed else [],
    }
    run_info.report(result, args.out)


if __name__ == "__main__":
    main()
