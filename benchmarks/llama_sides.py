"""One side of the LLaMA decode benchmark, served from a process of its own.

``benchmarks/llama.py`` starts ``python benchmarks/llama_sides.py SPEC.json`` for every measured
configuration. The worker loads its side, runs one untimed warm-up (first runs allocate, tune,
capture CUDA graphs, compile), prints one JSON line (``ready``: load time, versions, ...), then
answers each ``run`` line on stdin with one timed run as a JSON line (``prefill_s``, ``decode_s``,
``decode_cpu_s``, ``tokens``) until ``quit``. A process per side keeps thread pools, CUDA contexts,
compiled graphs and allocator caches of one library from slowing another, lets onnxruntime-genai run
under another interpreter, and lets the caller interleave the repeats of several sides (on a shared
machine a change of load then hits every side alike).

Sides (``spec["side"]``), all over the same Hugging Face folder (``config.json`` + ``model.safetensors``)
and the same prompts (``B`` rows of one length), greedy, end-of-sequence ignored:

- ``ours``: ``LlamaRunner`` (batch 1) or ``LlamaBatchRunner`` of ``models/llama.py`` with its default
  threads (``ours-spin``: with ``thread_spinning=True``, ``ours-nospin``: ``False``, ``ours-1thread``:
  ``threads=1``; ``ours-team2``: ``MEGANEURA_CPU_TEAM=2``; ``ours-separate`` / ``ours-merged``: with ``merge_projections=False`` / ``True``; ``ours-nolayer``: with
  ``decode_layer=False``, each decoder layer as its five fused kernels on CUDA, as MatMul on the CPU;
  ``ours-hostargmax``: each greedy token chosen on the host from the logits; by default ours runs
  ``decode_greedy`` as ``generate`` does: tokens chosen and fed back on the device, in queued chunks);
- ``hf``: ``transformers`` ``generate``, ``eager`` (``DynamicCache``, ``attn_implementation="eager"``)
  or ``static`` (``cache_implementation="static"``, SDPA: on CUDA, transformers compiles the step);
- ``genai``: onnxruntime-genai's ``Generator`` over the folder its model builder wrote.

One run: ``prefill_s`` from the prompt to the first new token of every row; ``decode_s`` the
``new_tokens - 1`` steps after it. For ``hf`` (``generate`` has no hook between them) the prefill is
``generate(max_new_tokens=1)`` and the decode time is ``generate(max_new_tokens=N)`` minus it.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


class NotAvailable(Exception):
    """The configuration cannot run on this branch or machine (reported, not a failure of the run)."""


def load_llama_module():
    # By path: on a machine where the package is not installed, only ROOT is on sys.path.
    spec = importlib.util.spec_from_file_location("meganeura_bench_llama", ROOT / "models" / "llama.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def loop_runner(prefill: Callable[[], list[int]], step: Callable[[list[int]], list[int]], new_tokens: int, chunk=None, chunks=None):
    """One run: prefill, then ``new_tokens - 1`` steps, each fed the tokens it chose last (reading
    them on the host waits for the device). Returns ``prefill_s``, ``decode_s``, ``decode_cpu_s``
    (CPU time of this process, all threads, during the decode: on a shared machine it shows the
    work done where wall time also shows the waiting) and ``tokens [rows][new_tokens]``.
    ``chunk(last, k)``, when given, runs ``k`` steps at once and returns them ``[step][row]`` (our
    greedy decoding queued on the device), in the chunk sizes ``chunks()`` (a fresh
    ``GreedyChunks`` per run: ``generate``'s) picks."""

    def run() -> dict:
        sizes = chunks() if chunk else None
        t0 = time.perf_counter()
        last = prefill()
        t1, c1 = time.perf_counter(), time.process_time()
        out = [last]
        while len(out) < new_tokens:
            steps = sizes.run(chunk, last, new_tokens - len(out)) if chunk else [step(last)]
            out += steps
            last = steps[-1]
        t2, c2 = time.perf_counter(), time.process_time()
        return {"prefill_s": t1 - t0, "decode_s": t2 - t1, "decode_cpu_s": c2 - c1, "tokens": [list(r) for r in zip(*out, strict=True)]}

    return run


SWITCHED_OFF = {
    "separate_projections": ("merge_projections", "products are never merged"),
    "unfused_norm": ("add_rms_norm", "no AddRMSNorm fusion"),
    "unfused_qkv": ("qkv_rope_cache", "no QKVRopeCacheWrite fusion"),
    "unpacked_swiglu": ("swiglu_packed", "no SwiGLUPacked fusion"),
    "no_decode_layer": ("decode_layer", "no DecodeLayer fusion"),
}
"""Spec keys of the ``ours-<mode>`` sides that turn one ``LlamaRunner`` keyword off: (the keyword, what a
branch without it lacks)."""
SWITCHED_ON = {"merged_projections": ("merge_projections", "products are never merged")}
"""Likewise, the spec keys that turn one keyword on."""


def open_ours(spec: dict) -> tuple[dict, Callable]:
    sys.path.insert(0, str(ROOT))
    import onnxruntime as ort

    from meganeura_onnx.generation import GreedyChunks

    llama = load_llama_module()
    folder, prompts, n = Path(spec["hf_dir"]), spec["prompts"], spec["new_tokens"]
    cfg = llama.LlamaConfig.from_json(folder / "config.json")
    rows, plen = len(prompts), len(prompts[0])
    kw = dict(max_seq=plen + n, prefill_chunk=spec.get("prefill_chunk") or plen, device=spec["device"], cuda_graph=spec["cuda_graph"])
    if spec.get("spin") is not None:
        kw["thread_spinning"] = spec["spin"]
    if spec.get("threads"):
        kw["threads"] = spec["threads"]
    if spec.get("cpu_team"):  # read by the DecodeLayer kernels as the session creates them
        os.environ["MEGANEURA_CPU_TEAM"] = spec["cpu_team"]
    runner_keywords = inspect.signature(llama.LlamaRunner).parameters
    for switches, value in ((SWITCHED_OFF, False), (SWITCHED_ON, True)):
        for key, (keyword, missing) in switches.items():
            if spec.get(key):
                if keyword not in runner_keywords:
                    raise NotAvailable(f"LlamaRunner takes no {keyword}= ({missing} on this branch)")
                kw[keyword] = value
    cls = llama.LlamaRunner if rows == 1 else getattr(llama, "LlamaBatchRunner", None)
    if cls is None:
        raise NotAvailable("models/llama.py has no LlamaBatchRunner (batch > 1 decode)")
    if spec["precision"] != "fp32":
        if "precision" not in inspect.signature(llama.LlamaRunner).parameters:  # LlamaBatchRunner passes it on
            raise NotAvailable(f"LlamaRunner takes no precision= ({spec['precision']} inference is not on this branch)")
        kw["precision"] = spec["precision"]
    if rows > 1:
        kw["batch"] = rows
    t0 = time.perf_counter()
    runner = cls(cfg, folder / "model.safetensors", **kw)
    build_s = time.perf_counter() - t0
    # Greedy steps as generate() runs them: on the device in queued chunks (decode_greedy: the chosen
    # tokens fed back, read back once per chunk) unless the spec asks for the host's argmax of the logits.
    on_device = hasattr(runner, "decode_greedy") and not spec.get("host_argmax")
    fixed = spec.get("greedy_chunk")
    chunks = (lambda: GreedyChunks(fixed, fixed)) if fixed else GreedyChunks  # noqa: E731
    if rows == 1:
        prefill = lambda: [int(np.argmax(runner.prefill(prompts[0])))]  # noqa: E731
        step = lambda last: [int(np.argmax(runner.decode(last[0])))]  # noqa: E731
        chunk = lambda last, k: [[t] for t in runner.decode_greedy(last[0], k)]  # noqa: E731
    else:
        prefill = lambda: np.argmax(runner.prefill(prompts), axis=-1).tolist()  # noqa: E731
        step = lambda last: np.argmax(runner.decode(last), axis=-1).tolist()  # noqa: E731
        chunk = lambda last, k: [list(s) for s in zip(*runner.decode_greedy(last, k), strict=True)]  # noqa: E731
    plan = runner.decoder.plan()
    info = {
        "session_build_s": round(build_s, 3),
        "prefill_chunk": runner.chunk,
        "argmax": (f"device (decode_greedy, chunks of {fixed})" if fixed else "device (decode_greedy, generate's chunks)")
        if on_device
        else "host (numpy, from the logits)",
        "custom_ops": plan.kernels(),
        "providers": plan.providers,
        "versions": {"onnxruntime": ort.__version__},
    }
    return info, loop_runner(prefill, step, n, chunk if on_device else None, chunks)


def open_hf(spec: dict) -> tuple[dict, Callable]:
    import torch
    import transformers

    torch.backends.cuda.matmul.allow_tf32 = False  # strict fp32, as ORT's use_tf32=0
    torch.backends.cudnn.allow_tf32 = False
    device, prompts, n, mode = spec["device"], spec["prompts"], spec["new_tokens"], spec["hf_mode"]
    dtype = getattr(torch, TORCH_DTYPES[spec["precision"]])
    attn = "eager" if mode == "eager" else "sdpa"
    t0 = time.perf_counter()
    model = transformers.LlamaForCausalLM.from_pretrained(spec["hf_dir"], dtype=dtype, attn_implementation=attn).to(device).eval()
    build_s = time.perf_counter() - t0
    ids = torch.tensor(prompts, device=device)
    extra = {"cache_implementation": "static"} if mode == "static" else {}

    def generate(k: int) -> tuple[float, float, list[list[int]]]:
        if device == "cuda":
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=k, min_new_tokens=k, do_sample=False, pad_token_id=0, **extra)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, time.process_time() - c0, out[:, ids.shape[1] :].tolist()

    def run() -> dict:
        # The longer generation first: transformers then keeps one static cache of that length for
        # both, so what the warm-up run compiled is not compiled again.
        full, full_cpu, tokens = generate(n)
        first, first_cpu, _ = generate(1)
        return {"prefill_s": first, "decode_s": max(full - first, 1e-9), "decode_cpu_s": full_cpu - first_cpu, "tokens": tokens}

    info = {
        "model_load_s": round(build_s, 3),
        "attn_implementation": attn,
        "cache": "static" if mode == "static" else "dynamic",
        "torch_threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    return info, run


def open_genai(spec: dict) -> tuple[dict, Callable]:
    import onnxruntime_genai as og

    device, prompts, n = spec["device"], spec["prompts"], spec["new_tokens"]
    rows, plen = len(prompts), len(prompts[0])
    t0 = time.perf_counter()
    config = og.Config(spec["genai_dir"])
    if device == "cuda":
        config.clear_providers()
        config.append_provider("cuda")
        config.set_provider_option("cuda", "enable_cuda_graph", "1" if spec["cuda_graph"] else "0")
    model = og.Model(config)
    build_s = time.perf_counter() - t0
    batch = np.asarray(prompts, dtype=np.int32)
    state: dict = {}

    def prefill() -> list[int]:
        # The generator (it allocates the caches for max_length) is made per prompt, as a caller makes
        # it; min_length = max_length: no row stops early at an end-of-sequence token of random weights.
        params = og.GeneratorParams(model)
        params.set_search_options(batch_size=rows, max_length=plen + n, min_length=plen + n, do_sample=False)
        state["gen"] = gen = og.Generator(model, params)
        gen.append_tokens(batch)
        gen.generate_next_token()
        return np.asarray(gen.get_next_tokens()).reshape(-1).tolist()

    def step(last: list[int]) -> list[int]:
        state["gen"].generate_next_token()
        return np.asarray(state["gen"].get_next_tokens()).reshape(-1).tolist()

    return {"model_load_s": round(build_s, 3), "versions": {"onnxruntime_genai": og.__version__}}, loop_runner(prefill, step, n)


OPENERS = {"ours": open_ours, "hf": open_hf, "genai": open_genai}


def serve(spec: dict) -> None:
    try:
        info, run = OPENERS[spec["side"]](spec)
    except NotAvailable as e:
        print(json.dumps({"error": f"not available: {e}"}), flush=True)
        return
    run()  # warm-up
    print(json.dumps({"ready": True, **info}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        print(json.dumps(run()), flush=True)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python benchmarks/llama_sides.py SPEC.json (started by benchmarks/llama.py; then 'run' lines on stdin)")
    serve(json.loads(Path(args[0]).read_text()))


if __name__ == "__main__":
    main()
