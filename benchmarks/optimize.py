"""What the e-graph optimizer costs, and (on a GPU) what it buys.

    python benchmarks/optimize.py                   # optimization time: SmolLM2-135M train step, 10,000-node graph
    python benchmarks/optimize.py --device cuda     # + train step and decode step, optimize=False vs True

CPU part (the cost): the SmolLM2-135M training graph (``models/llama.py`` preset ``smollm2-135m``,
mode ``train``, 256 tokens) goes through what ``build_session(optimizer="adamw")`` runs: the optimizer
over the forward graph, autodiff + the AdamW update, the optimizer over the whole train step. Then a
synthetic 10,000-node graph (blocks of every rewritable pattern). Each is timed ``--repeat`` times;
the JSON keeps every run and the reports' numbers (e-classes, e-nodes, rules fired, fusions).

GPU part (``--device cuda``, the effect): the SmolLM2-135M AdamW train step (batch 8 x 256 tokens,
as ``benchmarks/train_gpu.py``) and the one-token decode step (KV cache of 256, replayed as a CUDA
graph when the kernel library is built), each built with ``optimize=False`` and ``optimize=True``:
median step time, ONNX nodes of the model, and kernels (the nodes ORT runs after its own fusions).

Writes ``benchmarks/results/optimize[-cuda].json`` (or ``--out``) with machine, versions, commit and
load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import run_info

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "models"):
    sys.path.insert(0, str(p))


def _report_numbers(r) -> dict:
    return {
        "stage": r.stage,
        "nodes_before": r.nodes_before,
        "nodes_after": r.nodes_after,
        "eclasses": r.eclasses,
        "enodes": r.enodes,
        "iterations": r.iterations,
        "stop_reason": r.stop_reason,
        "rules_fired": r.rewrites,
        "fusions": r.fusions,
        "removed": r.removed,
        "saturation_s": r.saturation_seconds,
        "extraction_s": r.extraction_seconds,
        "total_s": r.seconds,
    }


def smollm_train_graph(preset: str, seq: int):
    import llama

    return llama.build(preset=preset, mode="train", seq=seq)


def time_train_step_optimization(preset: str, seq: int, repeat: int) -> dict:
    """The optimizer's two runs inside ``build_session(optimizer="adamw")``, timed end to end."""
    from meganeura_onnx.runtime.training import compile_program
    from meganeura_onnx.transforms.optimizer import OptimizerSpec
    from meganeura_onnx.transforms.rewrite import optimize

    g = smollm_train_graph(preset, seq)
    runs = []
    for _ in range(repeat):
        forward, fwd = optimize(g, stage="forward")
        prog = compile_program(forward, OptimizerSpec("adamw", False), optimize_graph=True)
        runs.append(
            {"forward": _report_numbers(fwd), "train_step": _report_numbers(prog.report), "total_s": fwd.seconds + prog.report.seconds}
        )
    best = min(runs, key=lambda r: r["total_s"])
    return {
        "graph": f"models/llama.py preset={preset} mode=train seq={seq}",
        "forward_nodes": len(g),
        "best": best,
        "runs_total_s": [r["total_s"] for r in runs],
    }


def synthetic_graph(target_nodes: int):
    """Blocks of ``bias_add(matmul_bt)``, ``x * sigmoid(x)``, ``silu(g) * u`` and ``neg(neg)`` until ``target_nodes``."""
    from meganeura_onnx import Graph

    g = Graph()
    h = g.input("x", [16, 64])
    k = 0
    while len(g) < target_nodes - 16:
        w, b = g.parameter(f"w{k}", [64, 64]), g.parameter(f"b{k}", [64])
        a = g.bias_add(g.matmul_bt(h, w), b)
        s = g.mul(a, g.sigmoid(a))
        u = g.bias_add(g.matmul(h, g.parameter(f"u{k}", [64, 64])), g.parameter(f"c{k}", [64]))
        h = g.add(h, g.neg(g.neg(g.mul(g.silu(s), u))))
        k += 1
    g.set_outputs([g.mean_all(h)])
    return g


def time_synthetic(nodes: int, repeat: int) -> dict:
    from meganeura_onnx.transforms.rewrite import optimize

    g = synthetic_graph(nodes)
    runs = [optimize(g)[1] for _ in range(repeat)]
    best = min(runs, key=lambda r: r.seconds)
    return {"graph": f"synthetic, {len(g)} nodes", "best": _report_numbers(best), "runs_total_s": [r.seconds for r in runs]}


# -- GPU: the effect -------------------------------------------------------------------------------
def _median_ms(fn, steps: int) -> list[float]:
    fn()
    fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def _session_numbers(s, times: list[float]) -> dict:
    plan = s.plan()
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "all_ms": times,
        "onnx_nodes": len(plan.nodes),
        "kernels": len(plan.placement),
        "report": None if s.report is None else s.report.summary(),
    }


