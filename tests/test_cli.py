"""The installed ``meganeura`` command: export, inspect, view."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.request

import numpy as np
import onnx
import pytest
import tomllib
from cli_launch import MEGANEURA, ROOT, meganeura
from conftest import run_model

import meganeura_onnx

MLP = str(ROOT / "models" / "mnist_mlp.py")


def test_export_writes_the_model_file_built_with_set_arguments(tmp_path):
    out = tmp_path / "mlp.onnx"
    r = meganeura("export", MLP, "-o", str(out), "--set", "batch=4", "--set", "hidden=16")
    assert "wrote" in r.stdout
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert shapes == {"x": [4, 784], "labels": [4, 10]}
    labels = np.eye(10, dtype=np.float32)[[1, 2, 3, 4]]
    loss = run_model(model, {"x": np.zeros((4, 784), np.float32), "labels": labels})[0]
    assert loss.shape == (1,) and np.isfinite(loss).all()


def test_export_reports_a_missing_build_function_and_bad_set_values(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    r = meganeura("export", str(bad), "-o", str(tmp_path / "o.onnx"), check=False)
    assert r.returncode != 0 and "build()" in r.stderr
    r = meganeura("export", MLP, "-o", str(tmp_path / "o.onnx"), "--set", "nosuch=1", check=False)
    assert r.returncode != 0 and "nosuch" in r.stderr


def test_inspect_lists_io_parameters_ops_and_custom_op_status(tmp_path):
    out = tmp_path / "mlp.onnx"
    meganeura("export", MLP, "-o", str(out), "--set", "batch=2")
    r = meganeura("inspect", str(out), "--json")
    d = json.loads(r.stdout)
    assert d["parameters"] == {"count": 784 * 128 + 128 + 128 * 10 + 10, "tensors": 4, "bytes": 4 * (784 * 128 + 128 + 128 * 10 + 10)}
    assert [i["name"] for i in d["inputs"]] == ["x", "labels"]
    assert d["op_histogram"]["MatMul"] == 2
    human = meganeura("inspect", str(out)).stdout
    assert "parameters: 101,770" in human


def test_inspect_says_whether_custom_ops_run_as_kernels_or_function_bodies(tmp_path):
    model_py = tmp_path / "rope_model.py"
    model_py.write_text(
        "from meganeura_onnx import Graph\n"
        "def build(seq=4):\n"
        "    g = Graph()\n"
        "    g.set_outputs([g.rope(g.input('x', [seq, 8]), 10000.0, 4)])\n"
        "    return g\n"
    )
    out = tmp_path / "rope.onnx"
    meganeura("export", str(model_py), "-o", str(out))
    d = json.loads(meganeura("inspect", str(out), "--json").stdout)
    assert d["functions"] == ["com.meganeura.Rope"]
    assert set(d["custom_ops"]) == {"Rope"}
    from meganeura_onnx import custom_op_library

    assert d["custom_ops"]["Rope"].startswith("kernel" if custom_op_library() else "function body")
    assert d["custom_op_libraries"] == {"cpu": custom_op_library("cpu"), "cuda": custom_op_library("cuda")}


@pytest.mark.parametrize("sigint_ignored_by_parent", [False, True], ids=["interactive", "background-job"])
def test_view_without_browser_serves_netron_until_interrupted(tmp_path, sigint_ignored_by_parent):
    """Ctrl-C stops the server, also when started as a background job (which inherits SIGINT ignored)."""
    out = tmp_path / "mlp.onnx"
    meganeura("export", MLP, "-o", str(out), "--set", "batch=2")
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored_by_parent else None
    proc = subprocess.Popen(
        [str(MEGANEURA), "view", str(out), "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r"http://[\w.\-]+:\d+", line)
        assert match, f"no URL in {line!r}"
        with urllib.request.urlopen(match.group(0), timeout=30) as resp:
            assert resp.status == 200
            assert b"netron" in resp.read().lower()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("meganeura view did not stop on Ctrl-C")


def test_version_is_the_one_of_pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert meganeura_onnx.__version__ == version
    assert meganeura("--version").stdout.strip() == f"meganeura, version {version}"


def test_builtin_models_are_taken_by_name_from_any_folder(tmp_path):
    meganeura("export", "mnist_mlp", "-o", "mlp.onnx", "--set", "batch=2", cwd=tmp_path)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in onnx.load(tmp_path / "mlp.onnx").graph.input}
    assert shapes == {"x": [2, 784], "labels": [2, 10]}
    meganeura("export", "llama", "-o", "decode.onnx", "--set", "mode='decode'", "--set", "max_seq=32", cwd=tmp_path)
    custom = {n.op_type for n in onnx.load(tmp_path / "decode.onnx").graph.node if n.domain == "com.meganeura"}
    assert custom == {"Rope", "CacheWrite", "CachedAttention", "SwiGLU"}
    out = json.loads(
        meganeura("generate", "llama", "--preset", "tiny", "--prompt-ids", "1,2,3", "--max-new-tokens", "4", "--json", cwd=tmp_path).stdout
    )
    assert out["prompt_ids"] == [1, 2, 3] and len(out["generated_ids"]) == 4 and all(0 <= t < 256 for t in out["generated_ids"])
    stages = json.loads(meganeura("inspect", "--optimize", "mnist_mlp", "--json", cwd=tmp_path).stdout)["stages"]
    assert [s["stage"] for s in stages] == ["forward", "train step"]


def test_an_unknown_model_is_refused_with_the_list_of_builtin_models(tmp_path):
    r = meganeura("export", "no_such_model", "-o", "x.onnx", cwd=tmp_path, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no_such_model" in r.stderr and "bert, llama, mnist_mlp, tiny_llama" in r.stderr


@pytest.mark.parametrize(
    ("module", "extra", "args"),
    [
        ("netron", "view", ("view", "mlp.onnx", "--no-browser")),
        ("sklearn", "data", ("train", "mnist_mlp", "--epochs", "1")),
        ("tokenizers", "hf", ("embed", "a sentence")),
    ],
)
def test_a_command_whose_extra_is_missing_names_the_extra_in_one_line(tmp_path, module, extra, args):
    hidden = tmp_path / "hidden" / module  # imported before site-packages: behaves as if not installed
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(f"raise ModuleNotFoundError({f'No module named {module!r}'!r}, name={module!r})\n")
    meganeura("export", "mnist_mlp", "-o", "mlp.onnx", "--set", "batch=2", cwd=tmp_path)
    r = meganeura(*args, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "hidden")}, check=False)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"Error: this command needs the {module!r} module: pip install 'meganeura-onnx[{extra}]'"]
