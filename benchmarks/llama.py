"""LLaMA decode benchmark: meganeura-onnx (ONNX Runtime) vs Hugging Face ``transformers.generate``.

SmolLM2-135M shape with random weights (the same weights in both), batch 1, fp32, greedy. Both run
in this one process on the same device. Measured:

- prefill: time to run the prompt and get the first token's logits (median of ``--repeat`` runs);
- decode tokens/s: ``(new_tokens - 1) / (time of the generation after the first token)``. For
  transformers that is ``generate(max_new_tokens=N)`` minus ``generate(max_new_tokens=1)`` (its
  prefill), both medians;
- end-to-end tokens/s: ``new_tokens / (prefill + decode)``.

Precision: fp32 everywhere; on CUDA both sides use strict fp32 matmuls (ORT ``use_tf32=0``, torch
``allow_tf32=False``). Results go to ``<out-dir>/llama-<device>-<host>-<time>.json``.

    python benchmarks/llama.py --device cpu --new-tokens 32 --out-dir benchmarks/results
    python benchmarks/llama.py --device cuda --out-dir benchmarks/results      # on the GPU machine
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from meganeura_onnx.generation import generate  # noqa: E402
from meganeura_onnx.init import default_parameters  # noqa: E402


def _load_model_file(path: Path):
    # Not through meganeura_onnx.cli: on a machine where the package is not installed, only ROOT is on the path.
    import importlib.util

    spec = importlib.util.spec_from_file_location("meganeura_bench_llama", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


llama = _load_model_file(ROOT / "models" / "llama.py")


def machine(device: str) -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(), "host": socket.gethostname(), "cpus": os.cpu_count()}
    if hasattr(os, "getloadavg"):
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]  # other work on a shared machine skews timings
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if device == "cuda":
        try:
            info["gpu"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["gpu"] = "unknown"
    import onnxruntime as ort

    info["onnxruntime"] = ort.__version__
    info["onnxruntime_providers"] = ort.get_available_providers()
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        info["git_dirty"] = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip())
    except OSError:
        pass
    return info


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def bench_ours(
    cfg, params: dict, prompt: list[int], n_new: int, device: str, chunk: int, repeat: int, cuda_graph: bool = False
) -> tuple[dict, list[int]]:
    t0 = time.perf_counter()
    runner = llama.LlamaRunner(cfg, params, max_seq=len(prompt) + n_new, prefill_chunk=chunk, device=device, cuda_graph=cuda_graph)
    build_s = time.perf_counter() - t0
    list(generate(runner, prompt, 4))  # warm-up: first runs allocate and tune
    prefill, decode, tokens = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        first = int(np.argmax(runner.prefill(prompt)))
        t1 = time.perf_counter()
        tokens = [first]
        for _ in range(n_new - 1):
            tokens.append(int(np.argmax(runner.decode(tokens[-1]))))
        t2 = time.perf_counter()
        prefill.append(t1 - t0)
        decode.append(t2 - t1)
    p, d = statistics.median(prefill), statistics.median(decode)
    plan = runner.decoder.plan()
    return {
        "session_build_s": round(build_s, 3),
        "prefill_ms": round(p * 1e3, 2),
        "decode_tokens_per_s": round((n_new - 1) / d, 2),
        "end_to_end_tokens_per_s": round(n_new / (p + d), 2),
        "prefill_chunk": runner.chunk,
        "cuda_graph_decode": cuda_graph,
        "custom_ops": plan.kernels(),
        "providers": plan.providers,
    }, tokens


def bench_transformers(cfg, params: dict, prompt: list[int], n_new: int, device: str, attn: str, repeat: int) -> tuple[dict, list[int]]:
    import torch
    import transformers

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hf_cfg = transformers.LlamaConfig(**{k: v for k, v in cfg.to_dict().items() if k not in ("architectures",)})
    hf_cfg.rope_parameters = {"rope_theta": cfg.rope_theta, "rope_type": "default"}
    model = transformers.LlamaForCausalLM._from_config(hf_cfg, attn_implementation=attn, dtype=torch.float32)
    state = {k: torch.from_numpy(v) for k, v in params.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"transformers model does not take the weights: missing {missing}, unexpected {unexpected}")
    if cfg.tie_word_embeddings:
        model.tie_weights()
    model = model.to(device).eval()
    ids = torch.tensor([prompt], device=device)

    def run(n: int):
        sync(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync(device)
        return time.perf_counter() - t0, out[0, len(prompt) :].tolist()

    run(4)  # warm-up
    firsts = [run(1)[0] for _ in range(repeat)]
    fulls = [run(n_new) for _ in range(repeat)]
    p = statistics.median(firsts)
    total = statistics.median(t for t, _ in fulls)
    return {
        "attn_implementation": attn,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "prefill_ms": round(p * 1e3, 2),
        "decode_tokens_per_s": round((n_new - 1) / max(total - p, 1e-9), 2),
        "end_to_end_tokens_per_s": round(n_new / total, 2),
    }, fulls[-1][1]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--preset", default="smollm2-135m", choices=sorted(llama.PRESETS))
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prefill-chunk", type=int, default=None, help="rows per prefill step [default: the prompt length]")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (median)")
    ap.add_argument("--hf-attn", default="eager", help="transformers attn_implementation (eager: the issue's anchor; or sdpa)")
    ap.add_argument("--skip-transformers", action="store_true")
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    a = ap.parse_args(argv)

    cfg = llama.PRESETS[a.preset]
    params = default_parameters(llama.build_graph(cfg, "decode", 1, 8), seed=0)
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, size=a.prompt_len).tolist()
    result = {
        "benchmark": "llama decode",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": a.device,
        "model": {
            "preset": a.preset,
            "parameters": int(sum(v.size for v in params.values())),
            "weights": "random (meganeura default init)",
        },
        "batch": 1,
        "prompt_len": a.prompt_len,
        "new_tokens": a.new_tokens,
        "precision": "fp32 (strict; TF32 off on CUDA)",
        "repeat": a.repeat,
        "machine": machine(a.device),
    }
    print(f"meganeura-onnx on {a.device}: {a.preset}, prompt {a.prompt_len}, {a.new_tokens} new tokens ...", file=sys.stderr, flush=True)
    result["meganeura_onnx"], ours = bench_ours(cfg, params, prompt, a.new_tokens, a.device, a.prefill_chunk or a.prompt_len, a.repeat)
    print(json.dumps(result["meganeura_onnx"]), file=sys.stderr, flush=True)
    if a.device == "cuda":
        print("meganeura-onnx, decode replayed as a CUDA graph ...", file=sys.stderr, flush=True)
        try:
            result["meganeura_onnx_cuda_graph"], graphed = bench_ours(
                cfg, params, prompt, a.new_tokens, a.device, a.prefill_chunk or a.prompt_len, a.repeat, cuda_graph=True
            )
            result["meganeura_onnx_cuda_graph"]["same_tokens_as_uncaptured"] = graphed == ours
        except Exception as e:  # recorded, not hidden: the JSON says why there is no CUDA-graph number
            result["meganeura_onnx_cuda_graph"] = {"error": f"{type(e).__name__}: {e}"[:2000]}
        print(json.dumps(result["meganeura_onnx_cuda_graph"]), file=sys.stderr, flush=True)
    if not a.skip_transformers:
        print(f"transformers.generate ({a.hf_attn}) ...", file=sys.stderr, flush=True)
        result["transformers"], theirs = bench_transformers(cfg, params, prompt, a.new_tokens, a.device, a.hf_attn, a.repeat)
        agree = next((i for i, (x, y) in enumerate(zip(ours, theirs, strict=False)) if x != y), min(len(ours), len(theirs)))
        result["greedy_tokens_agree_prefix"] = agree
        result["decode_speedup_vs_transformers"] = round(
            result["meganeura_onnx"]["decode_tokens_per_s"] / result["transformers"]["decode_tokens_per_s"], 2
        )
        result["prefill_speedup_vs_transformers"] = round(result["transformers"]["prefill_ms"] / result["meganeura_onnx"]["prefill_ms"], 2)
    if hasattr(os, "getloadavg"):
        result["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out_dir / f"llama-{a.device}-{socket.gethostname()}-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
