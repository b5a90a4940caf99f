"""Data-parallel training on 2 GPUs of one host, in one command (run it on a 2-GPU machine):

    python benchmarks/train_ddp.py benchmarks/results [--steps 20] [--repeats 5] [--layers 30]

1. Parity: the tiny LLaMA (``models/tiny_llama.py``, 1 layer) trains 20 Adam steps on a global
   batch of 4 sequences x 8 tokens, once on 2 GPUs (``DataParallelSession``, 2 sequences per GPU,
   gradients averaged with NCCL) and once on 1 GPU (the fused one-model train step on all 4).
   Pass: every parameter within rel 1e-4 (max|diff| / max|ref| per tensor), the per-step global
   losses within rel 1e-4, and the two GPUs' parameters bitwise identical.
2. Throughput on the SmolLM2-135M shape (30 layers, hidden 576, 9/3 heads, intermediate 1536,
   vocab 49152), strict fp32, AdamW: 1 GPU at batch 8 x 256 (the fused one-model step, and for
   reference the split gradient/update models without communication) against 2 GPUs at a global
   batch of 16 x 256 (8 x 256 per GPU). ``--repeats`` repeats of ``--steps`` timed steps each:
   per repeat the median step time; reported: median over repeats, min and max. Scaling =
   (tokens/s on 2 GPUs) / (tokens/s of the fused 1-GPU step); goal >= 1.8.

Every phase runs in its own processes (``torchrun --standalone`` for the 2-GPU ones, with
``NCCL_NVLS_ENABLE=0``); the result is ``OUT_DIR/train_ddp_<gpu>x2.json`` (e.g. ``train_ddp_h200x2.json``) with the
machine, the commit and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))

SMOL = {"vocab": 49152, "hidden": 576, "heads": 9, "kv_heads": 3, "intermediate": 1536, "layers": 30}
TINY = {"vocab": 32, "hidden": 32, "heads": 4, "kv_heads": 2, "intermediate": 64, "layers": 1}
PARITY_BATCH, PARITY_SEQ, PARITY_STEPS = 4, 8, 20


def _tokens(vocab: int, batch: int, seq: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Input ids and next-token labels, both U32 ``[batch * seq]`` (index-label cross entropy)."""
    ids = np.random.default_rng(seed).integers(0, vocab, (batch, seq + 1)).astype(np.uint32)
    return ids[:, :-1].reshape(-1), ids[:, 1:].reshape(-1)


# -- workers (one process each; the 2-GPU ones under torchrun) ---------------------------------------
def worker_parity(out: Path, device: str) -> None:
    import tiny_llama

    from meganeura_onnx.init import default_parameters
    from meganeura_onnx.runtime.distributed import DataParallelSession, init_distributed, launched_by_torchrun
    from meganeura_onnx.runtime.training import build_session

    params = default_parameters(tiny_llama.build(**TINY, seq=PARITY_SEQ, batch=PARITY_BATCH), 0)
    data = [_tokens(TINY["vocab"], PARITY_BATCH, PARITY_SEQ, seed=k % 4) for k in range(PARITY_STEPS)]
    if launched_by_torchrun():
        ctx = init_distributed(device)
        local = PARITY_BATCH // ctx.world_size
        s = DataParallelSession(tiny_llama.build(**TINY, seq=PARITY_SEQ, batch=local), device=device, optimizer="adam", parameters=params)
        rows = slice(ctx.rank * local * PARITY_SEQ, (ctx.rank + 1) * local * PARITY_SEQ)
        tag = f"ddp_rank{ctx.rank}"
    else:
        s = build_session(tiny_llama.build(**TINY, seq=PARITY_SEQ, batch=PARITY_BATCH), device, optimizer="adam", parameters=params)
        rows, tag = slice(None), "single"
    s.set_adam(1e-3)
    losses = []
    for ids, labels in data:
        s.set_input_u32("input_ids", ids[rows])
        s.set_input_u32("labels", labels[rows])
        s.step()
        losses.append(s.read_loss())
    np.savez(out / f"parity_{tag}.npz", losses=np.array(losses), **{f"param.{n}": s.read_param(n) for n in s.parameter_names()})


