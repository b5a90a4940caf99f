"""What the CUDA kernels' position read-back costs outside CUDA graphs, in one run on one GPU.

Each workload runs twice: as our Session builds it (``check_positions=0``: the Session validates
positions and token ids, the kernels read nothing back) and with every position op told to read its
positions back and synchronise the stream (``check_positions=1``, what an ONNX file run by plain
ONNX Runtime with our kernel library does, and what every Session did before):

- prefill of ``--prompt-len`` tokens and decode without a CUDA graph (SmolLM2-135M shape, fp32);
- one SmolLM2-135M-shaped train step (batch x seq as in ``train_gpu.py``; AdamW; no CUDA graph).

Writes ``position_checks.json`` (medians of ``--repeat`` runs, min/max, load average) to ``out_dir``.
Usage: ``python benchmarks/position_checks.py OUT_DIR [--layers 30] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "models"):
    sys.path.insert(0, str(p))

from meganeura_onnx.runtime import session as session_module  # noqa: E402

SMOL = {"vocab": 49152, "hidden": 576, "heads": 9, "kv_heads": 3, "intermediate": 1536}
BATCH, SEQ = 8, 256


def _median(fn: Callable[[], float], repeat: int) -> dict:
    fn()  # warm-up (allocations, ORT's first run)
    runs = [fn() for _ in range(repeat)]
    return {"median": statistics.median(runs), "min": min(runs), "max": max(runs), "runs": runs}


def _readback(on: bool):
    """A context in which new Sessions keep every kernel's position read-back (``on``), or a no-op."""
    return mock.patch.object(session_module, "skip_kernel_position_checks", lambda model, checked: 0) if on else contextlib.nullcontext()


def inference(layers: int, prompt_len: int, new_tokens: int, repeat: int, device: str = "cuda") -> dict:
    from llama import PRESETS, LlamaRunner

    cfg = PRESETS["smollm2-135m"]
    cfg = dataclasses.replace(cfg, num_hidden_layers=layers)
    prompt = list(np.random.default_rng(0).integers(0, cfg.vocab_size, prompt_len))
    out = {}
    for label, readback in (("session_checks", False), ("kernel_readback", True)):
        with _readback(readback):
            runner = LlamaRunner(cfg, device=device, max_seq=prompt_len + new_tokens + 1, prefill_chunk=prompt_len, cuda_graph=False)

        def prefill(runner=runner) -> float:
            t0 = time.perf_counter()
            runner.prefill(prompt)
            return (time.perf_counter() - t0) * 1e3

        def decode(runner=runner) -> float:
            runner.prefill(prompt)
            t0 = time.perf_counter()
            for t in range(new_tokens):
                runner.decode(int(t % cfg.vocab_size))
            return new_tokens / (time.perf_counter() - t0)

        out[label] = {"prefill_ms": _median(prefill, repeat), "decode_tokens_per_s": _median(decode, repeat)}
        del runner
    return out


def training(layers: int, repeat: int, steps: int, device: str = "cuda", batch: int = BATCH, seq: int = SEQ) -> dict:
    import tiny_llama

    from meganeura_onnx.runtime.training import build_session

    graph = tiny_llama.build(**SMOL, layers=layers, seq=seq, batch=batch)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, SMOL["vocab"], (batch, seq + 1))
    out = {}
    for label, readback in (("session_checks", False), ("kernel_readback", True)):
        with _readback(readback):
            s = build_session(graph, device, optimizer="adamw")
        s.set_adamw(1e-4, weight_decay=0.01)
        s.set_input_u32("input_ids", ids[:, :-1].reshape(-1).astype(np.uint32))
        s.set_input_u32("labels", ids[:, 1:].reshape(-1).astype(np.uint32))

        def step(s=s) -> float:
            t0 = time.perf_counter()
            for _ in range(steps):
                s.step()
            return (time.perf_counter() - t0) / steps * 1e3

        out[label] = {"step_ms": _median(step, repeat)}
        del s
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=5)
    args = ap.parse_args()
    res = {
        "load_average": os.getloadavg(),
        "layers": args.layers,
        "inference_fp32_no_cuda_graph": inference(args.layers, args.prompt_len, args.new_tokens, args.repeat),
        "train_step_fp32_no_cuda_graph": training(args.layers, args.repeat, args.train_steps),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "position_checks.json").write_text(json.dumps(res, indent=2, default=float))
    print(json.dumps(res, indent=2, default=float))


if __name__ == "__main__":
    main()
