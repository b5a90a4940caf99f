"""The installed ``meganeura`` command: export, inspect, view."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import run_model

ROOT = Path(__file__).resolve().parent.parent
MLP = str(ROOT / "models" / "mnist_mlp.py")


def meganeura(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = shutil.which("meganeura") or str(Path(sys.executable).parent / "meganeura")
    return subprocess.run([exe, *args], capture_output=True, text=True, check=check, timeout=120)


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


def test_view_without_browser_serves_netron_until_interrupted(tmp_path):
    out = tmp_path / "mlp.onnx"
    meganeura("export", MLP, "-o", str(out), "--set", "batch=2")
    exe = shutil.which("meganeura") or str(Path(sys.executable).parent / "meganeura")
    proc = subprocess.Popen([exe, "view", str(out), "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
