"""Autodiff: every differentiable op's VJP rule agrees with finite differences, in float64 through
the numpy references and in float32 through the exported ONNX model run by ONNX Runtime.

Method (per op, per example): loss = sum(out * r) for a fixed random projection r (an input), so
every output element matters. Central differences with step h = 1e-6 on the float64 references:
truncation error ~h^2 and rounding error ~1e-16/h, both far below the tolerances
  float64 rule vs FD: rtol 1e-5, atol 1e-7;
  ORT float32 gradient vs float64 FD: |got - want| <= 2e-4 * max|want| + 1e-5 (float32 keeps ~7
  digits; the reductions in the backward graphs lose about two of them).
At most 16 entries of each operand are perturbed (chosen at random) to keep the test fast.
Kinks (relu, abs, l1, minimum) sit at measure-zero points the random examples do not hit.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.ops import OPS, Feeds
from meganeura_onnx.ops.table import op as declare_op
from meganeura_onnx.reference import evaluate
from meganeura_onnx.transforms import gradients

H = 1e-6
MAX_PROBES = 16


def _build(example, seed: int, with_grads: bool):
    g = Graph()
    f = Feeds(np.random.default_rng(seed))
    out = example(g, f)
    r = np.random.default_rng(seed + 100).normal(size=g.node(out).ty.shape)
    loss = g.sum_all(g.mul(out, g.input("__r", list(r.shape))))
    g.set_outputs([loss])
    floats = {n.attrs["name"]: n.id for n in g.nodes() if n.op in ("parameter", "input") and n.attrs["name"] != "__r"}
    res = gradients(g, loss, list(floats.values())) if with_grads else None
    return g, f, r, loss, floats, res


def _differentiable_cases():
    return [
        pytest.param(name, k, ex, id=f"{name}-{k}")
        for name, d in OPS.items()
        if d.differentiable and not d.leaf
        for k, ex in enumerate(d.examples)
    ]


def _finite_differences(example, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (flat indices probed, central-difference gradient at them), in float64."""
    g, f, r, loss, floats, _ = _build(example, seed, with_grads=False)
    base = {**{k: v.astype(np.float64) for k, v in {**f.inputs, **f.params}.items()}, "__r": r}
    rng = np.random.default_rng(seed + 7)
    out = {}
    for name in floats:
        if name not in f.params and name not in f.inputs:
            continue
        flat = base[name].reshape(-1)
        idx = np.sort(rng.choice(flat.size, size=min(flat.size, MAX_PROBES), replace=False))
        fd = []
        for i in idx:
            vals = []
            for sign in (1.0, -1.0):
                v = flat.copy()
                v[i] += sign * H
                vals.append(evaluate(g, {**base, name: v.reshape(base[name].shape)}, np.float64, nodes=[loss])[0][0])
            fd.append((vals[0] - vals[1]) / (2 * H))
        out[name] = (idx, np.array(fd))
    return out


@pytest.mark.parametrize("name,k,example", _differentiable_cases())
def test_vjp_rule_matches_finite_differences_in_float64_and_through_onnxruntime(name, k, example):
    fd = _finite_differences(example, k)
    g, f, r, _, floats, res = _build(example, k, with_grads=True)
    feeds64 = {**{n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in {**f.inputs, **f.params}.items()}, "__r": r}
    named = {n: res.grads[nid] for n, nid in floats.items() if n in fd}
    for n, gid in named.items():
        assert gid is not None, f"{name}: no gradient reached {n!r}: {res.why_none(floats[n])}"
    got64 = dict(zip(named, evaluate(g, feeds64, np.float64, nodes=list(named.values())), strict=True))
    for n, (idx, want) in fd.items():
        np.testing.assert_allclose(got64[n].reshape(-1)[idx], want, rtol=1e-5, atol=1e-7, err_msg=f"{name} float64 gradient wrt {n}")

    model, _ = to_model(g, params_as_inputs=True, extra_outputs={f"grad.{n}": gid for n, gid in named.items()})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds32 = {**f.inputs, **f.params, "__r": r.astype(np.float32)}
    got32 = dict(zip(named, sess.run([f"grad.{n}" for n in named], feeds32), strict=True))
    for n, (idx, want) in fd.items():
        err = np.abs(got32[n].reshape(-1)[idx] - want)
        assert np.all(err <= 2e-4 * np.abs(want).max() + 1e-5), f"{name} ORT float32 gradient wrt {n}: max error {err.max():.3g}"


def test_autodiff_refuses_a_differentiable_op_without_a_vjp_rule():
    d = declare_op("__test_no_vjp", ("x",))
    d.shape(lambda x: x)
    try:
        g = Graph()
        x = g.parameter("x", [2])
        loss = g.sum_all(g.apply("__test_no_vjp", x))
        with pytest.raises(NotImplementedError, match="__test_no_vjp.*no VJP rule"):
            gradients(g, loss, [x])
    finally:
        del OPS["__test_no_vjp"]


def test_gradients_of_a_node_used_twice_are_summed():
    g = Graph()
    x = g.parameter("x", [3])
    loss = g.sum_all(g.mul(x, x))  # d/dx sum(x^2) = 2x: the two uses of x each contribute x
    res = gradients(g, loss, [x])
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(evaluate(g, {"x": v}, np.float64, nodes=[res.grads[x]])[0], 2 * v)
    assert any(n.op == "add" for n in g.nodes()[loss + 1 :])


def test_gradient_flow_stops_at_non_differentiable_ops_and_says_where():
    g = Graph()
    a = g.parameter("a", [4])
    b = g.parameter("b", [4])
    gate = g.greater(a, b)  # a and b reach the loss only through greater
    loss = g.sum_all(gate)
    res = gradients(g, loss, [a, b])
    assert res.grads == {a: None, b: None}
    assert res.stopped == [(gate, "greater")]
    assert "greater (node" in res.why_none(a)


def test_gradient_through_a_mask_is_exact_where_the_other_path_is_differentiable():
    g = Graph()
    x = g.parameter("x", [4])
    y = g.mul(x, g.heaviside(x))  # relu written by hand: the mask contributes zero, x*1 flows
    res = gradients(g, g.sum_all(y), [x])
    v = np.array([1.0, -2.0, 0.5, -0.1])
    np.testing.assert_allclose(evaluate(g, {"x": v}, np.float64, nodes=[res.grads[x]])[0], (v > 0).astype(float))


def test_u32_indices_and_cache_inputs_get_no_gradient():
    g = Graph()
    idx = g.input_u32("ids", [3])
    table = g.parameter("table", [5, 2])
    cache = g.parameter("cache", [4, 2])
    pos = g.input_u32("pos", [1])
    written = g.cache_write(g.embedding(idx, table), cache, pos)
    res = gradients(g, g.sum_all(written), [idx, table, cache])
    assert res.grads == {idx: None, table: None, cache: None}
    assert [op for _, op in res.stopped] == ["cache_write"]


def test_loss_must_be_a_scalar():
    g = Graph()
    x = g.parameter("x", [3])
    with pytest.raises(ValueError, match=r"loss must be a \[1\] node"):
        gradients(g, g.relu(x), [x])
