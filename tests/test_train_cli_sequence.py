"""``meganeura train`` on a sequence model: ``models/tiny_llama.py`` learns next characters of a text
shipped with scikit-learn, fed as token windows with index labels; schedule, accumulation and
evaluation options; clear refusals for what the engine cannot do."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

from cli_launch import MEGANEURA
from click.testing import CliRunner
from meganeura_onnx.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
LLAMA = str(ROOT / "models" / "tiny_llama.py")


def test_tiny_llama_trains_on_token_windows_through_the_cli_and_its_test_loss_falls():
    r = subprocess.run(
        [
            str(MEGANEURA),
            "train",
            LLAMA,
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--lr",
            "3e-3",
            "--lr-schedule",
            "cosine",
            "--warmup",
            "10",
            "--grad-accum",
            "2",
            "--eval-every",
            "50",
            "--optimizer",
            "adamw",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    evals = [float(v) for v in re.findall(r"step \d+: test_loss ([\d.]+)", r.stdout + r.stderr)]
    final = float(re.search(r"epoch 1: train loss [\d.]+, test_loss ([\d.]+)", r.stdout).group(1))
    assert len(evals) == 5  # 4304 windows / 8 per batch / 2 per update = 269 updates -> steps 50..250
    assert final < 0.8 * math.log(32), (evals, final)  # chance is ln(vocab 32) = 3.47
    assert final < evals[0], (evals, final)


def _run(*args: str):
    return CliRunner().invoke(main, ["train", *args], catch_exceptions=False)


def test_train_refuses_tf32_on_the_cpu_naming_the_device():
    r = _run(LLAMA, "--precision", "tf32", "--device", "cpu")
    assert r.exit_code == 2
    assert "tf32 is a CUDA tensor-core mode; it needs --device cuda, got --device cpu" in r.output and "Traceback" not in r.output


def test_train_refuses_a_batch_size_that_build_cannot_take(tmp_path):
    model = tmp_path / "fixed.py"
    model.write_text(
        "import numpy as np\n"
        "from meganeura_onnx import Graph\n"
        "def build():\n"
        "    g = Graph(); x = g.input('x', [4, 3]); w = g.parameter('w', [3, 2])\n"
        "    g.set_outputs([g.mse_loss(g.matmul(x, w), g.input('y', [4, 2]))]); return g\n"
        "def data():\n"
        "    r = np.random.default_rng(0)\n"
        "    return {'x_train': r.normal(size=(40, 3)), 'y_train': r.normal(size=(40, 2)), 'x_test': r.normal(size=(8, 3)), 'y_test': r.normal(size=(8, 2))}\n"
    )
    r = _run(str(model), "--batch-size", "16", "--epochs", "1")
    assert r.exit_code == 2
    assert "build() takes no batch argument, and its graph trains on 4 examples per step" in r.output
    assert "--batch-size 16 cannot be honoured" in r.output
    ok = _run(str(model), "--epochs", "1")  # without --batch-size it trains on the graph's 4 per step
    assert ok.exit_code == 0, ok.output
