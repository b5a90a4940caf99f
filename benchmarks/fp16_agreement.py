"""Half-precision decode against fp32, step by step, on the GPU (the llama benchmark's random
SmolLM2-135M weights and first prompt): fp32's greedy tokens are fed to every session (teacher forcing),
and each step prints whether the argmax agrees, the largest logit difference and fp32's gap between its
two best logits, so a greedy divergence can be told apart from a fault (a near-tie vs large errors).

    python benchmarks/fp16_agreement.py [--steps 40]   # needs onnxruntime-gpu and the CUDA kernel library
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decode_logits(llama, cfg, weights: Path, prompts, prec: str, graph: bool, batch: int, steps: int, tokens=None):
    """Logits of row 0 after the prompt and after each of ``steps`` tokens (fed ``tokens``, or greedy)."""
    kw = dict(max_seq=512, prefill_chunk=128, device="cuda", precision=prec, cuda_graph=graph)
    if batch == 1:
        runner = llama.LlamaRunner(cfg, weights, **kw)
        logits = [runner.prefill(prompts[0])]
    else:
        runner = llama.LlamaBatchRunner(cfg, weights, batch=batch, **kw)
        logits = [runner.prefill(prompts[:batch])[0]]
    fed = []
    for s in range(steps):
        t = int(np.argmax(logits[-1])) if tokens is None else tokens[s]
        fed.append(t)
        logits.append(runner.decode(t) if batch == 1 else runner.decode([t] + [0] * (batch - 1))[0])  # only row 0 is compared
    return fed, logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    bench = load("bench_llama", ROOT / "benchmarks" / "llama.py")
    llama = load("meganeura_models_llama", ROOT / "models" / "llama.py")
    work = Path(tempfile.mkdtemp())
    bench.write_hf_folder(work, "smollm2-135m", 0)
    cfg = llama.load_config(preset="smollm2-135m")
    prompts = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(8, 128)).tolist()
    weights = work / "model.safetensors"
    tokens, ref = decode_logits(llama, cfg, weights, prompts, "fp32", True, 1, a.steps)
    for name, prec, graph, batch in [
        ("fp16 graph b1", "fp16", True, 1),
        ("fp16 nograph b1", "fp16", False, 1),
        ("bf16 graph b1", "bf16", True, 1),
        ("fp16 graph b8", "fp16", True, 8),
    ]:
        _, got = decode_logits(llama, cfg, weights, prompts, prec, graph, batch, a.steps, tokens)
        rows = []
        for s, (x, y) in enumerate(zip(ref, got, strict=True)):
            x, y = x.astype(np.float64), y.astype(np.float64)
            top = np.sort(x)[-2:]
            rows.append(
                (s, int(np.argmax(x) == np.argmax(y)), float(np.abs(x - y).max()), float(top[1] - top[0]), bool(np.isfinite(y).all()))
            )
        first_bad = next((r for r in rows if not r[1]), None)
        diffs = [r[2] for r in rows]
        print(
            f"{name}: max|dlogit| {max(diffs):.4f}, median {np.median(diffs):.4f}, all finite {all(r[4] for r in rows)}, first argmax mismatch {first_bad}"
        )
        print("   (step, same argmax, max|d|, fp32 top-2 gap):", [(r[0], r[1], round(r[2], 3), round(r[3], 3)) for r in rows])


if __name__ == "__main__":
    main()
