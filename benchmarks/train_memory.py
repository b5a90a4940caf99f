"""Where the train step's memory goes, on the CPU (no GPU needed):

    python benchmarks/train_memory.py OUT_DIR [--layers 30] [--batch 8] [--seq 256]
        [--ort-layers 2] [--ort-batch 2] [--ort-steps 3] [--skip-ort] [--separate-projections]

1. The node count by op type and the liveness (``meganeura_onnx.runtime.liveness``) of the exported
   train-step model of the SmolLM2-135M-shaped decoder that ``benchmarks/train_gpu.py`` trains (AdamW, fused update, index
   labels): the bytes of intermediate tensors live at each node, the peak and the tensors that make
   it up: as exported (the memory-aware order, SwiGLU's output recomputed for the backward pass),
   and without the recomputation in the memory-aware order and in a depth-first order from the
   outputs (what the exporter emitted before; close to ONNX Runtime's default order), and the lower
   bound (the largest single node's working set).
2. What ONNX Runtime allocates for the same kind of model on the CPU (a smaller shape,
   ``--ort-layers`` x ``--ort-batch``, so the steps take seconds): each session configuration in a
   fresh process runs ``--ort-steps`` steps with every input and output bound (as ``TrainingSession``
   does); ORT's profiler reports its allocator's bytes in use (peak) and the arena it holds after
   each run; beside them the process RSS and our liveness in ORT's actual node order (the profile's
   order, nodes matched by name). Configurations: ORT's defaults, the memory pattern off, the
   model's node order (``ExecutionOrder.PRIORITY_BASED``), and both (what ``TrainingSession`` uses).

``--separate-projections``: the train step without ``merge_projections`` (q/k/v and gate/up as
separate products, as before that pass), to compare node counts and liveness.

Writes ``OUT_DIR/train_memory.json`` (machine, load average, git commit).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import run_info

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "models"):
    sys.path.insert(0, str(p))

SMOL = {"vocab": 49152, "hidden": 576, "heads": 9, "kv_heads": 3, "intermediate": 1536}

CONFIGS = {
    "ort_defaults": {},
    "no_mem_pattern": {"enable_mem_pattern": False},
    "model_order": {"execution_order": "PRIORITY_BASED"},
    "model_order_no_mem_pattern": {"execution_order": "PRIORITY_BASED", "enable_mem_pattern": False},
}


def train_model(layers: int, batch: int, seq: int, out: Path, merge_projections: bool = True):
    """The fp32 AdamW train-step ONNX model (cached in ``out``) the GPU benchmark's session runs."""
    import tiny_llama

    from meganeura_onnx.runtime.training import _cached_program, _optimize_forward
    from meganeura_onnx.transforms.optimizer import OptimizerSpec

    path = out / f"train_step_{layers}x{batch}x{seq}{'' if merge_projections else '_separate_projections'}.onnx"
    graph = tiny_llama.build(**SMOL, layers=layers, seq=seq, batch=batch)
    spec = OptimizerSpec("adamw", fused=True, device_step=True)  # what build_session(optimizer="adamw") compiles
    prog = _cached_program(_optimize_forward(graph, merge_projections)[0], spec, None, path, True)
    return prog.model, path


