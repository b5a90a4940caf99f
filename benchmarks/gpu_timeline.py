"""Where the GPU's time goes: every kernel of our train step, decode step and prefill, from CUPTI.

ONNX Runtime's own profiler times each node on the host (its ``kernel_time`` is how long the
launch call took, which includes waits for a full launch queue), so it cannot say which kernels the
GPU spends its time in. This script records the device timeline with ``torch.profiler`` (CUPTI sees
every kernel of the process, ORT's and cuBLAS's included, also inside CUDA graphs) around a few steps:

- ``train``: the SmolLM2-135M-shaped AdamW step of ``benchmarks/train_gpu.py`` (fp32, bf16 as a CUDA
  graph) and Hugging Face ``LlamaForCausalLM`` eager fp32 on the same weights and batch;
- ``decode``: ``LlamaRunner`` (``models/llama.py``), SmolLM2-135M shape, random weights: the one-token
  decode step and the 128-token prefill, fp32 and fp16, CUDA graph on and off; with the graph also
  greedy decoding on the device (``decode_greedy``, 16 tokens per call as ``generate`` runs, per token).
- ``prefill``: the 128-token prefill as a CUDA graph, fp16 and fp32, q/k/v and gate/up merged into one
  product each (the default) and separate.

Per variant: wall time per step, GPU busy time per step (union of kernel / copy / memset intervals),
kernels per step, and the kernels by total device time (name, launches per step, us per step); also
the device's idle time (between its events inside a step, and between steps while
the host works), its largest idle gaps with the events on either side, and the host's CUDA runtime and
driver calls by total time.

    python benchmarks/gpu_timeline.py OUT.json [--parts train,decode,prefill]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "benchmarks", ROOT / "models"):
    sys.path.insert(0, str(p))

import run_info  # noqa: E402

DEVICE_EVENTS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_API_EVENTS = ("cuda_runtime", "cuda_driver")
GREEDY_CHUNK = 16


def timeline(step: Callable[[], None], steps: int, sync: Callable[[], None], per_call: int = 1) -> dict:
    """``steps`` calls of ``step`` under CUPTI (after three untimed ones): per-step wall, busy, kernels
    (a step is 1 / ``per_call`` of a call: ``decode_greedy`` runs ``per_call`` tokens per call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall = (time.perf_counter() - t0) / (steps * per_call)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        all_events = json.loads(trace.read_text())["traceEvents"]
    del torch
    events = [e for e in all_events if e.get("cat") in DEVICE_EVENTS and "dur" in e]
    host_calls = [e for e in all_events if e.get("cat") in HOST_API_EVENTS and "dur" in e]
    return {**summarize(events, steps * per_call, wall), "cuda_api_calls": api_calls(host_calls, steps * per_call)}


def by_total_time(events: list[dict], name_chars: int) -> list[tuple[str, list[float]]]:
    """(name, durations) per event name (its first ``name_chars`` characters), longest total first."""
    by_name: dict[str, list[float]] = {}
    for e in events:
        by_name.setdefault(e["name"][:name_chars], []).append(e["dur"])
    return sorted(by_name.items(), key=lambda kv: -sum(kv[1]))


def api_calls(events: list[dict], steps: int) -> list[dict]:
    """The host's CUDA runtime / driver calls by total time (e.g. how long ``cudaGraphLaunch`` keeps the
    host before the device starts, or a synchronisation waiting for it)."""
    top = by_total_time(events, 60)[:10]
    return [{"name": n, "per_step": len(d) / steps, "us_per_step": sum(d) / steps} for n, d in top]


def summarize(events: list[dict], steps: int, wall_s: float) -> dict:
    spans = sorted((e["ts"], e["ts"] + e["dur"], e["name"][:80]) for e in events)
    busy, end, last = 0.0, -1e30, ""
    gaps: list[tuple[float, str, str]] = []  # idle device time between events: (us, the event before, the one after)
    for a, b, name in spans:  # union of the device intervals (concurrent kernels counted once)
        if a > end and end > -1e30:
            gaps.append((a - end, last, name))
        if b > end:
            busy += b - max(a, end)
            end, last = b, name
    top = by_total_time(events, 120)
    return {
        "wall_us_per_step": wall_s * 1e6,
        "gpu_busy_us_per_step": busy / steps,
        "device_events_per_step": len(events) / steps,
        # Where the device waits: between its events inside a step (launch gaps) and between steps (host work).
        "idle_us_per_step": sum(g[0] for g in gaps) / steps,
        "idle_gaps_over_5us_per_step": sum(1 for g in gaps if g[0] > 5) / steps,
        "largest_idle_gaps": [{"us": round(g[0], 1), "after": g[1], "before": g[2]} for g in sorted(gaps, reverse=True)[:8]],
        "kernels": [
            {"name": n, "per_step": len(d) / steps, "us_per_step": sum(d) / steps, "mean_us": float(np.mean(d))} for n, d in top[:40]
        ],
    }


def train_variants(steps: int) -> dict:
    import torch
    import train_gpu

    cfg = dict(train_gpu.SMOL)
    import tiny_llama

    from meganeura_onnx.init import default_parameters

    params = default_parameters(tiny_llama.build(**cfg, seq=train_gpu.SEQ, batch=train_gpu.BATCH), 0)
    inp, tgt = train_gpu._data(cfg)
    out = Path(tempfile.mkdtemp())
    res = {}
    for name, kw in {"ours_fp32": {"precision": "fp32"}, "ours_bf16_cuda_graph": {"precision": "bf16", "cuda_graph": True}}.items():
        s = train_gpu._session(cfg, params, out, **kw)
        s.set_adamw(train_gpu.LR, weight_decay=train_gpu.WD)
        s.set_input_u32("input_ids", inp)
        s.set_input_u32("labels", tgt)
        res[name] = timeline(s.step, steps, lambda: None)
        print(name, {k: v for k, v in res[name].items() if k != "kernels"}, flush=True)
        del s
        gc.collect()
    torch.backends.cuda.matmul.allow_tf32 = False
    model = train_gpu.hf_model(cfg, params)
    opt = torch.optim.AdamW(model.parameters(), lr=train_gpu.LR, weight_decay=train_gpu.WD)
    ids = torch.tensor(inp.astype(np.int64), device="cuda").view(train_gpu.BATCH, train_gpu.SEQ)
    labels = torch.tensor(tgt.astype(np.int64), device="cuda")

    def hf_step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(input_ids=ids).logits.view(-1, cfg["vocab"]), labels)
        loss.backward()
        opt.step()

    res["hf_eager_fp32"] = timeline(hf_step, steps, torch.cuda.synchronize)
    print("hf_eager_fp32", {k: v for k, v in res["hf_eager_fp32"].items() if k != "kernels"}, flush=True)
    return res


