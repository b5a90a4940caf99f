"""Gradient accumulation (``set_grad_accumulation(K)``) against PyTorch's usual recipe: K
micro-batches of ``(loss / K).backward()``, then one optimizer step, from the same weights."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from meganeura_onnx.init import default_parameters
from meganeura_onnx.runtime.training import build_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import mnist_mlp  # noqa: E402

K, UPDATES, BATCH = 3, 4, 8


@pytest.mark.parametrize("optimizer,fused", [("adamw", True), ("adamw", False), ("sgd", False)])
def test_grad_accumulation_matches_pytorch_accumulating_micro_batches(optimizer, fused):
    g = mnist_mlp.build(batch=BATCH)
    params = default_parameters(g, 0)
    rng = np.random.default_rng(3)
    batches = [
        (rng.normal(size=(BATCH, 784)).astype(np.float32), np.eye(10, dtype=np.float32)[rng.integers(0, 10, BATCH)])
        for _ in range(K * UPDATES)
    ]
    s = build_session(g, optimizer=optimizer, parameters=params, fused_optimizer=fused)
    s.set_grad_accumulation(K)
    w = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params.items()}
    if optimizer == "adamw":
        s.set_adamw(3e-3, weight_decay=0.1)
        opt = torch.optim.AdamW(w.values(), lr=3e-3, weight_decay=0.1)
    else:
        s.set_learning_rate(0.1)
        opt = torch.optim.SGD(w.values(), lr=0.1)

    for i, (x, y) in enumerate(batches):
        before = s.read_param("fc1.weight")
        s.set_input("x", x)
        s.set_input("labels", y)
        s.step()
        h = torch.relu(torch.tensor(x) @ w["fc1.weight"] + w["fc1.bias"])
        logits = h @ w["fc2.weight"] + w["fc2.bias"]
        loss = -(torch.tensor(y) * torch.log_softmax(logits, -1)).sum() / BATCH
        assert s.read_loss() == pytest.approx(loss.item(), rel=1e-4)
        (loss / K).backward()
        if (i + 1) % K:
            np.testing.assert_array_equal(s.read_param("fc1.weight"), before)  # no update inside the window
        else:
            opt.step()
            opt.zero_grad()
    assert s.optimizer_step == UPDATES
    for name, p in w.items():
        np.testing.assert_allclose(s.read_param(name), p.detach().numpy(), rtol=1e-3, atol=1e-5, err_msg=name)


def test_grad_accumulation_rejects_a_non_positive_count():
    s = build_session(mnist_mlp.build(batch=2), optimizer="sgd")
    with pytest.raises(ValueError, match="set_grad_accumulation: steps must be a positive int, got 0"):
        s.set_grad_accumulation(0)
