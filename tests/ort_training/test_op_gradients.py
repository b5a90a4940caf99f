"""Every differentiable op of the table trains through onnxruntime-training: its artifacts generate
(com.meganeura bodies inlined, ORT's gradient builder accepts every lowering) and ORT's gradient
agrees with a float64 finite difference of the numpy reference. Ops without a gradient are rejected
up front."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime.training", reason="needs the onnxruntime-training venv (make ort-training)")

from meganeura_onnx import Graph  # noqa: E402
from meganeura_onnx.ir import DType  # noqa: E402
from meganeura_onnx.ops import OPS, Feeds  # noqa: E402
from meganeura_onnx.reference import evaluate  # noqa: E402
from meganeura_onnx.runtime.ort_training import build_ort_training_session  # noqa: E402
from meganeura_onnx.training_artifacts import TrainingArtifactsError, check_trainable  # noqa: E402

CASES = [pytest.param(name, k, ex, id=f"{name}-{k}") for name, d in OPS.items() if not d.leaf for k, ex in enumerate(d.examples)]


def loss_graph(example):
    g = Graph()
    feeds = Feeds(np.random.default_rng(0))
    out = example(g, feeds)
    if g.node(out).ty.dtype is not DType.F32:
        pytest.skip("integer output")
    # a weighted sum, so every output element gets a different cotangent
    weights = np.random.default_rng(1).uniform(0.5, 1.5, g.node(out).ty.shape).astype(np.float32)
    g.set_outputs([g.sum_all(g.mul(out, g.constant(weights.ravel().tolist(), list(weights.shape))))])
    return g, feeds


@pytest.mark.parametrize("name,k,example", CASES)
def test_ort_training_gradient_matches_finite_differences(name, k, example):
    g, feeds = loss_graph(example)
    if not OPS[name].differentiable:
        try:
            check_trainable(g)
        except TrainingArtifactsError as e:
            assert "ops without a gradient" in str(e)
            return
        # the example's parameters reach the loss around the op (e.g. ``add(p, zeros(...))``): train it
    sess = build_ort_training_session(g, parameters=feeds.params)
    for n, v in feeds.inputs.items():
        (sess.set_input_u32 if v.dtype == np.uint32 else sess.set_input)(n, v)
    sess.step()
    rng = np.random.default_rng(2)
    for p, value in feeds.params.items():
        direction = rng.standard_normal(value.shape)
        eps = 1e-4

        def f(x, p=p):
            return float(evaluate(g, {**feeds.inputs, **feeds.params, p: x}, dtype=np.float64)[0].ravel()[0])

        numeric = (f(value + eps * direction) - f(value - eps * direction)) / (2 * eps)
        analytic = float(np.sum(sess.read_grad(p).astype(np.float64) * direction))
        assert analytic == pytest.approx(numeric, rel=2e-3, abs=2e-3), f"{name}: d loss / d {p}"