def analyse(model) -> dict:
    from meganeura_onnx.runtime.liveness import depth_first_order, liveness, memory_order, without_recompute

    res = {}
    # The exported model is in the memory-aware order with SwiGLU recomputed for the backward;
    # before: the same graph without the copies in depth-first order (the exporter's former order,
    # close to what ORT runs by default), and in the memory-aware order.
    before = without_recompute(model)
    orders = {
        "before_depth_first_order": (before, depth_first_order(before)),
        "memory_order_no_recompute": (before, memory_order(before)),
        "exported": (model, None),
    }
    for name, (graph, order) in orders.items():
        t0 = time.perf_counter()
        live = liveness(graph, order)
        res[name] = {
            "peak_gb": live.peak_bytes / 1e9,
            "peak_at": live.nodes[live.order[live.peak_step]],
            "peak_step": live.peak_step,
            "tensors_live_at_peak": len(live.peak_tensors),
            "largest_at_peak": [(t, op, round(b / 1e6, 1)) for t, op, b in live.top(12)],
            "peak_by_op_type_mb": _by_op(live.peak_tensors),
            "seconds": time.perf_counter() - t0,
        }
        print(f"{name}:\n{live}")
        res["held_gb"] = live.held_bytes / 1e9
        res["lower_bound_gb"] = live.lower_bound_bytes / 1e9
    res["nodes"] = len(model.graph.node)
    res["nodes_by_op_type"] = nodes_by_op_type(model)
    print(f"{res['nodes']} ONNX nodes:", ", ".join(f"{op} {n}" for op, n in res["nodes_by_op_type"].items()))
    return res


def nodes_by_op_type(model) -> dict[str, int]:
    """How many nodes of each op type the exported model has (the ONNX file, before ORT's own
    fusions), most first."""
    counts: dict[str, int] = {}
    for n in model.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _by_op(tensors: list) -> dict:
    by: dict[str, float] = {}
    for _, op, b in tensors:
        by[op] = by.get(op, 0.0) + b / 1e6
    return dict(sorted(((k, round(v, 1)) for k, v in by.items()), key=lambda kv: -kv[1]))


def ort_run(model_path: Path, options: dict, steps: int, out: Path) -> dict:
    """One configuration in a fresh process (RSS and the arena start from nothing)."""
    cmd = [sys.executable, __file__, "--child", str(model_path), json.dumps(options), str(steps), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        return {"error": r.stderr[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def _rss() -> int:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) * 1024


def child(model_path: str, options: dict, steps: int, out: str) -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort

    from meganeura_onnx.runtime import custom_ops

    model = onnx.load(model_path)
    opts = ort.SessionOptions()
    for k, v in options.items():
        setattr(opts, k, getattr(ort.ExecutionOrder, v) if k == "execution_order" else v)
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path(out) / ("ort_memory_" + "_".join(f"{k}-{v}" for k, v in options.items())))
    custom_ops.register(opts, "cpu")
    rss0 = _rss()
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True).graph
    types = {v.name: v.type.tensor_type for v in [*inferred.input, *inferred.output]}
    rng = np.random.default_rng(0)
    binding = sess.io_binding()
    embed = types.get("model.embed_tokens.weight")
    vocab = embed.shape.dim[0].dim_value if embed is not None else SMOL["vocab"]
    hyper = {"opt.lr": 1e-4, "opt.beta1": 0.9, "opt.beta2": 0.999, "opt.eps": 1e-8, "opt.step": 1.0, "opt.weight_decay": 0.01}
    for v in model.graph.input:
        t = types[v.name]
        shape, dtype = [d.dim_value for d in t.shape.dim], onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if dtype == np.uint32:
            a = rng.integers(0, vocab, shape).astype(dtype)
        elif v.name in hyper:
            a = np.full(shape, hyper[v.name], dtype)
        else:
            a = (np.abs(rng.standard_normal(shape)) * (0.0 if v.name.startswith("adam_") else 0.02)).astype(dtype)
        binding.bind_ortvalue_input(v.name, ort.OrtValue.ortvalue_from_numpy(a))
    for v in model.graph.output:
        t = types[v.name]
        a = np.zeros([d.dim_value for d in t.shape.dim], onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        binding.bind_ortvalue_output(v.name, ort.OrtValue.ortvalue_from_numpy(a))
    rss1 = _rss()
    runs = []
    for _ in range(steps):
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)
        runs.append({"seconds": time.perf_counter() - t0, "rss_over_buffers_gb": (_rss() - rss1) / 1e9})
    events = json.loads(Path(sess.end_profiling()).read_text())
    print(
        json.dumps(
            {"options": options, "session_and_buffers_rss_gb": (rss1 - rss0) / 1e9, "runs": runs, "profile": events_summary(model, events)}
        )
    )


