"""Every CLI failure is one line ``Error: ...`` on stderr with a non-zero exit, never a traceback.

A fuzz of invalid invocations (bad numbers, bad paths, broken model files, garbage model and
checkpoint files) runs through this checkout's CLI in one subprocess; each must end in exactly one
``Error:`` line naming the problem, exit non-zero, and print no Python traceback. Invalid arguments
must be refused before any training starts (no progress bar on stderr).
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import numpy as np
import pytest
from cli_launch import ROOT, meganeura, meganeura_batch

TINY_MODEL = """
import numpy as np
from meganeura_onnx import Graph

def build(batch=4, hidden=8):
    g = Graph()
    x = g.input("x", [batch, 6])
    y = g.input("labels", [batch, 3])
    w1, b1 = g.parameter("w1", [6, hidden]), g.parameter("b1", [hidden])
    w2, b2 = g.parameter("w2", [hidden, 3]), g.parameter("b2", [3])
    logits = g.bias_add(g.matmul(g.relu(g.bias_add(g.matmul(x, w1), b1)), w2), b2)
    g.set_outputs([g.cross_entropy_loss(logits, y), logits])
    return g

def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 16)]
    return {"x_train": x, "y_train": y, "x_test": x, "y_test": y}
"""

BROKEN_MODELS = {
    "syntax.py": "def build(:\n    pass\n",
    "raises_on_import.py": "raise RuntimeError('the model file failed while importing')\n",
    "imports_missing.py": "import no_such_module_for_meganeura\n",
    "no_build.py": "x = 1\n",
    "build_not_callable.py": "build = 3\n",
    "build_returns_int.py": "def build(**kw):\n    return 42\n",
    "build_raises.py": "def build(**kw):\n    raise ValueError('hidden size must be even')\n",
    "build_no_outputs.py": "from meganeura_onnx import Graph\ndef build(**kw):\n    return Graph()\n",
    "no_data.py": TINY_MODEL.split("def data")[0],
    "data_bad_keys.py": TINY_MODEL.split("def data")[0] + "def data():\n    return {'a': 1}\n",
    "data_raises.py": TINY_MODEL.split("def data")[0] + "def data():\n    return 1 / 0\n",
    "data_wrong_width.py": TINY_MODEL.replace("(16, 6)", "(16, 5)"),
    "data_not_dict.py": TINY_MODEL.split("def data")[0] + "def data():\n    return [1, 2]\n",
}


def _write_files(d: Path) -> dict[str, str]:
    files = {"tiny": d / "tiny.py", "dir": d / "a_folder", "plain": d / "plain.txt"}
    files["tiny"].write_text(TINY_MODEL)
    files["dir"].mkdir()
    files["plain"].write_text("not a folder\n")
    for name, text in BROKEN_MODELS.items():
        (d / name).write_text(text)
        files[name] = d / name
    rng = np.random.default_rng(0)
    garbage = {
        "garbage.onnx": rng.integers(0, 256, 300, dtype=np.uint8).tobytes(),
        "empty.onnx": b"",
        "text.onnx": b"this is not protobuf at all\n",
        "garbage.safetensors": rng.integers(0, 256, 300, dtype=np.uint8).tobytes(),
        "empty.safetensors": b"",
        "huge_header.safetensors": struct.pack("<Q", 1 << 62) + b"{}",
        "bad_json.safetensors": struct.pack("<Q", 5) + b"{oops",
        "json_list.safetensors": struct.pack("<Q", 2) + b"[]",
        "bad_dtype.safetensors": _header({"w1": {"dtype": "F99", "shape": [6, 8], "data_offsets": [0, 192]}}, 192),
        "offsets_outside.safetensors": _header({"w1": {"dtype": "F32", "shape": [6, 8], "data_offsets": [0, 192]}}, 10),
        "negative_step.safetensors": _header({"__metadata__": {"step": "-3"}}, 0),
        "garbage.json": b"{not json",
    }
    for name, blob in garbage.items():
        (d / name).write_bytes(blob)
        files[name] = d / name
    return {k: str(v) for k, v in files.items()}


def _header(h: dict, data_bytes: int) -> bytes:
    import json

    text = json.dumps(h).encode()
    return struct.pack("<Q", len(text)) + text + b"\0" * data_bytes


def _export_and_inspect_calls(f: dict[str, str], out: Path) -> list[list[str]]:
    tiny, o = f["tiny"], str(out / "o.onnx")
    calls: list[list[str]] = [[], ["nosuch-command"], ["--bogus"], ["export"], ["inspect"], ["train"], ["view"], ["embed"]]
    # export: broken model files, bad paths and options
    calls += [["export", f[m], "-o", o] for m in BROKEN_MODELS if "data" not in m]  # export needs no data()
    calls += [["export", tiny, "-o", o, "--weights", f[k]] for k in f if k.endswith(".safetensors")]
    calls += [["export", tiny, "-o", o, "--allow-missing"], ["export", "no-such-built-in-model", "-o", o]]
    calls += [
        ["export", str(out / "missing.py"), "-o", o],
        ["export", tiny],
        ["export", tiny, "-o", f["dir"]],
        ["export", tiny, "-o", f["plain"] + "/sub/x.onnx"],
        ["export", tiny, "-o", f["plain"] + "/x.onnx"],
        ["export", tiny, "--training-artifacts", f["plain"]],
        ["export", tiny, "--training-artifacts", f["plain"] + "/sub"],
        ["export", tiny, "-o", o, "--optimizer", "lbfgs"],
        ["export", tiny, "-o", o, "--seed", "-1"],
        ["export", tiny, "-o", o, "--seed", "x"],
    ]
    calls += [["export", tiny, "-o", o, "--opset", v] for v in ("0", "5", "99", "abc", "")]
    for s in ("=1", "noequals", "1x=2", "nosuch=1", "hidden=0", "hidden=-4", "hidden=abc", "batch=-2", "hidden=2.5", "hidden=[1]"):
        calls.append(["export", tiny, "-o", o, "--set", s])
    # inspect: not ONNX files
    calls += [["inspect", f[k]] for k in ("garbage.onnx", "empty.onnx", "text.onnx", "tiny", "garbage.safetensors")]
    calls += [["inspect", f["dir"]], ["inspect", str(out / "missing.onnx")], ["inspect", f["garbage.onnx"], "--json"]]
    calls += [["view", str(out / "missing.onnx")], ["view", f["dir"]]]
    return calls


def _train_calls(f: dict[str, str], out: Path) -> list[list[str]]:
    tiny = f["tiny"]
    calls: list[list[str]] = []
    bad_numbers = {
        "--batch-size": ("0", "-1", "abc", "1.5", "nan"),
        "--epochs": ("0", "-3", "x"),
        "--lr": ("nan", "inf", "-inf", "-0.1", "abc", "1e999"),
        "--weight-decay": ("nan", "-1", "inf"),
        "--clip": ("0", "-1", "nan", "inf"),
        "--seed": ("-1", "1.5"),
        "--optimizer": ("lbfgs", ""),
        "--device": ("tpu", ""),
        "--lr-schedule": ("exp",),
        "--warmup": ("-1", "x"),
        "--grad-accum": ("0", "-2"),
        "--eval-every": ("0",),
        "--precision": ("fp8",),
        "--nproc-per-node": ("0", "-1", "many"),
    }
    calls += [["train", tiny, opt, v] for opt, vs in bad_numbers.items() for v in vs]
    for s in ("batch=abc", "batch=0", "batch=-1", "batch=True", "batch=2.5", "batch=None", "hidden=0", "hidden=x", "=3", "nosuch=1"):
        calls.append(["train", tiny, "--set", s])
    calls += [["train", f[m]] for m in BROKEN_MODELS]
    calls += [
        ["train", str(out / "missing.py")],
        ["train", f["dir"]],
        ["train", tiny, "--checkpoint", f["dir"]],
        ["train", tiny, "--checkpoint", f["plain"] + "/sub/c.safetensors"],
        ["train", tiny, "--checkpoint", f["plain"] + "/c.safetensors"],
        ["train", tiny, "--export", f["dir"]],
        ["train", tiny, "--export", f["plain"] + "/m.onnx"],
        ["train", tiny, "--resume"],
        ["train", tiny, "--resume", "--checkpoint", str(out / "missing.safetensors")],
    ]
    corrupt = [k for k in f if k.endswith(".safetensors")]
    calls += [["train", tiny, "--resume", "--checkpoint", f[k]] for k in corrupt]
    return calls


def _generate_embed_and_junk_calls(f: dict[str, str], out: Path) -> list[list[str]]:
    calls: list[list[str]] = []
    llama = str(ROOT / "models" / "llama.py")
    calls += [
        ["generate", llama, "--preset", "tiny"],
        ["generate", llama, "--preset", "tiny", "--prompt", "hello"],
        ["generate", llama, "--preset", "tiny", "--prompt", "hi", "--prompt-ids", "1"],
        ["generate", llama, "--preset", "nosuch", "--prompt-ids", "1,2"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "a,b"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "1", "--max-new-tokens", "-1"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "1", "--temperature", "-1"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "1", "--top-k", "-2"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "1", "--max-seq", "0"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "1,2,3,4", "--max-seq", "2"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "1", "--device", "tpu"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "1", "--tokenizer", f["garbage.json"]],
        ["generate", llama, "--config", f["garbage.json"], "--prompt-ids", "1"],
        ["generate", llama, "--weights", f["garbage.safetensors"], "--preset", "tiny", "--prompt-ids", "1"],
        ["generate", llama, "--weights", f["bad_json.safetensors"], "--preset", "tiny", "--prompt-ids", "1"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "99999999"],
        ["generate", llama, "--preset", "tiny", "--prompt-ids", "-5"],
        ["generate", f["tiny"], "--prompt-ids", "1"],
        ["generate", f["syntax.py"], "--prompt-ids", "1"],
        ["embed", "hello", "--model-dir", f["dir"]],
        ["embed", "hello", "--model-file", f["syntax.py"]],
        ["embed", "hello", "--model-dir", str(out / "missing")],
        ["embed", "hello", "--device", "tpu"],
    ]
    # a seeded sample of random junk arguments after each command
    rng = random.Random(0)
    junk = ["--", "-", "--lr", "nan", "%s", "\x00", "é", "--set", "-o", "9" * 40, "../", "--epochs=-1", "--batch-size=0"]
    for cmd in ("export", "inspect", "train", "generate", "view"):  # (embed takes any words as sentences)
        for _ in range(3):
            calls.append([cmd, *rng.sample(junk, 3)])
    return calls


def _invalid_invocations(f: dict[str, str], out: Path) -> list[list[str]]:
    return _export_and_inspect_calls(f, out) + _train_calls(f, out) + _generate_embed_and_junk_calls(f, out)


def _check_one_line_error(r: dict) -> str | None:
    """Why ``r`` is not a clean failure, or None."""
    err_lines = [ln for ln in r["stderr"].splitlines() if ln.strip()]
    if r["crash"]:
        return f"crashed:\n{r['crash']}"
    if r["code"] == 0:
        return "exited 0"
    if "Traceback" in r["stderr"] or "Traceback" in r["stdout"]:
        return f"printed a traceback:\n{r['stderr']}"
    if not err_lines or not err_lines[-1].startswith("Error: ") or sum(ln.startswith("Error:") for ln in err_lines) != 1:
        return f"stderr does not end in one 'Error:' line:\n{r['stderr']}"
    if len(err_lines[-1]) < len("Error: ") + 12:
        return f"the error says too little: {err_lines[-1]!r}"
    return None


def test_invalid_invocations_end_in_one_error_line_and_a_nonzero_exit(tmp_path):
    files = _write_files(tmp_path)
    calls = _invalid_invocations(files, tmp_path)
    results = meganeura_batch(calls)
    bad = [(r["args"], why) for r in results if (why := _check_one_line_error(r))]
    assert not bad, f"{len(bad)} of {len(calls)} invocations failed badly:\n" + "\n".join(f"{a}: {w}" for a, w in bad[:10])
    assert len(results) >= 150
    # nothing was trained or written: every invalid argument was caught before training
    assert not any("epoch" in r["stdout"] or "samples_s" in r["stderr"] for r in results if "train" in r["args"][:1])
    assert not (tmp_path / "o.onnx").exists()
    print(f"CLI fuzz: {len(results)} invalid invocations, all one-line errors, 0 crashes")


def test_errors_name_the_option_and_the_value(tmp_path):
    files = _write_files(tmp_path)
    r = meganeura_batch(
        [
            ["train", files["tiny"], "--lr", "nan"],
            ["train", files["tiny"], "--batch-size", "0"],
            ["train", files["tiny"], "--set", "batch=abc"],
            ["export", files["syntax.py"], "-o", str(tmp_path / "x.onnx")],
            ["inspect", files["garbage.onnx"]],
            ["train", files["tiny"], "--checkpoint", files["plain"] + "/c.safetensors"],
        ]
    )
    lr, batch, sets, syntax, garbage, path = (x["stderr"].strip().splitlines()[-1] for x in r)
    assert "--lr" in lr and "nan" in lr
    assert "--batch-size" in batch and "0" in batch
    assert "batch" in sets and "'abc'" in sets
    assert "syntax.py" in syntax and "line 1" in syntax
    assert "garbage.onnx" in garbage and "ONNX" in garbage
    assert "--checkpoint" in path and "plain.txt exists and is not a folder" in path


def test_debug_flag_and_environment_variable_show_the_traceback(tmp_path):
    bad = tmp_path / "syntax.py"
    bad.write_text(BROKEN_MODELS["syntax.py"])
    plain = meganeura("export", str(bad), "-o", str(tmp_path / "x.onnx"), check=False)
    assert plain.returncode != 0 and "Traceback" not in plain.stderr
    flagged = meganeura("--debug", "export", str(bad), "-o", str(tmp_path / "x.onnx"), check=False)
    assert flagged.returncode != 0 and "Traceback" in flagged.stderr and flagged.stderr.strip().splitlines()[-1].startswith("Error: ")
    env = meganeura_batch([["export", str(bad), "-o", str(tmp_path / "x.onnx")]], env={"MEGANEURA_DEBUG": "1"})[0]
    assert env["code"] != 0 and "Traceback" in env["stderr"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: file permissions cannot make a path unwritable")
def test_a_read_only_output_folder_is_refused_before_training(tmp_path):
    files = _write_files(tmp_path)
    ro = tmp_path / "read_only"
    ro.mkdir(mode=0o500)
    r = meganeura_batch([["train", files["tiny"], "--checkpoint", str(ro / "c.safetensors")]])[0]
    assert r["code"] != 0 and "permission denied" in r["stderr"] and "samples_s" not in r["stderr"]


def test_help_says_that_a_model_file_is_python_code_that_runs():
    for args in ([], ["train"], ["export"]):
        text = " ".join(meganeura(*args, "--help").stdout.split())
        assert "Python code" in text and "trust" in text, args
