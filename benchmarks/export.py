"""Export-time benchmark: SmolLM2-135M to ONNX, meganeura-onnx vs ``torch.onnx.export`` of the same HF model.

The same random weights on both sides: a ``transformers.LlamaForCausalLM`` with SmolLM2-135M's
config (or ``--weights DIR/model.safetensors`` with its config.json) is saved with
``save_pretrained``; then

- ours: ``models/llama.py``'s ``export_folder`` (what ``meganeura export llama --weights ... -o DIR/``
  runs): read the safetensors, build the decoder graph (the Optimum / onnxruntime-genai layout,
  symbolic sizes, KV cache in and out), lower it and stream the weights to ``model.onnx.data``.
  Timed in-process (median of ``--repeat``), once through the CLI (with Python start-up), and once
  without weights (the default init drawn for every parameter);
- torch: ``torch.onnx.export`` of the HF model (logits of ``input_ids``, dynamic batch and sequence;
  the dynamo exporter when onnxscript is installed, else the TorchScript one), timed once.

The exported files are checked: our logits for a short prompt against the HF model's. Results go to
``<out-dir>/export-cpu-<host>-<time>.json`` with the machine, versions, commit and load averages.

    python benchmarks/export.py --out-dir benchmarks/results
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
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
sys.path.insert(0, str(ROOT))


def _load_model_file(path: Path):
    spec = importlib.util.spec_from_file_location("meganeura_bench_export_llama", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


llama = _load_model_file(ROOT / "models" / "llama.py")


def machine() -> dict:
    import onnx
    import onnxruntime as ort

    info = {**run_info.host(), "load_average_at_start": run_info.load_average(), "cpu": run_info.cpu_model()}
    info["versions"] = {"onnx": onnx.__version__, "onnxruntime": ort.__version__, "numpy": np.__version__}
    for name in ("torch", "transformers", "onnxscript"):
        if importlib.util.find_spec(name) is not None:
            info["versions"][name] = __import__(name).__version__
    info["git_commit"], info["git_dirty"] = run_info.git_commit(), run_info.git_dirty()
    return info


def hf_model(weights: str | None, out: Path):
    """The HF model and the safetensors file both sides export (random SmolLM2-135M unless ``weights``)."""
    import torch
    import transformers

    if weights is not None:
        model = transformers.LlamaForCausalLM.from_pretrained(Path(weights).parent, torch_dtype=torch.float32).eval()
        return model, Path(weights)
    torch.manual_seed(0)
    cfg = llama.PRESETS["smollm2-135m"].to_dict()
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()
    model.save_pretrained(out / "hf")
    return model, out / "hf" / "model.safetensors"


def ours(weights: Path, out: Path, repeat: int) -> dict:
    times = []
    for k in range(repeat):
        t0 = time.perf_counter()
        llama.export_folder(out / f"ours{k}", weights=weights)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "meganeura_onnx.cli.main", "export", "llama", "--weights", str(weights), "-o", str(out / "cli") + "/"],
        check=True,
        capture_output=True,
    )
    cli = time.perf_counter() - t0
    data = (out / "ours0" / "model.onnx.data").stat().st_size
    t0 = time.perf_counter()
    llama.export_folder(out / "default_init", preset="smollm2-135m")  # no weights: the default init is drawn
    default_init = time.perf_counter() - t0
    return {
        "export_s": statistics.median(times),
        "runs_s": [round(t, 3) for t in times],
        "cli_wall_s": round(cli, 3),
        "default_init_export_s": round(default_init, 3),
        "data_bytes": data,
    }


def torch_export(model, out: Path) -> dict:
    import torch

    class Logits(torch.nn.Module):  # logits only: the TorchScript exporter cannot trace HF's DynamicCache
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            return self.inner(input_ids, use_cache=False).logits

    model = Logits(model)
    dynamo = importlib.util.find_spec("onnxscript") is not None
    ids = torch.tensor([[1, 2, 3, 4]])
    t0 = time.perf_counter()
    try:
        if dynamo:
            batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
            torch.onnx.export(model, (ids,), out / "torch.onnx", dynamo=True, dynamic_shapes=({0: batch, 1: seq},), external_data=True)
        else:
            torch.onnx.export(
                model,
                (ids,),
                out / "torch.onnx",
                dynamo=False,
                input_names=["input_ids"],
                dynamic_axes={"input_ids": {0: "batch", 1: "seq"}},
            )
    except Exception as e:  # noqa: BLE001 - the reference side failing is a result to record, not a crash
        return {"exporter": "dynamo" if dynamo else "torchscript", "error": f"{type(e).__name__}: {e}"[:500]}
    return {"exporter": "dynamo" if dynamo else "torchscript", "export_s": round(time.perf_counter() - t0, 3)}


def check_logits(model, folder: Path) -> float:
    """Max |ours - HF| of the logits of a 5-token prompt (the export must be right, not only fast)."""
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([[1, 17, 290, 4000, 5]], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(5)[None]}
    for i in sess.get_inputs()[3:]:
        feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    got = sess.run(["logits"], feeds)[0]
    with torch.no_grad():
        want = model(torch.from_numpy(ids)).logits.numpy()
    return float(np.abs(got - want).max())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--weights", default=None, help="a HF model.safetensors (config.json beside it); default: random SmolLM2-135M")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--out-dir", default=None, help="write the JSON here")
    args = p.parse_args()
    info = machine()
    with tempfile.TemporaryDirectory(prefix="meganeura-export-bench-") as tmp:
        out = Path(tmp)
        model, weights = hf_model(args.weights, out)
        result = {"model": "SmolLM2-135M" + (" (given weights)" if args.weights else " shape, random weights"), "machine": info}
        result["meganeura_onnx"] = ours(weights, out, args.repeat)
        result["meganeura_onnx"]["max_abs_logit_diff_vs_hf"] = check_logits(model, out / "ours0")
        if not args.skip_torch:
            result["torch_onnx_export"] = torch_export(model, out)
    result["load_average_at_end"] = run_info.load_average()
    ref = result.get("torch_onnx_export", {}).get("export_s")
    if ref:
        result["speedup_vs_torch"] = round(ref / result["meganeura_onnx"]["export_s"], 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out_dir:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(args.out_dir) / f"export-cpu-{socket.gethostname()}-{stamp}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
