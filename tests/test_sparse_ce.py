"""Index-label cross entropy against PyTorch's ``F.cross_entropy`` (an independent reference) and the
contract's edge cases: ignored rows, every row ignored (loss 0, gradient 0), bad labels and arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from meganeura_onnx import Graph
from meganeura_onnx.runtime.training import build_session


def _graph(rows: int, classes: int, ignore_index: int | None) -> Graph:
    g = Graph()
    logits = g.parameter("logits", [rows, classes])
    labels = g.input_u32("labels", [rows])
    g.set_outputs([g.sparse_cross_entropy_loss(logits, labels, ignore_index=ignore_index)])
    return g


def _ours(logits: np.ndarray, labels: np.ndarray, ignore_index: int | None) -> tuple[float, np.ndarray]:
    s = build_session(_graph(*logits.shape, ignore_index), parameters={"logits": logits})
    s.set_input_u32("labels", labels)
    s.step()
    return s.read_loss(), s.read_grad("logits")


@pytest.mark.parametrize("ignore_index", [None, 3])
def test_sparse_cross_entropy_loss_and_gradient_match_torch_cross_entropy(ignore_index):
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(37, 11)).astype(np.float32)
    labels = rng.integers(0, 11, 37).astype(np.uint32)
    loss, grad = _ours(logits, labels, ignore_index)

    t = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    kw = {} if ignore_index is None else {"ignore_index": ignore_index}
    want = torch.nn.functional.cross_entropy(t, torch.tensor(labels.astype(np.int64)), **kw)
    want.backward()
    assert (labels == 3).any(), "the case must contain ignored rows"
    np.testing.assert_allclose(loss, want.item(), rtol=1e-5)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_sparse_cross_entropy_with_every_row_ignored_is_zero_with_zero_gradient():
    logits = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)
    loss, grad = _ours(logits, np.full(4, 7, np.uint32), ignore_index=7)
    assert loss == 0.0
    assert not grad.any()


def test_sparse_cross_entropy_equals_one_hot_cross_entropy_loss():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(6, 9)).astype(np.float32)
    labels = rng.integers(0, 9, 6).astype(np.uint32)
    g = Graph()
    lg = g.parameter("logits", [6, 9])
    g.set_outputs([g.cross_entropy_loss(lg, g.input("onehot", [6, 9]))])
    s = build_session(g, parameters={"logits": logits})
    s.set_input("onehot", np.eye(9, dtype=np.float32)[labels])
    s.step()
    loss, grad = _ours(logits, labels, None)
    np.testing.assert_allclose(loss, s.read_loss(), rtol=1e-6)
    np.testing.assert_allclose(grad, s.read_grad("logits"), rtol=1e-5, atol=1e-7)


def test_sparse_cross_entropy_rejects_mismatched_shapes_dtypes_and_ignore_index():
    g = Graph()
    logits = g.parameter("logits", [4, 5])
    with pytest.raises(ValueError, match=r"sparse_cross_entropy_loss: labels \[3\] must have one class index per row of logits \[4, 5\]"):
        g.sparse_cross_entropy_loss(logits, g.input_u32("short", [3]))
    with pytest.raises(TypeError, match="sparse_cross_entropy_loss: labels must be U32"):
        g.sparse_cross_entropy_loss(logits, g.input("float_labels", [4]))
    with pytest.raises(ValueError, match=r"ignore_index must be an int in \[0, 4294967295\] or None, got -100"):
        g.sparse_cross_entropy_loss(logits, g.input_u32("labels", [4]), ignore_index=-100)
