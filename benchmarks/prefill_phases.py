"""Where a LLaMA prefill's wall time goes on the host: ``LlamaRunner.prefill`` timed phase by phase.

The device timeline (``gpu_timeline.py``) shows the kernels; this shows the rest of the call, without a
profiler (CUPTI lengthens launches). ``models/llama.py``'s own ``prefill`` runs unchanged; the timer
wraps the session methods it calls on that runner's two sessions:

- ``share_in``: the prefill session takes the decoder's KV-cache buffers (``share_buffers``);
- ``upload``: token ids, start position and last row (``set_input_u32``, three calls);
- ``step``: the run (CUDA: the graph replay, waited for);
- ``share_out``: the decoder takes the caches back;
- ``read``: the logits of the last row to the host;
- ``rest``: the call's wall time minus those (argument checks, Python);
- ``whole``: ``int(argmax(prefill(prompt)))``, as ``benchmarks/llama.py`` times it.

SmolLM2-135M shape, random weights, a 128-token prompt in one chunk, ``--repeat`` timed calls after
three warm-up calls; per phase the median and range in microseconds.

``--variants``: ``default``, ``unfused-norm`` (``add_rms_norm=False``: the residual adds and RMSNorms as
separate nodes, as before ``AddRMSNorm``) and/or ``unfused-qkv`` (``qkv_rope_cache=False``: each layer's
Split, Rope, RopeCacheWrite and CacheWrite, as before ``QKVRopeCacheWrite``) and/or ``unpacked-swiglu``
(``swiglu_packed=False``: each layer's gate|up Split and SwiGLU, as before ``SwiGLUPacked``), built and timed one
after the other.

    python benchmarks/prefill_phases.py [--device cuda] [--precisions fp16,fp32] [--variants default,unfused-norm,unfused-qkv,unpacked-swiglu] [--repeat 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "benchmarks"):
    sys.path.insert(0, str(p))

import run_info  # noqa: E402

PHASES = ("share_in", "upload", "step", "share_out", "read")
VARIANTS = {
    "default": {},
    "unfused-norm": {"add_rms_norm": False},
    "unfused-qkv": {"qkv_rope_cache": False},
    "unpacked-swiglu": {"swiglu_packed": False},
}


def timed(times: dict[str, float], phase: str, fn: Callable) -> Callable:
    """``fn`` adding its wall time to ``times[phase]`` on each call."""

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            times[phase] += time.perf_counter() - t0

    return wrapper


def instrument(runner, times: dict[str, float]) -> None:
    """Wrap the methods ``runner.prefill`` calls on its sessions (instance attributes: the class is untouched)."""
    s, d = runner.prefiller, runner.decoder
    s.share_buffers = timed(times, "share_in", s.share_buffers)
    s.set_input_u32 = timed(times, "upload", s.set_input_u32)
    s.step = timed(times, "step", s.step)
    d.share_buffers = timed(times, "share_out", d.share_buffers)
    s.read_output_by_index = timed(times, "read", s.read_output_by_index)


def phases(runner, prompt: list[int], repeat: int) -> dict:
    times = dict.fromkeys(PHASES, 0.0)
    instrument(runner, times)
    for _ in range(3):
        int(np.argmax(runner.prefill(prompt)))
    rows: dict[str, list[float]] = {k: [] for k in (*PHASES, "rest", "whole")}
    for _ in range(repeat):
        times.update(dict.fromkeys(PHASES, 0.0))
        t0 = time.perf_counter()
        int(np.argmax(runner.prefill(prompt)))
        whole = time.perf_counter() - t0
        for k in PHASES:
            rows[k].append(times[k] * 1e6)
        rows["rest"].append((whole - sum(times.values())) * 1e6)
        rows["whole"].append(whole * 1e6)
    return {k: {"median_us": round(statistics.median(v), 1), "range_us": [round(min(v), 1), round(max(v), 1)]} for k, v in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precisions", default="fp32", help="comma-separated: fp32, fp16, bf16")
    ap.add_argument("--variants", default="default", help=f"comma-separated: {', '.join(VARIANTS)}")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--out", default=None, help="JSON file to write [default: print only]")
    a = ap.parse_args()
    import onnxruntime
    from llama_sides import load_llama_module

    llama = load_llama_module()
    cfg = llama.PRESETS["smollm2-135m"]
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 128)]
    res: dict = {**run_info.stamp(), "device": a.device, "versions": {"onnxruntime": onnxruntime.__version__}, "prefill": {}}
    for precision in a.precisions.split(","):
        for variant in a.variants.split(","):
            runner = llama.LlamaRunner(cfg, None, max_seq=256, prefill_chunk=128, device=a.device, precision=precision, **VARIANTS[variant])
            tag = precision if variant == "default" else f"{precision}-{variant}"
            res["prefill"][tag] = r = phases(runner, prompt, a.repeat)
            print(tag, "  ".join(f"{k} {v['median_us']:.0f} us" for k, v in r.items()), flush=True)
            del runner
            gc.collect()
    run_info.report(res, Path(a.out) if a.out else None)


if __name__ == "__main__":
    main()