def smollm2_and_prompt() -> tuple:
    """``models/llama.py`` (loaded as the benchmark's workers load it), SmolLM2-135M's config and a
    128-token random prompt."""
    from llama_sides import load_llama_module

    llama = load_llama_module()
    cfg = llama.PRESETS["smollm2-135m"]
    return llama, cfg, list(np.random.default_rng(0).integers(0, cfg.vocab_size, 128))


def decode_variants(steps: int) -> dict:
    llama, cfg, prompt = smollm2_and_prompt()
    res = {}
    for precision in ("fp32", "fp16"):
        for graph in (True, False):
            runner = llama.LlamaRunner(
                cfg,
                None,
                max_seq=128 + 3 * steps + 8 + 5 * GREEDY_CHUNK,
                prefill_chunk=128,
                device="cuda",
                cuda_graph=graph,
                precision=precision,
            )
            tag = f"{precision}{'_cuda_graph' if graph else ''}"
            res[f"prefill_{tag}"] = timeline(functools.partial(runner.prefill, prompt), 3, lambda: None)
            runner.prefill(prompt)
            res[f"decode_{tag}"] = timeline(functools.partial(runner.decode, 7), steps, lambda: None)
            if graph:  # the argmax, next position and token log on the device, queued 16 steps per wait
                greedy = functools.partial(runner.decode_greedy, 7, GREEDY_CHUNK)
                res[f"decode_greedy_{tag}"] = timeline(greedy, 2, lambda: None, per_call=GREEDY_CHUNK)
            for k in [k for k in res if k.endswith(tag)]:
                print(k, {a: b for a, b in res[k].items() if a != "kernels"}, flush=True)
            del runner
            gc.collect()
    return res