def train_step_effect(preset: str, device: str, steps: int, batch: int, seq: int) -> dict:
    import tiny_llama
    from llama import load_config

    from meganeura_onnx.init import default_parameters
    from meganeura_onnx.runtime.training import build_session

    c = load_config(None, preset)
    cfg = {
        "vocab": c.vocab_size,
        "hidden": c.hidden_size,
        "heads": c.num_attention_heads,
        "kv_heads": c.num_key_value_heads,
        "intermediate": c.intermediate_size,
        "layers": c.num_hidden_layers,
    }
    g = tiny_llama.build(**cfg, seq=seq, batch=batch)
    params = default_parameters(g, 0)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg["vocab"], (batch, seq + 1))
    out = {"config": {**cfg, "batch": batch, "seq": seq}}
    for flag in (False, True):
        t0 = time.perf_counter()
        s = build_session(g, device, optimizer="adamw", parameters=params, optimize=flag)
        build_s = time.perf_counter() - t0
        s.set_adamw(1e-4, weight_decay=0.01)
        s.set_input_u32("input_ids", ids[:, :-1].reshape(-1))
        s.set_input_u32("labels", ids[:, 1:].reshape(-1).astype(np.uint32))
        out[f"optimize={flag}"] = {**_session_numbers(s, _median_ms(s.step, steps)), "build_s": build_s, "loss": s.read_loss()}
        del s
    return out


def decode_step_effect(preset: str, device: str, steps: int, max_seq: int) -> dict:
    from llama import build_graph, load_config

    from meganeura_onnx import build_inference_session, custom_op_library
    from meganeura_onnx.init import default_parameters

    cfg = load_config(None, preset)
    g = build_graph(cfg, "decode", 1, max_seq)
    params = default_parameters(g, 0)
    cuda_graph = device == "cuda" and custom_op_library("cuda") is not None
    out = {"max_seq": max_seq, "cuda_graph": cuda_graph}
    for flag in (False, True):
        s = build_inference_session(g, device, parameters=params, cuda_graph=cuda_graph, optimize=flag)
        pos = iter(range(10**9))

        def step(s=s, pos=pos):
            s.set_input_u32("input_ids", [1])
            s.set_input_u32("kv_pos", [next(pos) % max_seq])
            s.step()

        out[f"optimize={flag}"] = _session_numbers(s, _median_ms(step, steps))
        del s
    return out


# -- the run ---------------------------------------------------------------------------------------
def machine() -> dict:
    from importlib.metadata import version

    import onnxruntime as ort

    cpu, commit, dirty = run_info.cpu_model(), run_info.git_commit(), run_info.git_dirty()
    return {
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform()},
        "versions": {
            "python": platform.python_version(),
            "egglog": version("egglog"),
            "onnxruntime": ort.__version__,
            "numpy": np.__version__,
        },
        "commit": commit + ("+dirty" if dirty else ""),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None, help="also measure the train/decode step on this device")
    ap.add_argument("--preset", default="smollm2-135m")
    ap.add_argument("--seq", type=int, default=256, help="tokens of the training graph")
    ap.add_argument("--nodes", type=int, default=10_000, help="size of the synthetic graph")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per session (--device)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per train step (--device)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    from meganeura_onnx.transforms.egraph import egglog_bindings

    t0 = time.perf_counter()
    egglog_bindings()
    res = {**machine(), "load_average_before": os.getloadavg(), "egglog_load_s": time.perf_counter() - t0}
    res["smollm2_train_step"] = time_train_step_optimization(a.preset, a.seq, a.repeat)
    res["synthetic"] = time_synthetic(a.nodes, a.repeat)
    if a.device:
        if a.device == "cuda":
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                sys.exit(f"--device cuda needs onnxruntime-gpu: ORT providers {ort.get_available_providers()}")
        res["train_step_effect"] = train_step_effect(a.preset, a.device, a.steps, a.batch, a.seq)
        res["decode_step_effect"] = decode_step_effect(a.preset, a.device, a.steps * 5, 256)
    res["load_average_after"] = os.getloadavg()
    out = a.out or ROOT / "benchmarks" / "results" / ("optimize.json" if not a.device else f"optimize-{a.device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    tr, sy = res["smollm2_train_step"]["best"], res["synthetic"]["best"]
    print(
        f"SmolLM2 train step: forward {tr['forward']['total_s']:.2f} s + train step {tr['train_step']['total_s']:.2f} s "
        f"({tr['train_step']['nodes_before']} -> {tr['train_step']['nodes_after']} nodes)"
    )
    print(f"synthetic: {sy['total_s']:.2f} s ({sy['nodes_before']} -> {sy['nodes_after']} nodes); load {res['load_average_after']}")
    for key in ("train_step_effect", "decode_step_effect"):
        if key in res:
            off, on = res[key]["optimize=False"], res[key]["optimize=True"]
            print(
                f"{key}: {off['median_ms']:.2f} -> {on['median_ms']:.2f} ms, ONNX nodes {off['onnx_nodes']} -> {on['onnx_nodes']}, "
                f"kernels {off['kernels']} -> {on['kernels']}"
            )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
