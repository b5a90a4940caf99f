"""Training artifacts for the MNIST MLP and a LLaMA-style block: generated, loadable with
onnxruntime.training.api, and computing the right loss and optimizer updates."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime.training", reason="needs the onnxruntime-training venv (make ort-training)")

from onnxruntime.training.api import CheckpointState, Module, Optimizer  # noqa: E402

from meganeura_onnx.init import default_parameters  # noqa: E402
from meganeura_onnx.reference import evaluate  # noqa: E402
from meganeura_onnx.training_artifacts import ARTIFACT_FILES, AdamWConfig, generate_training_artifacts  # noqa: E402

from .conftest import LLAMA_BLOCK, MNIST_MLP  # noqa: E402
from .drive import build_model  # noqa: E402


def mlp_feeds(rng: np.random.Generator, batch: int = 32) -> dict[str, np.ndarray]:
    return {"x": rng.random((batch, 784), dtype=np.float32), "labels": np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]}


def llama_feeds(rng: np.random.Generator, seq: int = 8, vocab: int = 32) -> dict[str, np.ndarray]:
    return {"tokens": rng.integers(0, vocab, seq).astype(np.uint32), "labels": np.eye(vocab, dtype=np.float32)[rng.integers(0, vocab, seq)]}


MODELS = {
    "mnist_mlp": (MNIST_MLP, mlp_feeds, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]),
    "llama_block": (LLAMA_BLOCK, llama_feeds, None),
}


def load(arts):
    state = CheckpointState.load_checkpoint(str(arts.checkpoint))
    module = Module(str(arts.training_model), state, str(arts.eval_model))
    return state, module, Optimizer(str(arts.optimizer_model), module)


@pytest.mark.parametrize("model", MODELS)
def test_artifacts_are_generated_and_load_with_the_training_api(model, tmp_path):
    path, feeds_of, expected_params = MODELS[model]
    graph = build_model(str(path), {})
    arts = generate_training_artifacts(graph, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(ARTIFACT_FILES)
    if expected_params:
        assert arts.parameters == expected_params
    training = onnx.load(str(arts.training_model))
    assert not any(n.domain == "com.meganeura" for n in training.graph.node), "custom ops must be inlined before differentiation"
    assert training.ir_version <= 10  # what ORT 1.19 accepts

    state, module, optimizer = load(arts)
    init = default_parameters(graph, 0)
    assert sorted(name for name, _ in state.parameters) == sorted(init)
    for name, value in init.items():
        np.testing.assert_array_equal(state.parameters[name].data, value)
    assert module.input_names() == arts.inputs
    # The graph's own outputs (loss first); no second loss appended.
    assert module.output_names() == graph.output_names()

    feeds = feeds_of(np.random.default_rng(1))
    module.train()
    outputs = module(*(feeds[n] for n in arts.inputs))
    loss = np.ravel(outputs[0] if isinstance(outputs, (list, tuple)) else outputs)[0]
    want = evaluate(graph, {**feeds, **init}, dtype=np.float64)[0]
    np.testing.assert_allclose(loss, float(np.ravel(want)[0]), rtol=1e-5)
    # every parameter gets a gradient, and an optimizer step moves it
    assert all(np.abs(state.parameters[n].grad).sum() > 0 for n in init)
    optimizer.set_learning_rate(1e-2)
    optimizer.step()
    assert all(not np.array_equal(state.parameters[n].data, init[n]) for n in init)


def adamw_reference(p, g, m, v, t, lr, c: AdamWConfig):
    """torch.optim.AdamW's update in float64 (what the native engine implements)."""
    p = p * (1 - lr * c.weight_decay)
    m = c.beta1 * m + (1 - c.beta1) * g
    v = c.beta2 * v + (1 - c.beta2) * g * g
    denom = np.sqrt(v) / np.sqrt(1 - c.beta2**t) + c.eps
    return p - lr / (1 - c.beta1**t) * m / denom, m, v


def test_adamw_artifacts_follow_pytorchs_adamw_with_the_requested_hyper_parameters(tmp_path):
    graph = build_model(str(LLAMA_BLOCK), {})
    config = AdamWConfig(beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.05)
    arts = generate_training_artifacts(graph, tmp_path, adamw=config)
    state, module, optimizer = load(arts)
    module.train()
    lr = 3e-3
    optimizer.set_learning_rate(lr)
    params = {n: state.parameters[n].data.astype(np.float64) for n in arts.parameters}
    m = {n: np.zeros_like(p) for n, p in params.items()}
    v = {n: np.zeros_like(p) for n, p in params.items()}
    rng = np.random.default_rng(0)
    for t in range(1, 4):
        feeds = llama_feeds(rng)
        module(*(feeds[n] for n in arts.inputs))
        grads = {n: state.parameters[n].grad.astype(np.float64) for n in arts.parameters}
        optimizer.step()
        module.lazy_reset_grad()
        for n in arts.parameters:
            params[n], m[n], v[n] = adamw_reference(params[n], grads[n], m[n], v[n], t, lr, config)
            np.testing.assert_allclose(state.parameters[n].data, params[n], rtol=1e-5, atol=1e-6, err_msg=f"{n} at step {t}")
        params = {n: state.parameters[n].data.astype(np.float64) for n in arts.parameters}  # follow ORT's float32 values


def test_sgd_artifacts_take_plain_gradient_steps(tmp_path):
    graph = build_model(str(MNIST_MLP), {})
    arts = generate_training_artifacts(graph, tmp_path, optimizer="sgd")
    state, module, optimizer = load(arts)
    module.train()
    optimizer.set_learning_rate(0.1)
    before = {n: state.parameters[n].data.copy() for n in arts.parameters}
    feeds = mlp_feeds(np.random.default_rng(2))
    module(*(feeds[n] for n in arts.inputs))
    grads = {n: state.parameters[n].grad.copy() for n in arts.parameters}
    optimizer.step()
    for n in arts.parameters:
        np.testing.assert_allclose(state.parameters[n].data, before[n] - 0.1 * grads[n], rtol=1e-6, atol=1e-7)


def test_cli_writes_training_artifacts(tmp_path):
    from click.testing import CliRunner
    from meganeura_onnx.cli.main import main

    result = CliRunner().invoke(main, ["export", str(MNIST_MLP), "--training-artifacts", str(tmp_path / "arts"), "--optimizer", "sgd"])
    assert result.exit_code == 0, result.output
    assert "4 trainable parameters" in result.output
    assert sorted(p.name for p in (tmp_path / "arts").iterdir()) == sorted(ARTIFACT_FILES)
    result = CliRunner().invoke(main, ["export", str(MNIST_MLP), "--set", "loss=False", "--training-artifacts", str(tmp_path / "bad")])
    assert result.exit_code != 0 and "output 0 must be the scalar loss" in result.output