def events_summary(model, events: list) -> dict:
    """Per run: ORT's allocator peak in use and the arena it holds (its profiler's memory fields),
    and our liveness in ORT's node order (the first run's events, matched to the model by name)."""
    from meganeura_onnx.runtime.liveness import liveness

    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    bounds = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run"]
    runs = []
    for start, end in bounds:
        evs = [e for e in nodes if start <= e["ts"] <= end]
        field = lambda k: [int(e["args"].get(k, 0)) for e in evs]  # noqa: E731
        runs.append(
            {
                "allocator_peak_in_use_gb": max(field("mem_in_use_peak"), default=0) / 1e9,
                "arena_held_gb": max(field("mem_arena_held"), default=0) / 1e9,
                "in_use_peak_at": max(evs, key=lambda e: int(e["args"].get("mem_bytes_in_use", 0)))["name"][: -len("_kernel_time")],
            }
        )
    res: dict = {"runs": runs}
    first = [e["name"][: -len("_kernel_time")] for e in nodes if bounds and bounds[0][0] <= e["ts"] <= bounds[0][1]]
    index = {n.name: i for i, n in enumerate(model.graph.node)}
    seen = [index[n] for n in first if n in index]
    res["nodes_run"], res["nodes_matched_by_name"] = len(first), len(seen)
    try:
        res["liveness_in_ort_order_gb"] = liveness(model, _complete(model, seen)).peak_bytes / 1e9
    except ValueError as e:  # a fusion ORT made reorders what the names show
        res["liveness_in_ort_order_gb"] = f"not comparable: {e}"
    return res


def _complete(model, seen: list[int]) -> list[int]:
    """ORT's order of the nodes it kept by name; each node it fused away runs where a topological
    order first allows it (just before its first reader in that order)."""
    nodes = list(model.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    placed: list[int] = []
    done: set[int] = set()

    def place(i: int) -> None:
        if i in done:
            return
        done.add(i)
        for t in nodes[i].input:
            if t in producer:
                place(producer[t])
        placed.append(i)

    for i in seen:
        place(i)
    for i in range(len(nodes)):
        place(i)
    return placed


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    ap = argparse.ArgumentParser(description="Liveness of the SmolLM2-135M-shaped train step; ORT's CPU allocations beside it")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--ort-layers", type=int, default=2)
    ap.add_argument("--ort-batch", type=int, default=2)
    ap.add_argument("--ort-steps", type=int, default=3)
    ap.add_argument("--skip-ort", action="store_true")
    ap.add_argument("--separate-projections", action="store_true", help="without merge_projections (q/k/v, gate/up as separate products)")
    a = ap.parse_args()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "git_commit": run_info.git_commit(),
        "dirty": run_info.git_dirty(),
        "date": run_info.utc_now(),
        "machine": {**run_info.host(), "cpu": run_info.cpu_model()},
        "load_average_before": run_info.load_average(),
    }
    merge = not a.separate_projections
    model, _ = train_model(a.layers, a.batch, a.seq, out, merge)
    report["liveness"] = {
        "shape": {**SMOL, "layers": a.layers, "batch": a.batch, "seq": a.seq, "merge_projections": merge},
        **analyse(model),
    }
    if not a.skip_ort:
        small, path = train_model(a.ort_layers, a.ort_batch, a.seq, out, merge)
        ort_res: dict = {"shape": {**SMOL, "layers": a.ort_layers, "batch": a.ort_batch, "seq": a.seq}, "liveness": analyse(small)}
        for name, options in CONFIGS.items():
            ort_res[name] = r = ort_run(path, options, a.ort_steps, out)
            print(name, json.dumps(r)[:600])
        report["ort_cpu"] = ort_res
    report["load_average_after"] = run_info.load_average()
    (out / "train_memory.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out / 'train_memory.json'}")


if __name__ == "__main__":
    main()
