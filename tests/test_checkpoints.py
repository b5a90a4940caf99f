"""Checkpoints resume training exactly, survive a crash mid-save, refuse a different graph; the
train-model cache is keyed by everything the model depends on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from meganeura_onnx import Graph
from meganeura_onnx.io import load_checkpoint
from meganeura_onnx.runtime import training
from meganeura_onnx.runtime.training import build_session, build_session_cached

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))
import mnist_mlp  # noqa: E402


def _batches(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(8, 784)).astype(np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]) for _ in range(n)]


def _train(s, batches):
    for x, y in batches:
        s.set_input("x", x)
        s.set_input("labels", y)
        s.step()


def test_ten_steps_saved_and_resumed_in_a_fresh_session_equal_twenty_straight(tmp_path):
    g = mnist_mlp.build(batch=8)
    data = _batches(20)
    straight = build_session(g, optimizer="adam")
    straight.set_adam(1e-3)
    _train(straight, data)

    first = build_session(g, optimizer="adam")
    first.set_adam(1e-3)
    _train(first, data[:10])
    first.save_checkpoint(tmp_path / "ckpt.safetensors")
    ckpt = load_checkpoint(tmp_path / "ckpt.safetensors")
    assert ckpt.step == 10 and set(ckpt.adam_m) == set(ckpt.params) == set(ckpt.adam_v)
    assert all(v.dtype == np.float32 for v in ckpt.params.values())

    resumed = build_session(g, optimizer="adam", seed=123)  # different init: everything comes from the file
    resumed.set_adam(1e-3)
    resumed.load_checkpoint(tmp_path / "ckpt.safetensors")
    assert resumed.optimizer_step == 10
    _train(resumed, data[10:])
    for name in g.parameters():
        diff = np.abs(resumed.read_param(name) - straight.read_param(name)).max()
        assert diff <= 1e-6, f"{name} differs by {diff}"


def test_loading_a_checkpoint_of_a_different_graph_lists_the_mismatches(tmp_path):
    s = build_session(mnist_mlp.build(batch=8, hidden=128), optimizer="sgd")
    s.save_checkpoint(tmp_path / "big.safetensors")
    other = build_session(mnist_mlp.build(batch=8, hidden=64), optimizer="sgd")
    with pytest.raises(ValueError) as e:
        other.load_checkpoint(tmp_path / "big.safetensors")
    msg = str(e.value)
    assert "fc1.weight: checkpoint has [784, 128], the graph has [784, 64]" in msg
    assert "fc1.bias: checkpoint has [128], the graph has [64]" in msg
    assert "fc2.weight: checkpoint has [128, 10], the graph has [64, 10]" in msg


_SAVER = textwrap.dedent(
    """
    import sys, numpy as np
    from pathlib import Path
    from meganeura_onnx.io import Checkpoint, save_checkpoint
    path = Path(sys.argv[1])
    step = 0
    while True:
        step += 1
        big = {f"w{i}": np.full((512, 1024), float(step), np.float32) for i in range(8)}  # 16 MB
        save_checkpoint(path, Checkpoint(big, step=step))
        if step == 1:
            Path(sys.argv[2]).touch()
    """
)


@pytest.mark.parametrize("delay", [0.05, 0.13, 0.31])
def test_a_process_killed_while_saving_leaves_the_previous_checkpoint_loadable(tmp_path, delay):
    path, ready = tmp_path / "ckpt.safetensors", tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", _SAVER, str(path), str(ready)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the saver did not start"
            time.sleep(0.01)
        time.sleep(delay)  # the saver writes back to back, so the kill lands inside a save
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    ckpt = load_checkpoint(path)  # whole and consistent: every tensor from the same save
    assert ckpt.step >= 1 and len(ckpt.params) == 8
    assert all(np.all(v == float(ckpt.step)) for v in ckpt.params.values())


def _mlp_with_eps(eps: float) -> Graph:
    g = Graph()
    x = g.input("x", [4, 6])
    h = g.rms_norm(x, g.parameter("norm.weight", [6]), eps)
    g.set_outputs([g.mse_loss(h, g.input("y", [4, 6]))])
    return g


def test_cached_build_reuses_the_model_and_the_key_covers_attributes(tmp_path, monkeypatch):
    cache = tmp_path / "model.onnx"
    build_session_cached(_mlp_with_eps(1e-5), cache, optimizer="adam")
    assert cache.is_file()

    def no_compile(*a, **k):
        raise AssertionError("compiled although the cache matched")

    monkeypatch.setattr(training, "compile_program", no_compile)
    s = build_session_cached(_mlp_with_eps(1e-5), cache, optimizer="adam")
    s.set_input("x", np.ones((4, 6)))
    s.step()
    with pytest.raises(AssertionError, match="compiled although"):  # eps differs: a new key
        build_session_cached(_mlp_with_eps(1e-3), cache, optimizer="adam")


def test_memory_summary_counts_adam_state():
    s = build_session(mnist_mlp.build(batch=8), optimizer="adam")
    m = s.memory_summary()
    params = (784 * 128 + 128 + 128 * 10 + 10) * 4
    copies = 1 if {"adam_m.fc1.weight", "adam_v.fc1.weight"} <= s.inplace_state else 2  # a swap twin unless updated in place
    assert m.adam_state_bytes == 2 * copies * params  # m and v
    assert "adam state" in str(m) and str(m).startswith(f"{m.num_buffers} buffers")
    assert build_session(mnist_mlp.build(batch=8), optimizer="sgd").memory_summary().adam_state_bytes == 0
