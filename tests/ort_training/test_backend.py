"""The "ort-training" Session backend: the Session methods over onnxruntime.training.api."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime.training", reason="needs the onnxruntime-training venv (make ort-training)")

from meganeura_onnx.init import default_parameters  # noqa: E402
from meganeura_onnx.runtime.ort_training import build_ort_training_session  # noqa: E402

from .conftest import LLAMA_BLOCK, MNIST_MLP  # noqa: E402
from .drive import build_model  # noqa: E402
from .test_artifacts import llama_feeds, mlp_feeds  # noqa: E402


def feed(sess, feeds):
    for name, value in feeds.items():
        (sess.set_input_u32 if value.dtype == np.uint32 else sess.set_input)(name, value)


@pytest.fixture(scope="module")
def mlp_graph():
    return build_model(str(MNIST_MLP), {})


def test_step_without_an_optimizer_leaves_parameters_and_exposes_gradients(mlp_graph):
    sess = build_ort_training_session(mlp_graph)
    feed(sess, mlp_feeds(np.random.default_rng(0)))
    before = sess.read_param("fc1.weight")
    sess.step()
    assert sess.read_loss() > 0
    np.testing.assert_array_equal(sess.read_param("fc1.weight"), before)
    assert sess.read_grad("fc2.bias").shape == (10,) and np.abs(sess.read_grad("fc2.bias")).sum() > 0
    assert sess.optimizer_step == 0


def test_adam_steps_lower_the_loss_and_count(mlp_graph):
    sess = build_ort_training_session(mlp_graph)
    feed(sess, mlp_feeds(np.random.default_rng(0)))
    sess.set_adam(1e-3, 0.9, 0.999, 1e-8)
    losses = []
    for _ in range(10):
        sess.step()
        losses.append(sess.read_loss())
    assert losses[-1] < losses[0] * 0.8 and all(np.diff(losses) < 0)
    assert sess.optimizer_step == 10
    with pytest.raises(RuntimeError, match="only while no optimizer is set"):
        sess.read_grad("fc1.weight")


def test_changing_adamw_hyper_parameters_keeps_moments_and_step(mlp_graph, tmp_path):
    a = build_ort_training_session(mlp_graph)
    b = build_ort_training_session(mlp_graph)
    feeds = mlp_feeds(np.random.default_rng(0))
    for s in (a, b):
        feed(s, feeds)
        s.set_adamw(1e-3, weight_decay=0.0)
        for _ in range(3):
            s.step()
    b.set_adamw(1e-3, weight_decay=0.0)  # same values: nothing rebuilt
    a.set_adamw(1e-3, epsilon=1e-7, weight_decay=0.0)  # optimizer model regenerated over the same state
    a.step()
    b.step()
    assert a.optimizer_step == 4
    np.testing.assert_allclose(a.read_loss(), b.read_loss(), rtol=1e-6)  # a fresh optimizer would restart Adam at t=1


def test_set_parameter_and_read_param_round_trip(mlp_graph):
    sess = build_ort_training_session(mlp_graph)
    w = np.arange(784 * 128, dtype=np.float32).reshape(784, 128) / 1e5
    sess.set_parameter("fc1.weight", w.ravel())
    np.testing.assert_array_equal(sess.read_param("fc1.weight"), w)
    out = np.empty(784 * 128, np.float32)
    sess.read_param("fc1.weight", out)
    np.testing.assert_array_equal(out, w.ravel())


def test_wrong_names_sizes_and_dtypes_raise_with_expected_and_given(mlp_graph):
    sess = build_ort_training_session(mlp_graph)
    with pytest.raises(KeyError, match=r"no input named 'y'; the session has \['x', 'labels'\]"):
        sess.set_input("y", np.zeros(3))
    with pytest.raises(ValueError, match=r"'x' expects 25088 values \(shape \[32, 784\]\), got 3"):
        sess.set_input("x", np.zeros(3))
    with pytest.raises(TypeError, match="use set_input"):
        sess.set_input_u32("x", np.zeros(32 * 784, np.uint32))
    with pytest.raises(KeyError, match="no parameter named 'fc3.weight'"):
        sess.read_param("fc3.weight")
    with pytest.raises(ValueError, match="device must be 'cpu'"):
        build_ort_training_session(mlp_graph, device="cuda")


def test_sgd_session_rejects_adam():
    sess = build_ort_training_session(build_model(str(MNIST_MLP), {}), optimizer="sgd")
    with pytest.raises(RuntimeError, match="optimizer='sgd'"):
        sess.set_adam(1e-3, 0.9, 0.999, 1e-8)


def test_checkpoint_layout_and_exact_resume(tmp_path):
    graph = build_model(str(LLAMA_BLOCK), {})
    rng = np.random.default_rng(3)
    batches = [llama_feeds(rng) for _ in range(6)]
    full = build_ort_training_session(graph)
    full.set_adamw(1e-2)
    losses = []
    for i, b in enumerate(batches):
        feed(full, b)
        full.step()
        losses.append(full.read_loss())
        if i == 2:
            full.save_checkpoint(tmp_path / "ck.safetensors")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "ck.safetensors"), framework="numpy") as f:
        tensors, meta = list(f.keys()), f.metadata()
    names = list(default_parameters(graph))
    assert sorted(tensors) == sorted(names + [f"adam_m.{n}" for n in names] + [f"adam_v.{n}" for n in names])
    assert meta["step"] == "3" and meta["format"] == "meganeura-checkpoint-2"

    resumed = build_ort_training_session(graph, seed=7)  # other initial weights: the checkpoint must replace them
    resumed.set_adamw(1e-2)
    resumed.load_checkpoint(tmp_path / "ck.safetensors")
    assert resumed.optimizer_step == 3
    for b, want in zip(batches[3:], losses[3:], strict=True):
        feed(resumed, b)
        resumed.step()
        assert resumed.read_loss() == pytest.approx(want, rel=1e-6)


def test_checkpoint_for_another_graph_is_rejected(tmp_path):
    small = build_ort_training_session(build_model(str(MNIST_MLP), {"hidden": 16}))
    small.save_checkpoint(tmp_path / "small.safetensors")
    sess = build_ort_training_session(build_model(str(MNIST_MLP), {}))
    with pytest.raises(ValueError, match=r"fc1.weight: checkpoint has \[784, 16\], the graph has \[784, 128\]"):
        sess.load_checkpoint(tmp_path / "small.safetensors")


def test_step_time_is_measured_in_process_and_through_an_interpreter():
    import sys

    from meganeura_onnx.runtime.ort_training import ort_training_step_time, ort_training_step_time_subprocess, random_feeds

    graph = build_model(str(MNIST_MLP), {"batch": 8})
    assert 0 < ort_training_step_time(graph, random_feeds(graph), steps=3, warmup=1) < 1.0
    record = ort_training_step_time_subprocess(sys.executable, MNIST_MLP, {"batch": 8}, steps=3)
    assert record["backend"] == "ort-training" and record["sets"] == {"batch": 8} and record["step_s"] > 0


def test_build_session_selects_the_ort_training_backend(mlp_graph):
    from meganeura_onnx.runtime.ort_training import OrtTrainingSession
    from meganeura_onnx.runtime.training import build_session

    sess = build_session(mlp_graph, backend="ort-training", optimizer="adam")
    assert isinstance(sess, OrtTrainingSession) and sess.artifacts.optimizer == "adamw"
    with pytest.raises(ValueError, match="backend must be 'native' or 'ort-training', got 'tf'"):
        build_session(mlp_graph, backend="tf")