def _timed(step, steps: int, repeats: int, barrier=lambda: None) -> dict:
    step()
    step()  # warm-up: allocations, cuBLAS heuristics, NCCL channels
    medians = []
    for _ in range(repeats):
        barrier()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()  # synchronous: returns after the update ran on the GPU
            times.append((time.perf_counter() - t0) * 1e3)
        medians.append(statistics.median(times))
    return {"median_ms": statistics.median(medians), "min_ms": min(medians), "max_ms": max(medians), "repeat_medians_ms": medians}


def worker_speed(out: Path, device: str, layers: int, steps: int, repeats: int, split: bool) -> None:
    import tiny_llama

    from meganeura_onnx.init import default_parameters
    from meganeura_onnx.runtime.distributed import DataParallelSession, DistContext, init_distributed, launched_by_torchrun
    from meganeura_onnx.runtime.training import build_session

    batch, seq = 8, 256  # per GPU
    cfg = {**SMOL, "layers": layers}
    if device == "cpu":  # the smoke run: the same code path on the tiny model
        batch, seq, cfg = 2, PARITY_SEQ, TINY
    g = tiny_llama.build(**cfg, seq=seq, batch=batch)
    params = default_parameters(g, 0)
    barrier = lambda: None  # noqa: E731
    t0 = time.perf_counter()
    if launched_by_torchrun():
        import torch.distributed as dist

        ctx = init_distributed(device)
        s = DataParallelSession(g, device=device, optimizer="adamw", parameters=params, context=ctx)
        barrier, tag = dist.barrier, f"ddp{ctx.world_size}"
    elif split:
        ctx = DistContext(0, 1, 0, "nccl")
        s, tag = DataParallelSession(g, device=device, optimizer="adamw", parameters=params, context=ctx), "split1"
    else:
        ctx = DistContext(0, 1, 0, "none")
        s, tag = build_session(g, device, optimizer="adamw", parameters=params), "fused1"
    build_s = time.perf_counter() - t0
    s.set_adamw(1e-4, weight_decay=0.01)
    ids, labels = _tokens(cfg["vocab"], batch, seq, seed=ctx.rank)
    s.set_input_u32("input_ids", ids)
    s.set_input_u32("labels", labels)
    res = _timed(s.step, steps, repeats, barrier)
    if isinstance(s, DataParallelSession):  # where a split step's time goes: extra steps, timed per phase
        s.phase_ms = {}
        for _ in range(steps):
            s.step()
        res["phase_ms_per_step"] = {k: v / steps for k, v in s.phase_ms.items()}
        res["nodes_per_provider"] = s.placement()
        res["providers"] = {"gradient": s._grad_sess.get_providers(), "update": s._update_sess.get_providers()}
    res.update(build_s=build_s, world_size=ctx.world_size, global_batch=batch * ctx.world_size, seq=seq, loss=s.read_loss())
    res["tokens_per_s"] = batch * ctx.world_size * seq / (res["median_ms"] / 1e3)
    if ctx.rank == 0:
        (out / f"speed_{tag}.json").write_text(json.dumps(res))


# -- driver ------------------------------------------------------------------------------------------
def _run(cmd: list[str], nproc: int | None) -> None:
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *cmd]
    else:
        cmd = [sys.executable, *cmd]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True)


def _parity_report(tmp: Path) -> dict:
    ref = np.load(tmp / "parity_single.npz")
    r0, r1 = np.load(tmp / "parity_ddp_rank0.npz"), np.load(tmp / "parity_ddp_rank1.npz")
    names = [k for k in ref.files if k.startswith("param.")]
    # np.max, not max(): a NaN difference must show in the report (max() keeps whatever came before it)
    param_rel = float(np.max([np.abs(r0[k] - ref[k]).max() / np.abs(ref[k]).max() for k in names]))
    loss_rel = float(np.max(np.abs(r0["losses"] - ref["losses"]) / np.abs(ref["losses"])))
    identical = all(np.array_equal(r0[k], r1[k]) for k in names)
    return {
        "model": {**TINY, "seq": PARITY_SEQ, "global_batch": PARITY_BATCH},
        "steps": PARITY_STEPS,
        "param_max_rel_diff": param_rel,
        "loss_max_rel_diff": loss_rel,
        "ranks_bitwise_identical": identical,
        "losses_2gpu": r0["losses"].tolist(),
        "losses_1gpu": ref["losses"].tolist(),
        "pass": param_rel <= 1e-4 and loss_rel <= 1e-4 and identical,
    }


