"""benchmarks/llama.py end to end on the tiny preset: every side loads the same weights (ours through
the safetensors loader, transformers with from_pretrained, onnxruntime-genai after its own model
builder) and, greedy in fp32, they produce the same tokens."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# onnxruntime-genai (its builder also needs onnx-ir) comes with the [bench] extra; without it the
# benchmark is checked on the other two sides.
HAVE_GENAI = all(importlib.util.find_spec(m) is not None for m in ("onnxruntime_genai", "onnx_ir"))


def test_the_llama_benchmark_sides_load_one_model_and_agree_on_greedy_tokens(tmp_path):
    sides = "ours,hf-eager" + (",genai" if HAVE_GENAI else "")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "llama.py"), "--preset", "tiny", "--sides", sides]
    cmd += [
        "--prompt-len",
        "12",
        "--new-tokens",
        "6",
        "--repeat",
        "1",
        "--out-dir",
        str(tmp_path / "out"),
        "--work-dir",
        str(tmp_path / "work"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = (tmp_path / "out").glob("llama-cpu-*.json")
    result = json.loads(path.read_text())
    names = {"ours-fp32-b1", "hf-eager-fp32-b1"} | ({"genai-fp32-b1"} if HAVE_GENAI else set())
    assert set(result["configurations"]) == names
    for name in names:
        entry = result["configurations"][name]
        assert "error" not in entry, (name, entry.get("error"))
        assert entry["greedy_tokens_agree_with_ours_fp32"] == 6, (name, entry["tokens"])
        assert entry["prefill_ms"] > 0 and entry["decode_tokens_per_s"] > 0
    assert len(result["machine"]["load_average_at_start"]) == 3 and result["machine"]["git_commit"]
