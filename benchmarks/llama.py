"""LLaMA decode benchmark: meganeura-onnx vs Hugging Face ``transformers`` vs onnxruntime-genai, one run.

SmolLM2-135M shape with random weights: a ``LlamaForCausalLM`` of that config, randomly initialised
by transformers (seed 0) and written with ``save_pretrained``, is the one model every side loads:
ours through its safetensors loader, transformers with ``from_pretrained``, onnxruntime-genai after
its own model builder (``python -m onnxruntime_genai.models.builder -i FOLDER``) converted it. Each
measured configuration runs in a process of its own (``benchmarks/llama_sides.py`` says how each
side is timed); the prompts are ``batch`` random rows of ``--prompt-len`` tokens, greedy decoding of
``--new-tokens`` tokens, end-of-sequence ignored, medians of ``--repeat`` runs with their spread.

Configurations (``--sides``, ``--precisions``, ``--batches``):

- ``ours``: our ``LlamaRunner`` in each precision; on CUDA with the decode step replayed as a CUDA
  graph and without (``ours-graph`` / ``ours``). fp16/bf16 need ``precision=`` on the runner; where the
  branch has none the JSON says "not available". Batch > 1 uses ``LlamaBatchRunner``.
- ``ours-spin`` / ``ours-nospin`` / ``ours-1thread`` (CPU): the same with ONNX Runtime's threads
  spinning between ops (``thread_spinning=True``; the runner's default is off, see ``LlamaRunner``),
  without (the default, named), or on one thread (``threads=1``: the least CPU time per token).
- ``ours-separate`` / ``ours-merged``: ``ours`` with the prefill's q/k/v and gate/up products kept separate
  (``merge_projections=False``) or each group run as one product (``True``); by default a prefill merges
  them on CUDA only.
- ``ours-unfusednorm``: ``ours`` with the prefill's residual adds and RMSNorms unfused
  (``add_rms_norm=False``; by default on CUDA each is one ``AddRMSNorm``).
- ``ours-unfusedqkv``: ``ours`` with the prefill's split of each merged q/k/v product, its ropes and cache
  writes as four nodes (``qkv_rope_cache=False``; by default each layer's are one ``QKVRopeCacheWrite``, on the CPU where our
  kernels run).
- ``ours-unpackedswiglu``: ``ours`` with the prefill's split of each merged gate|up product and the SwiGLU after
  it as two nodes (``swiglu_packed=False``; by default each layer's are one ``SwiGLUPacked``).
- ``ours-team2`` (CPU): ``ours`` with ``MEGANEURA_CPU_TEAM=2``: every DecodeLayer call on its team of
  threads (by default a layer runs on one thread for a stretch of calls while its team keeps waiting
  for members the OS preempted: ``custom_ops/cpu_team_policy.h``).
- ``ours-nolayer``: ``ours`` with ``decode_layer=False``: each decoder layer of the decode step as its
  five fused kernels (CUDA) or its products as ONNX Runtime's MatMul (CPU) instead of one DecodeLayer.
- ``ours-hostargmax``: ``ours`` choosing each greedy token on the host (numpy argmax of the logits
  copied back after each step) instead of on the device (ours' default where the runner has
  ``decode_greedy``, as ``generate`` runs it: the chosen tokens fed back on the device, steps queued
  in chunks with one wait and one read-back per chunk: 8 steps, then up to 64, ``GreedyChunks``).
- ``ours-chunk16`` / ``ours-chunk64``: ``ours`` with the greedy steps queued in fixed chunks of 16
  (``generate``'s before its chunks grew) or 64 (the host's turnaround between chunks leaves the GPU idle).
- ``hf-eager``: ``generate`` with ``attn_implementation="eager"``, in each precision.
- ``hf-static``: ``generate`` with ``cache_implementation="static"`` (SDPA attention; on CUDA
  transformers compiles the decode step with ``torch.compile``), in each precision.
- ``genai``: the builder's model (CPU: fp32; CUDA: fp16, its fp32 CUDA export does not load), on
  CUDA with its CUDA graph (``genai-graph``) and without.

On CUDA fp32 is strict on every side (ORT ``use_tf32=0``, torch ``allow_tf32=False``). The JSON
(``<out-dir>/llama-<device>-<host>-<time>.json``) holds the machine, every library's version, the
commit, the load average at start and end, and the greedy tokens' agreement with ours in fp32.
``--merge FILE`` adds this run's configurations to an earlier JSON of the same shape (so the GPU
run can be split into calls of under 10 minutes each).

    make bench-llama-cpu                                               # CPU: ours vs genai vs HF eager
    python benchmarks/llama.py --device cuda --sides ours,genai        # on the GPU machine, then
    python benchmarks/llama.py --device cuda --sides hf-eager,hf-static --merge benchmarks/results/llama-cuda-....json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import run_info

ROOT = Path(__file__).resolve().parent.parent
SIDES_SCRIPT = Path(__file__).resolve().with_name("llama_sides.py")
OURS_MODES = {
    "spin": {"spin": True},
    "nospin": {"spin": False},
    "1thread": {"threads": 1},
    "separate": {"separate_projections": True},
    "merged": {"merged_projections": True},
    "unfusednorm": {"unfused_norm": True},
    "unfusedqkv": {"unfused_qkv": True},
    "unpackedswiglu": {"unpacked_swiglu": True},
    "nolayer": {"no_decode_layer": True},
    "hostargmax": {"host_argmax": True},
    "team2": {"cpu_team": "2"},
    "chunk16": {"greedy_chunk": 16},
    "chunk64": {"greedy_chunk": 64},
}
"""``ours-<mode>`` sides: what they change in the spec (``spin``: ``thread_spinning``, ``threads``,
``separate_projections``: ``merge_projections=False``, ``merged_projections``: ``merge_projections=True``, ``unfused_norm``: ``add_rms_norm=False``, ``unfused_qkv``: ``qkv_rope_cache=False``, ``unpacked_swiglu``: ``swiglu_packed=False``, ``no_decode_layer``: ``decode_layer=False``,
``host_argmax``: the greedy token from the logits on the host, ``cpu_team``: ``MEGANEURA_CPU_TEAM``,
``greedy_chunk``: greedy steps queued per read-back, fixed, instead of ``generate``'s ``GreedyChunks``)."""
DEFAULTS = {  # per device: what the issue asks to be shown
    "cpu": {
        "sides": "ours,ours-team2,ours-spin,ours-1thread,genai,hf-eager",
        "precisions": "fp32",
        "batches": "1",
        "new_tokens": 64,
        "interleave": True,
    },
    "cuda": {
        "sides": "ours,genai,hf-eager,hf-static",
        "precisions": "fp32,fp16,bf16",
        "batches": "1,8",
        "new_tokens": 128,
        "interleave": False,
    },
}


def machine(device: str) -> dict:
    info = {**run_info.host(), "load_average_at_start": run_info.load_average(), "cpu": run_info.cpu_model()}
    if device == "cuda":
        try:
            query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
            info["gpu"] = subprocess.run(query, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["gpu"] = "unknown"
    info["git_commit"], info["git_dirty"] = run_info.git_commit(), run_info.git_dirty()
    info.update(run_info.code_digests())
    return info


def hf_config(preset: str) -> dict:
    """The transformers ``LlamaConfig`` kwargs of one of our presets (SmolLM2-135M's config.json)."""
    sys.path.insert(0, str(SIDES_SCRIPT.parent))
    from llama_sides import load_llama_module

    cfg = load_llama_module().PRESETS[preset].to_dict()
    cfg.pop("architectures", None)
    cfg["rope_parameters"] = {"rope_theta": cfg.pop("rope_theta"), "rope_type": "default"}
    return cfg


def write_hf_folder(folder: Path, preset: str, seed: int) -> int:
    """A randomly initialised ``LlamaForCausalLM`` of the preset, ``save_pretrained`` + a word-level
    tokenizer (the genai builder copies a tokenizer; the benchmark feeds token ids). Returns the
    parameter count."""
    import tokenizers
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(**hf_config(preset))
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(cfg.vocab_size)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", eos_token="t0", bos_token="t0").save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def genai_model(a: argparse.Namespace, result: dict, spec: dict, work: Path) -> bool:
    """The builder's model for the spec's precision, built once per run; False when the builder failed."""
    key, built = spec["precision"], result.setdefault("genai_builder", {})
    out = work / f"genai-{key}"
    if key not in built or not (out / "genai_config.json").is_file():
        print(f"onnxruntime-genai model builder ({key}, {a.device}) ...", file=sys.stderr, flush=True)
        built[key] = build_genai(spec["python"], work / "hf", out, key, a.device, a.timeout)
    spec["genai_dir"] = str(out)
    return "error" not in built[key]


def build_genai(python: str, hf_dir: Path, out: Path, precision: str, device: str, timeout: int) -> dict:
    """onnxruntime-genai's model builder over the folder; returns what the JSON records of it."""
    cmd = [python, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(out), "-p", precision]
    cmd += ["-e", device, "-c", str(out.parent / "genai_cache")]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"the model builder took longer than {timeout} s"}
    shown = " ".join(cmd[1:]).replace(str(out.parent), "WORK")
    info = {"command": f"python {shown}", "build_s": round(time.perf_counter() - t0, 1)}
    if proc.returncode != 0 or not (out / "genai_config.json").is_file():
        info["error"] = f"model builder exited {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"
    return info


class Worker:
    """One configuration served by ``llama_sides.py`` in its own process (see there for the protocol);
    a failure becomes an ``error`` entry, never a crash of the run."""

    def __init__(self, python: str, spec: dict, work: Path, timeout: int) -> None:
        self.spec, self.timeout, self.entry = spec, timeout, {"runs": []}
        path = work / f"spec-{spec['name']}.json"
        path.write_text(json.dumps(spec))
        self.log = open(work / f"stderr-{spec['name']}.txt", "w+")  # closed in close()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        cmd = [python, str(SIDES_SCRIPT), str(path)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        ready = self._reply()
        if ready is not None and "error" not in ready:
            self.entry.update({k: v for k, v in ready.items() if k != "ready"})

    @property
    def ok(self) -> bool:
        return "error" not in self.entry

    def _reply(self) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line.strip():
            reply = json.loads(line)
            if "error" in reply:
                self.entry["error"] = reply["error"]
            return reply
        self.log.flush()
        self.log.seek(0)
        why = f"no answer within {self.timeout} s" if not ready else f"exited {self.proc.poll()}"
        self.entry["error"] = f"{why}: {self.log.read()[-2000:]}"
        return None

    def run(self) -> None:
        if self.ok:
            self.proc.stdin.write("run\n")
            self.proc.stdin.flush()
            reply = self._reply()
            if reply is not None and "error" not in reply:
                self.entry["runs"].append(reply)

    def close(self) -> dict:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return finish(self.entry, self.spec)


def finish(entry: dict, spec: dict) -> dict:
    """Medians and spreads (min-max) of the runs, in the units of the JSON."""
    keys = ("side", "hf_mode", "nospin", "spin", "threads", "cpu_team", "separate_projections", "merged_projections", "unfused_norm")
    keys += ("unfused_qkv", "unpacked_swiglu", "no_decode_layer", "precision", "batch", "cuda_graph")
    entry["config"] = {k: spec.get(k) for k in keys}
    runs = entry.pop("runs", [])
    if not runs:
        entry.setdefault("error", "no run finished")
        return entry
    steps = spec["batch"] * (spec["new_tokens"] - 1)
    prefill = [r["prefill_s"] * 1e3 for r in runs]
    rate = [steps / max(r["decode_s"], 1e-9) for r in runs]
    p, d = statistics.median(prefill), statistics.median(r["decode_s"] for r in runs)
    entry.update(
        prefill_ms=round(p, 2),
        prefill_ms_range=[round(min(prefill), 2), round(max(prefill), 2)],
        decode_tokens_per_s=round(steps / max(d, 1e-9), 2),
        decode_tokens_per_s_range=[round(min(rate), 2), round(max(rate), 2)],
        end_to_end_tokens_per_s=round(spec["batch"] * spec["new_tokens"] / (p / 1e3 + d), 2),
        decode_cpu_ms_per_token=round(statistics.median(r["decode_cpu_s"] for r in runs) * 1e3 / steps, 2),
        repeats=len(runs),
        tokens=runs[-1]["tokens"],
    )
    return entry


def configurations(a: argparse.Namespace) -> list[dict]:
    """The (side, precision, batch, CUDA graph) combinations asked for, each with a unique name."""
    out = []
    cuda = a.device == "cuda"
    for batch in (int(b) for b in a.batches.split(",")):
        for side in a.sides.split(","):
            if side == "genai":
                precisions = ["fp16" if cuda else "fp32"]
            else:
                precisions = a.precisions.split(",")
            for precision in precisions:
                graphs = [False, True] if cuda and (side.startswith("ours") or side == "genai") else [False]
                for graph in graphs:
                    name = f"{side}{'-graph' if graph else ''}-{precision}-b{batch}"
                    kind, mode = (side.split("-") + [None])[:2]
                    if kind == "ours" and mode is not None and mode not in OURS_MODES:
                        raise SystemExit(f"--sides: unknown side {side!r}; ours takes -{', -'.join(OURS_MODES)}")
                    variant = OURS_MODES.get(mode, {}) if kind == "ours" else {}
                    mode = None if kind == "ours" else mode
                    spec = {"name": name, "side": kind, "hf_mode": mode, "spin": None, "threads": None, **variant}
                    out.append({**spec, "nospin": spec["spin"] is False, "precision": precision, "batch": batch, "cuda_graph": graph})
    return out


def agreement(reference: list[int] | None, tokens: list[int]) -> int | None:
    """How many leading greedy tokens equal ours in fp32 (random weights: near-ties diverge sooner in half precision)."""
    if reference is None:
        return None
    return next((i for i, (x, y) in enumerate(zip(reference, tokens, strict=False)) if x != y), min(len(reference), len(tokens)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--preset", default="smollm2-135m")
    ap.add_argument(
        "--sides",
        default=None,
        help="comma-separated: ours, ours-spin, ours-nospin, ours-1thread, ours-separate, ours-merged, ours-unfusednorm, ours-unfusedqkv, ours-unpackedswiglu, ours-nolayer, ours-hostargmax, ours-team2, ours-chunk16, ours-chunk64, genai, hf-eager, hf-static [default: per device]",
    )
    ap.add_argument("--precisions", default=None, help="comma-separated: fp32, fp16, bf16 [CPU: fp32; CUDA: all]")
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes [CPU: 1; CUDA: 1,8]")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=None, help="[CPU: 64; CUDA: 128]")
    ap.add_argument("--prefill-chunk", type=int, default=None, help="rows per prefill step of ours [default: the prompt length]")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per configuration (median and spread)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompts")
    ap.add_argument(
        "--genai-python", default=sys.executable, help="interpreter with onnxruntime-genai (and its builder's torch, transformers, onnx-ir)"
    )
    ap.add_argument("--timeout", type=int, default=600, help="seconds a worker may take to load, warm up or run once")
    ap.add_argument(
        "--interleave",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="load every configuration, then alternate their repeats [CPU: yes; CUDA: no]",
    )
    ap.add_argument("--work-dir", default=None, help="where the HF folder and genai models go [default: a temporary folder]")
    ap.add_argument("--merge", default=None, help="an earlier JSON of this benchmark: add this run's configurations to it")
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    a = ap.parse_args(argv)
    for key, value in DEFAULTS[a.device].items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    return a


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llama-bench-") as tmp:
        work = Path(a.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        return run(a, work)


def run(a: argparse.Namespace, work: Path) -> dict:
    result = json.loads(Path(a.merge).read_text()) if a.merge else None
    mach = machine(a.device)
    hf_dir = work / "hf"
    params = write_hf_folder(hf_dir, a.preset, a.seed)
    rng = np.random.default_rng(a.seed)
    vocab = hf_config(a.preset)["vocab_size"]
    prompts = rng.integers(0, vocab, size=(max(int(b) for b in a.batches.split(",")), a.prompt_len)).tolist()
    if result is None:
        result = {
            "benchmark": "llama decode",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": a.device,
            "model": {
                "preset": a.preset,
                "parameters": params,
                "weights": f"random (transformers init, torch seed {a.seed}), one folder for every side",
            },
            "prompt_len": a.prompt_len,
            "new_tokens": a.new_tokens,
            "repeat": a.repeat,
            "precision_note": "fp32 is strict on CUDA (TF32 off); fp16/bf16: weights and activations in that type",
            "machine": mach,
            "configurations": {},
        }
    else:
        result.setdefault("merged_runs", []).append({"sides": a.sides, "machine": mach})
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(a.merge) if a.merge else out_dir / f"llama-{a.device}-{socket.gethostname()}-{stamp}.json"
    specs = []
    for spec in configurations(a):
        spec.update(device=a.device, hf_dir=str(hf_dir), prompts=prompts[: spec["batch"]], new_tokens=a.new_tokens)
        spec.update(prefill_chunk=a.prefill_chunk, python=a.genai_python if spec["side"] == "genai" else sys.executable)
        if spec["side"] == "genai" and not genai_model(a, result, spec, work):
            result["configurations"][spec["name"]] = {"error": "the genai model builder failed (see genai_builder)"}
            continue
        specs.append(spec)
    # Interleaved: every worker of a group loaded, then repeat r of each in turn (on a shared machine a
    # change of load hits every side alike); one worker at a time otherwise.
    groups = [specs] if a.interleave else [[s] for s in specs]
    for group in groups:
        workers = []
        for spec in group:
            print(f"{spec['name']}: loading and warming up ...", file=sys.stderr, flush=True)
            workers.append(Worker(spec["python"], spec, work, a.timeout))
        for r in range(a.repeat):
            for w in workers:
                print(f"{w.spec['name']}: run {r + 1}/{a.repeat}", file=sys.stderr, flush=True)
                w.run()
        for w in workers:
            entry = result["configurations"][w.spec["name"]] = w.close()
            print(json.dumps({k: v for k, v in entry.items() if k != "tokens"}), file=sys.stderr, flush=True)
        save(result, mach, path)  # after every group: a run cut short by a time limit keeps what it measured
    save(result, mach, path)
    print_table(result)
    print(f"wrote {path}", file=sys.stderr)
    return result


def save(result: dict, mach: dict, path: Path) -> None:
    reference = result["configurations"].get("ours-fp32-b1", {}).get("tokens")
    for entry in result["configurations"].values():
        if "tokens" in entry:
            entry["greedy_tokens_agree_with_ours_fp32"] = agreement(reference and reference[0], entry["tokens"][0])
    mach["load_average_at_end"] = run_info.load_average()
    path.write_text(json.dumps(result, indent=2) + "\n")


def print_table(result: dict) -> None:
    print(f"{'configuration':<26} {'prefill ms':>18} {'decode tokens/s':>22}  agree")
    for name, e in result["configurations"].items():
        if "error" in e:
            print(f"{name:<26} {e['error'][:100]}")
            continue
        p, d = e["prefill_ms_range"], e["decode_tokens_per_s_range"]
        print(
            f"{name:<26} {e['prefill_ms']:>8} ({p[0]}-{p[1]}) {e['decode_tokens_per_s']:>9} ({d[0]}-{d[1]})  {e.get('greedy_tokens_agree_with_ours_fp32')}"
        )


if __name__ == "__main__":
    main()