def _run_workers(a: argparse.Namespace) -> tuple[dict, dict]:
    """(parity report, speed of each run): the worker processes of this script, one after another."""
    me = str(Path(__file__).resolve())
    with tempfile.TemporaryDirectory() as d:
        common = ["--tmp", d, "--device", a.device, "--steps", str(a.steps), "--repeats", str(a.repeats), "--layers", str(a.layers)]
        _run([me, "--worker", "parity", *common], None)
        _run([me, "--worker", "parity", *common], 2)
        parity = _parity_report(Path(d))
        _run([me, "--worker", "fused1", *common], None)
        _run([me, "--worker", "split1", *common], None)
        _run([me, "--worker", "ddp", *common], 2)
        speed = {k: json.loads((Path(d) / f"speed_{k}.json").read_text()) for k in ("fused1", "split1", "ddp2")}
    return parity, speed


def _report(a: argparse.Namespace, parity: dict, speed: dict, scaling: float) -> dict:
    """The JSON report: machine, versions, parity and the throughput of each run."""
    import onnxruntime as ort
    import torch

    return {
        "device": a.device,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if a.device == "cuda" else None,
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "loadavg": os.getloadavg(),
        "nproc": os.cpu_count(),
        "env": {"NCCL_NVLS_ENABLE": "0"},
        "parity_tiny_llama_2gpu_vs_1gpu": parity,
        "smollm2_135m_shape": {
            "config": {
                **SMOL,
                "layers": a.layers,
                "precision": "strict fp32",
                "optimizer": "adamw",
                "labels": "index (sparse cross entropy)",
            },
            "one_gpu_fused_batch_8x256": speed["fused1"],
            "one_gpu_split_models_batch_8x256": speed["split1"],
            "two_gpus_global_batch_16x256": speed["ddp2"],
            "scaling_2gpu_over_1gpu_fused": scaling,
            "scaling_goal": 1.8,
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="2-GPU data-parallel parity and throughput")
    ap.add_argument("out_dir", nargs="?", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke run of this script (gloo, 2 processes)")
    ap.add_argument("--worker", choices=["parity", "fused1", "split1", "ddp"], help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        tmp = Path(a.tmp)
        if a.worker == "parity":
            worker_parity(tmp, a.device)
        else:
            worker_speed(tmp, a.device, a.layers, a.steps, a.repeats, split=a.worker == "split1")
        return
    import onnxruntime as ort
    import torch

    if a.device == "cuda" and ("CUDAExecutionProvider" not in ort.get_available_providers() or torch.cuda.device_count() < 2):
        sys.exit(
            f"needs onnxruntime-gpu and 2 CUDA GPUs: ORT providers {ort.get_available_providers()}, torch sees {torch.cuda.device_count()}"
        )
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parity, speed = _run_workers(a)
    scaling = speed["ddp2"]["tokens_per_s"] / speed["fused1"]["tokens_per_s"]
    report = _report(a, parity, speed, scaling)
    gpu = torch.cuda.get_device_name(0).split()[-1].lower() if a.device == "cuda" else ""
    path = out / (f"train_ddp_{gpu}x2.json" if a.device == "cuda" else "train_ddp_cpu_smoke.json")
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"parity (tiny LLaMA, 20 Adam steps): params rel {parity['param_max_rel_diff']:.2e}, losses rel {parity['loss_max_rel_diff']:.2e}, "
        f"ranks identical {parity['ranks_bitwise_identical']} -> {'PASS' if parity['pass'] else 'FAIL'}"
    )
    f1, sp, d2 = speed["fused1"], speed["split1"], speed["ddp2"]
    print(
        f"{'SmolLM2-135M shape' if a.device == 'cuda' else 'tiny LLaMA (CPU smoke run)'} fp32 AdamW: "
        f"1 {a.device} batch {f1['global_batch']}x{f1['seq']} {f1['median_ms']:.1f} ms ({f1['tokens_per_s']:.0f} tok/s; "
        f"split models {sp['median_ms']:.1f} ms), 2 x {a.device} {d2['global_batch']}x{d2['seq']} {d2['median_ms']:.1f} ms "
        f"({d2['tokens_per_s']:.0f} tok/s): scaling {scaling:.2f}x (goal 1.8x)"
    )
    for tag in ("split1", "ddp2"):
        phases = ", ".join(f"{k} {v:.1f} ms" for k, v in speed[tag]["phase_ms_per_step"].items())
        print(f"{tag} per step: {phases}; nodes per provider {speed[tag]['nodes_per_provider']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
