"""GPU training evidence in one command (run it on the CUDA machine):

    python benchmarks/train_gpu.py OUT_DIR [--layers 30] [--steps 10] [--repeats 5] [--skip-parity]
        [--variants ours_fp32,ours_fp32_separate_projections,...]

1. Parity on CUDAExecutionProvider: the MNIST MLP and the LLaMA-style block (tests/
   test_training_parity.py's cases) train 20 Adam steps (epsilon 1e-6) with parameters resident on the GPU; the
   losses are compared with PyTorch CPU (rel 1e-4) and the step-1 gradients (1e-4 of each tensor's
   scale); the execution plan's node placement is written.
2. Speed, one AdamW step (forward + backward + update) of a SmolLM2-135M-shaped decoder (30 layers,
   hidden 576, 9 heads, 3 KV heads, intermediate 1536, vocab 49152, untied LM head) at batch 8 x
   seq 256, index labels (next-token ids) on every side, the same initial weights everywhere:
   - ours fp32 (strict: ``use_tf32=0``), tf32 (``use_tf32=1``), bf16 and fp16 (``precision=``: MatMul/Gemm
     in half with fp32 accumulation, fp32 master weights; fp16 with dynamic loss scaling), and fp32
     and bf16 with the step replayed as CUDA graphs (``cuda_graph=True``); the train-step model is
     compiled once and cached in OUT_DIR for every variant; attention is the fused kernels
     (``flash_attention``), and ours fp32 runs once more with it decomposed into MatMul/Softmax, and
     once more without ``merge_projections`` (``ours_fp32_separate_projections``: q/k/v and gate/up as
     separate GEMMs, forward and backward);
   - Hugging Face ``LlamaForCausalLM`` (its default SDPA attention, no compilation) fp32 strict,
     and bf16 autocast (fp32 master weights, as mixed-precision training runs);
   - the same model under ``torch.compile``, bf16 autocast.
   The HF loss is ``F.cross_entropy`` over its logits (upcast to fp32, as HF's own loss does) against
   the same targets as ours. Every variant: 3 warm-up steps, then ``--repeats`` repeats of
   ``--steps`` steps; the report gives each repeat's mean step, the median and the spread (min/max),
   the peak GPU memory and the first loss (the fp32 sides start from the same weights and data:
   their losses must agree). Memory, like for like: ``device_memory_gb`` on every side is the
   ``cudaMemGetInfo`` delta after the steps (ORT's arena and PyTorch's caching allocator both keep
   their peak), and the goal "memory <= PyTorch's" (``goal_memory``) compares that; beside it,
   PyTorch's ``max_memory_allocated`` (``peak_memory_gb``: live tensors only) and
   ``max_memory_reserved`` (``peak_reserved_gb``), and ours split into the session's buffers —
   parameters, moments and their swap twins — and the rest: ORT's arena of activations, cuBLAS
   workspaces. Ours run first, before PyTorch's allocator holds anything.
3. Where our step's time goes: two profiled steps (ORT ``enable_profiling``) of the model the fp32
   session runs, bound and configured as the session runs it: kernel time and node count by op type
   (printed as a table), the top nodes; and, where the onnxruntime's profiler records its allocator,
   the peak bytes of intermediates in use, so ``goal_memory["allocator_level"]`` compares tensors
   only on both sides (ours: session buffers + that peak; PyTorch: ``max_memory_allocated``).
The JSON records the GPU, versions, machine, load average and git commit.

Layout: rows = batch * seq = 2048; the attention ops get ``batch=8`` (each block of 256 rows is its
own causal sequence) and rope gets ``period=256``. Data is uploaded once.
Results: ``OUT_DIR/train_gpu.json`` (+ ``placement_*.txt``, ``ort_profile*.json``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "models", ROOT / "tests"):
    sys.path.insert(0, str(p))

MEMORY_NOTE_OURS = "device_memory_gb: device memory ORT holds after the steps (cudaMemGetInfo delta; its arena keeps the peak)"
MEMORY_NOTE_HF = (
    "device_memory_gb: cudaMemGetInfo delta after the steps, as ours (the caching allocator keeps its peak "
    "reservation); peak_memory_gb: max_memory_allocated (tensors only); peak_reserved_gb: max_memory_reserved"
)
SMOL = {"vocab": 49152, "hidden": 576, "heads": 9, "kv_heads": 3, "intermediate": 1536, "layers": 30}
BATCH, SEQ, LR, WD = 8, 256, 1e-4, 0.01


def parity(out: Path) -> dict:
    import test_training_parity as tp
    import torch

    from meganeura_onnx.runtime.training import build_session

    res = {}
    for model, case in (("mlp", tp._mlp_case), ("llama_block", tp._llama_case)):
        g, params, batches, w, torch_loss, feed = case()
        grads = build_session(g, "cuda", parameters=params)
        feed(grads, batches[0])
        grads.step()
        loss = torch_loss(batches[0])
        loss.backward()
        grad_err = max(float(np.abs(grads.read_grad(n) - p.grad.numpy()).max() / np.abs(p.grad.numpy()).max()) for n, p in w.items())
        for p in w.values():
            p.grad = None
        s = build_session(g, "cuda", optimizer="adam", parameters=params)
        # epsilon 1e-6 as in tests/test_training_parity.py: with 1e-8 the MLP case turns one
        # float32-rounded gradient of 7e-9 into a different path (PyTorch fp32 vs fp64: 1.3e-4 too).
        s.set_adam(1e-3, epsilon=1e-6)
        opt = torch.optim.Adam(w.values(), lr=1e-3, eps=1e-6)
        ours, theirs = tp.train_side_by_side(s, opt, batches, torch_loss, feed)
        rel = float(np.max(np.abs(np.array(ours) - theirs) / np.abs(theirs)))
        plan = s.plan()
        by_ep: dict[str, int] = {}
        for *_, ep in plan.placement:
            by_ep[ep] = by_ep.get(ep, 0) + 1
        on_cpu = [f"{op_type} {name}" for name, _, op_type, ep in plan.placement if ep == "CPUExecutionProvider"]
        (out / f"placement_{model}.txt").write_text(str(plan) + "\n\nnodes on CPU:\n" + "\n".join(on_cpu) + "\n")
        res[model] = {
            "loss_max_rel_diff_20_adam_steps": rel,
            "step1_grad_max_err_over_scale": grad_err,
            "pass": rel <= 1e-4 and grad_err <= 1e-4,
            "nodes_by_provider": by_ep,
            "nodes_on_cpu": on_cpu[:50],
            "providers": plan.providers,
            "parameters_resident": all(s._values[n].device_name() == "cuda" for n in s.parameter_names()),
        }
        print(
            f"parity {model}: losses rel {rel:.2e}, grads {grad_err:.2e}, placement {by_ep} -> {'PASS' if res[model]['pass'] else 'FAIL'}"
        )
    return res


def _repeats(step, steps: int, repeats: int, sync) -> dict:
    for _ in range(3):
        step()
    sync()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        runs.append((time.perf_counter() - t0) / steps * 1e3)
    return {"median_ms": statistics.median(runs), "min_ms": min(runs), "max_ms": max(runs), "repeats_ms": runs}


def _data(cfg: dict):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg["vocab"], (BATCH, SEQ + 1))
    return ids[:, :-1].reshape(-1).astype(np.uint32), ids[:, 1:].reshape(-1).astype(np.uint32)


def _session(cfg: dict, params: dict, out: Path, fused_attention: bool = True, merge_projections: bool = True, **kw):
    """Our training session; the compiled train-step model is cached in ``out`` (compiled once for
    every variant: precision and CUDA graphs are applied when the session is built)."""
    import tiny_llama

    from meganeura_onnx.runtime.training import build_session_cached

    graph = tiny_llama.build(**cfg, seq=SEQ, batch=BATCH, fused_attention=fused_attention)
    name = "train_step_loss_scaled" if kw.get("precision") == "fp16" else "train_step"  # fp16 compiles its own
    name += ("" if fused_attention else "_decomposed_attention") + ("" if merge_projections else "_separate_projections")
    return build_session_cached(
        graph, out / f"{name}.onnx", "cuda", optimizer="adamw", parameters=params, merge_projections=merge_projections, **kw
    )


def ours(
    cfg: dict,
    params: dict,
    steps: int,
    repeats: int,
    out: Path,
    precision: str,
    cuda_graph: bool = False,
    fused_attention: bool = True,
    merge_projections: bool = True,
) -> dict:
    import torch

    inp, tgt = _data(cfg)
    gc.collect()  # the previous variant's session (its ORT arena goes with it)
    free0 = torch.cuda.mem_get_info()[0]
    t0 = time.perf_counter()
    s = _session(cfg, params, out, fused_attention, merge_projections, precision=precision, cuda_graph=cuda_graph)
    build_s = time.perf_counter() - t0
    s.set_adamw(LR, weight_decay=WD)
    s.set_input_u32("input_ids", inp)
    s.set_input_u32("labels", tgt)
    s.step()
    first_loss = s.read_loss()
    res = _repeats(s.step, steps, repeats, lambda: None)  # run_with_iobinding returns after the GPU finished
    peak = (free0 - torch.cuda.mem_get_info()[0]) / 1e9
    summary = s.memory_summary()
    res.update(
        first_loss=first_loss,
        build_s=build_s,
        cuda_graph=cuda_graph,
        peak_memory_gb=peak,
        device_memory_gb=peak,
        memory_note=MEMORY_NOTE_OURS,
        session_buffers_gb=summary.total_buffer_bytes / 1e9,
        arena_and_workspaces_gb=peak - summary.total_buffer_bytes / 1e9,
        onnx_nodes=len(s.onnx_model().graph.node),
        skipped_steps=s.skipped_steps,
        precision_plan=str(s.plan()).split("precision", 1)[-1],
        buffers=str(summary),
    )
    del s
    gc.collect()
    return res


def hf_model(cfg: dict, params: dict):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    conf = LlamaConfig(
        vocab_size=cfg["vocab"],
        hidden_size=cfg["hidden"],
        intermediate_size=cfg["intermediate"],
        num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["kv_heads"],
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(conf)
    missing, unexpected = model.load_state_dict({k: torch.tensor(v) for k, v in params.items()}, strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise RuntimeError(f"HF model does not take our weights: missing {missing}, unexpected {unexpected}")
    return model.cuda().train()


def hf(cfg: dict, params: dict, steps: int, repeats: int, bf16: bool, compiled: bool) -> dict:
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    inp, tgt = _data(cfg)
    ids = torch.tensor(inp.astype(np.int64), device="cuda").view(BATCH, SEQ)
    labels = torch.tensor(tgt.astype(np.int64), device="cuda")
    import gc

    gc.collect()  # the previous variant's model and optimizer state
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    free0 = torch.cuda.mem_get_info()[0]
    model = hf_model(cfg, params)
    fwd = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = fwd(input_ids=ids).logits
        loss = F.cross_entropy(logits.float().view(-1, cfg["vocab"]), labels)
        loss.backward()
        opt.step()
        if not losses:
            losses.append(loss.item())

    t0 = time.perf_counter()
    step()
    first_step_s = time.perf_counter() - t0  # includes compilation under torch.compile
    res = _repeats(step, steps, repeats, torch.cuda.synchronize)
    res.update(
        first_loss=losses[0],
        first_step_s=first_step_s,
        peak_memory_gb=torch.cuda.max_memory_allocated() / 1e9,
        peak_reserved_gb=torch.cuda.max_memory_reserved() / 1e9,
        # The same measure as ours: what the process holds on the device for this variant after
        # the steps (the caching allocator keeps its peak reservation, as ORT's arena does).
        device_memory_gb=(free0 - torch.cuda.mem_get_info()[0]) / 1e9,
        memory_note=MEMORY_NOTE_HF,
        attention=model.config._attn_implementation,
    )
    return res  # the model, optimizer and compiled graph are freed with this frame


MEMORY_PAIRS = {
    "ours_fp32/hf_eager_fp32": ("ours_fp32", "hf_eager_fp32"),
    "ours_fp32_cuda_graph/hf_eager_fp32": ("ours_fp32_cuda_graph", "hf_eager_fp32"),
    "ours_bf16/hf_eager_bf16_autocast": ("ours_bf16", "hf_eager_bf16_autocast"),
    "ours_bf16_cuda_graph/hf_eager_bf16_autocast": ("ours_bf16_cuda_graph", "hf_eager_bf16_autocast"),
    "ours_bf16/hf_torch_compile_bf16_autocast": ("ours_bf16", "hf_torch_compile_bf16_autocast"),
    "ours_bf16_cuda_graph/hf_torch_compile_bf16_autocast": ("ours_bf16_cuda_graph", "hf_torch_compile_bf16_autocast"),
}


def memory_goal(res: dict) -> dict:
    """The goal "peak memory <= PyTorch's", like for like: ``device_memory_gb`` (the cudaMemGetInfo
    delta after the steps) on both sides. ``max_memory_allocated`` counts PyTorch's live tensors only
    (not the allocator's reserve, cuBLAS workspaces or loaded kernels), which our side cannot count,
    so it is reported beside but never compared with ours."""
    mem = {k: v["device_memory_gb"] for k, v in res.items() if isinstance(v, dict) and "device_memory_gb" in v}
    ratios = {k: mem[a] / mem[b] for k, (a, b) in MEMORY_PAIRS.items() if a in mem and b in mem}
    return {
        "measure": "device_memory_gb (cudaMemGetInfo delta after the steps) on both sides",
        "ratios": ratios,
        "met": {k: r <= 1.0 for k, r in ratios.items()},
    }


def allocator_level(res: dict) -> dict:
    """Tensors only, on both sides (fp32): ours = the session's buffers + the peak bytes ORT's
    allocator had in use (its profiler), PyTorch = ``max_memory_allocated``."""
    peak = res.get("ort_profile", {}).get("allocator", {}).get("peak_in_use_gb")
    ours, hf_fp32 = res.get("ours_fp32", {}), res.get("hf_eager_fp32", {})
    if peak is None or "session_buffers_gb" not in ours or "peak_memory_gb" not in hf_fp32:
        return {"error": "needs ours_fp32, hf_eager_fp32 and ORT's allocator fields in the profile"}
    total = ours["session_buffers_gb"] + peak
    return {"ours_fp32_gb": total, "hf_eager_fp32_gb": hf_fp32["peak_memory_gb"], "ratio": total / hf_fp32["peak_memory_gb"]}


def ort_profile(cfg: dict, params: dict, out: Path) -> dict:
    """Two profiled steps of our fp32 train-step model as the sessions run it (fused AdamUpdate, our
    kernels, the same provider and session options, every input and output bound on the device):
    kernel time by op type, the top nodes, and ORT's allocator per run where this onnxruntime's
    profiler reports it (the peak bytes in use: intermediates only, the bound buffers are the
    session's; the arena held)."""
    import onnxruntime as ort

    from meganeura_onnx.runtime import custom_ops
    from meganeura_onnx.runtime.ort_session import apply_session_options
    from meganeura_onnx.runtime.training import TRAIN_SESSION_OPTIONS

    s = _session(cfg, params, out)
    prog, providers, model, device = s._prog, s._providers, s.onnx_model(), s._device
    del s
    opts = ort.SessionOptions()
    apply_session_options(opts, TRAIN_SESSION_OPTIONS)
    opts.enable_profiling = True
    opts.profile_file_prefix = str(out / "ort_profile")
    custom_ops.register(opts, device)
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=providers)
    binding = _bound(sess, model, prog, cfg, params, device)
    for _ in range(2):
        sess.run_with_iobinding(binding)
    events = json.loads(Path(sess.end_profiling()).read_text())
    return {**_kernel_table(events), "onnx_nodes": len(model.graph.node), "allocator": _allocator(events)}


def _bound(sess, model, prog, cfg: dict, params: dict, device: str):
    """An IOBinding with every input and output an OrtValue on ``device`` (as TrainingSession binds)."""
    import onnx
    import onnxruntime as ort

    inp, tgt = _data(cfg)
    feeds = {"input_ids": inp, "labels": tgt, **params}
    feeds.update({m: np.zeros(params[m.split(".", 1)[1]].shape, np.float32) for m in prog.moments})
    hyper = {"opt.lr": LR, "opt.beta1": 0.9, "opt.beta2": 0.999, "opt.eps": 1e-8, "opt.step": 1.0, "opt.weight_decay": WD}
    feeds.update({h: np.array([hyper[h]], np.float32) for h in prog.hyper + prog.counters})
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value), device, 0))
    for v in onnx.shape_inference.infer_shapes(model, data_prop=True).graph.output:
        t = v.type.tensor_type
        zeros = np.zeros([d.dim_value for d in t.shape.dim], onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        binding.bind_ortvalue_output(v.name, ort.OrtValue.ortvalue_from_numpy(zeros, device, 0))
    return binding


def _kernel_table(events: list) -> dict:
    by_op: dict[str, float] = {}
    count: dict[str, int] = {}
    by_node: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e.get("args", {}).get("op_name", "?")
            by_op[op] = by_op.get(op, 0.0) + e["dur"] / 2e3  # two runs, us -> ms per step
            count[op] = count.get(op, 0) + 1
            by_node[e["name"]] = by_node.get(e["name"], 0.0) + e["dur"] / 2e3
    table = sorted(by_op.items(), key=lambda kv: -kv[1])
    return {
        "kernel_ms_by_op_type": dict(table),
        "nodes_by_op_type": {op: count[op] // 2 for op, _ in table},
        "total_kernel_ms": sum(by_op.values()),
        "top_nodes_ms": dict(sorted(by_node.items(), key=lambda kv: -kv[1])[:25]),
        "note": "per step, mean of two profiled runs (inputs and outputs bound on the device, as the sessions run)",
    }


def _allocator(events: list) -> dict:
    """Per run: the largest ``mem_in_use_peak`` and ``mem_arena_held`` of ORT's profiler (onnxruntime
    versions whose profiler records the allocator after each kernel)."""
    runs = []
    for run in (e for e in events if e.get("name") == "model_run"):
        args = [e["args"] for e in events if e.get("cat") == "Node" and run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]
        if not args or "mem_in_use_peak" not in args[0]:
            return {"error": "this onnxruntime's profiler records no allocator fields"}
        runs.append({k: max(int(a[k]) for a in args) / 1e9 for k in ("mem_in_use_peak", "mem_arena_held")})
    return {"runs_gb": runs, "peak_in_use_gb": max(r["mem_in_use_peak"] for r in runs) if runs else None}


def speed(layers: int, steps: int, repeats: int, out: Path, variants: list[str] | None = None) -> dict:
    import tiny_llama

    from meganeura_onnx.init import default_parameters

    cfg = {**SMOL, "layers": layers}
    params = default_parameters(tiny_llama.build(**cfg, seq=SEQ, batch=BATCH), 0)
    res: dict = {"config": {**cfg, "batch": BATCH, "seq": SEQ, "parameters": int(sum(v.size for v in params.values()))}}
    runs = {
        # ours first: before PyTorch's caching allocator holds memory
        "ours_fp32": lambda: ours(cfg, params, steps, repeats, out, "fp32"),
        "ours_fp32_cuda_graph": lambda: ours(cfg, params, steps, repeats, out, "fp32", cuda_graph=True),
        "ours_fp32_decomposed_attention": lambda: ours(cfg, params, steps, repeats, out, "fp32", fused_attention=False),
        "ours_fp32_separate_projections": lambda: ours(cfg, params, steps, repeats, out, "fp32", merge_projections=False),
        "ours_tf32": lambda: ours(cfg, params, steps, repeats, out, "tf32"),
        "ours_bf16": lambda: ours(cfg, params, steps, repeats, out, "bf16"),
        "ours_bf16_cuda_graph": lambda: ours(cfg, params, steps, repeats, out, "bf16", cuda_graph=True),
        "ours_fp16": lambda: ours(cfg, params, steps, repeats, out, "fp16"),
        "hf_eager_fp32": lambda: hf(cfg, params, steps, repeats, bf16=False, compiled=False),
        "hf_eager_bf16_autocast": lambda: hf(cfg, params, steps, repeats, bf16=True, compiled=False),
        "hf_torch_compile_bf16_autocast": lambda: hf(cfg, params, steps, repeats, bf16=True, compiled=True),
    }
    unknown = sorted(set(variants or ()) - set(runs))
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; choose from {sorted(runs)}")
    for name, fn in runs.items():
        if variants and name not in variants:
            continue
        try:
            res[name] = fn()
        except Exception as e:  # noqa: BLE001 - one failing variant must not hide the others' numbers
            res[name] = {"error": f"{type(e).__name__}: {e}"}
        r = res[name]
        print(name, {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items() if k not in ("repeats_ms", "buffers")})
    ok = {k: v["median_ms"] for k, v in res.items() if isinstance(v, dict) and "median_ms" in v}
    if "ours_fp32" in ok:
        res["ratios_ours_fp32_over"] = {k: ok["ours_fp32"] / v for k, v in ok.items() if k != "ours_fp32"}
    # The goals: bf16 <= 1.0x torch.compile bf16, fp32 <= 0.5x HF eager fp32, memory <= PyTorch's.
    pairs = {
        "ours_bf16/hf_torch_compile_bf16_autocast": ("ours_bf16", "hf_torch_compile_bf16_autocast"),
        "ours_fp32/hf_eager_fp32": ("ours_fp32", "hf_eager_fp32"),
    }
    res["goal_ratios"] = {k: ok[a] / ok[b] for k, (a, b) in pairs.items() if a in ok and b in ok}
    res["goal_memory"] = memory_goal(res)
    try:
        res["ort_profile"] = ort_profile(cfg, params, out)
    except Exception as e:  # noqa: BLE001 - the timings above stay reported
        res["ort_profile"] = {"error": f"{type(e).__name__}: {e}"}
    res["goal_memory"]["allocator_level"] = allocator_level(res)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description="GPU training parity, placement and SmolLM2-135M-shaped step time vs Hugging Face")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--steps", type=int, default=10, help="steps per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-parity", action="store_true")
    ap.add_argument("--variants", default="", help="comma-separated variants of the speed part to run [default: all]")
    a = ap.parse_args()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import onnxruntime as ort
    import torch
    import transformers

    if "CUDAExecutionProvider" not in ort.get_available_providers() or not torch.cuda.is_available():
        sys.exit(
            f"needs onnxruntime-gpu and CUDA torch: ORT providers {ort.get_available_providers()}, torch.cuda {torch.cuda.is_available()}"
        )
    report = {
        "gpu": torch.cuda.get_device_name(0),
        "onnxruntime": ort.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {
            "host": platform.node(),
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "load_average_before": os.getloadavg(),
    }
    if not a.skip_parity:
        report["parity"] = parity(out)
    report["smollm2_135m_shape"] = r = speed(a.layers, a.steps, a.repeats, out, [v for v in a.variants.split(",") if v])
    report["load_average_after"] = os.getloadavg()
    (out / "train_gpu.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nSmolLM2-135M shape, batch {BATCH} x seq {SEQ}, one AdamW step on {report['gpu']} (median of {a.repeats} repeats, min-max):")
    for name, v in r.items():
        if isinstance(v, dict) and "median_ms" in v:
            alloc = f" (allocated {v['peak_memory_gb']:.2f})" if "peak_reserved_gb" in v else ""
            print(
                f"  {name:<32} {v['median_ms']:8.1f} ms  ({v['min_ms']:.1f}-{v['max_ms']:.1f})  "
                f"device {v['device_memory_gb']:.2f} GB{alloc}  loss {v['first_loss']:.4f}"
            )
        elif isinstance(v, dict) and "error" in v:
            print(f"  {name:<32} failed: {v['error']}")
    print("peak memory, like for like (cudaMemGetInfo delta on both sides), ours / PyTorch's (goal <= 1):")
    for pair, ratio in r["goal_memory"]["ratios"].items():
        print(f"  {pair:<52} {ratio:.2f}x")
    alloc = r["goal_memory"]["allocator_level"]
    if "ratio" in alloc:
        print(
            f"  tensors only (fp32): ours {alloc['ours_fp32_gb']:.2f} GB, HF eager {alloc['hf_eager_fp32_gb']:.2f} GB: {alloc['ratio']:.2f}x"
        )
    prof = r["ort_profile"]
    if "error" in prof:
        print(f"ORT profile failed: {prof['error']}")
    else:
        print(f"\nours fp32, where the step's kernel time goes ({prof['total_kernel_ms']:.1f} ms, {prof['onnx_nodes']} ONNX nodes):")
        print(f"  {'op type':<24} {'nodes':>6} {'ms/step':>8} {'share':>6}")
        for op, ms in list(prof["kernel_ms_by_op_type"].items())[:15]:
            print(f"  {op:<24} {prof['nodes_by_op_type'][op]:>6} {ms:8.2f} {ms / prof['total_kernel_ms']:6.1%}")
    print(f"wrote {out / 'train_gpu.json'}")


if __name__ == "__main__":
    main()