PREFILL_VARIANTS = {
    "": {},
    "_separate_projections": {"merge_projections": False},
    "_unfused_norm": {"add_rms_norm": False},
    "_unfused_qkv": {"qkv_rope_cache": False},
    "_unpacked_swiglu": {"swiglu_packed": False},
}
"""Prefill variants by tag suffix: the default (q/k/v and gate/up merged into one product each, each
residual add + RMSNorm one ``AddRMSNorm``, each layer's q/k/v placement one ``QKVRopeCacheWrite``), separate
products, the adds and norms unfused, the q/k/v split, ropes and cache writes unfused, and the gate|up split
kept before SwiGLU (no ``SwiGLUPacked``)."""


def prefill_variants(steps: int) -> dict:
    """The 128-token prefill replayed as a CUDA graph, fp16 and fp32, in each of :data:`PREFILL_VARIANTS`."""
    llama, cfg, prompt = smollm2_and_prompt()
    res = {}
    for precision in ("fp16", "fp32"):
        for suffix, variant in PREFILL_VARIANTS.items():
            kw = dict(max_seq=256, prefill_chunk=128, device="cuda", cuda_graph=True, precision=precision, **variant)
            runner = llama.LlamaRunner(cfg, None, **kw)
            tag = f"prefill_{precision}_cuda_graph{suffix}"
            res[tag] = timeline(functools.partial(runner.prefill, prompt), steps, lambda: None)
            print(tag, {a: b for a, b in res[tag].items() if a != "kernels"}, flush=True)
            del runner
            gc.collect()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--parts", default="train,decode", help="comma-separated: train, decode, prefill")
    ap.add_argument("--steps", type=int, default=10, help="profiled train steps (decode: 4x as many tokens)")
    a = ap.parse_args()
    import onnxruntime
    import torch

    res: dict = {
        "host": run_info.host(),
        "date": run_info.utc_now(),
        "git_commit": run_info.git_commit(),
        **run_info.code_digests(),
        "versions": {"onnxruntime": onnxruntime.__version__, "torch": torch.__version__},
        "gpu": torch.cuda.get_device_name(),
    }
    if "train" in a.parts:
        res["train"] = train_variants(a.steps)
    if "decode" in a.parts:
        res["decode"] = decode_variants(4 * a.steps)
    if "prefill" in a.parts:
        res["prefill"] = prefill_variants(a.steps)
    Path(a.out).write_text(json.dumps(res, indent=1))
    for part in ("train", "decode", "prefill"):
        for name, r in res.get(part, {}).items():
            print(
                f"\n== {name}: wall {r['wall_us_per_step']:.1f} us, busy {r['gpu_busy_us_per_step']:.1f} us, idle {r['idle_us_per_step']:.1f} us, {r['device_events_per_step']:.0f} device events per step"
            )
            for k in r["kernels"][:15]:
                print(f"  {k['us_per_step']:9.1f} us  x{k['per_step']:6.1f}  {k['name'][:100]}")
            for c in r.get("cuda_api_calls", [])[:6]:
                print(f"  host {c['us_per_step']:8.1f} us  x{c['per_step']:6.1f}  {c['name']}")
            for gap in r["largest_idle_gaps"][:4]:
                print(f"  idle {gap['us']:8.1f} us  after {gap['after'][:50]}  before {gap['before'][:50]}")


if __name__ == "__main__":
    main()
