"""Sessions refuse bad parameters and hyper-parameters, fill any ``out=`` array, and a step that
fails changes nothing (parameters, Adam state, step count); ``check_finite`` names the culprit;
switching SGD -> Adam restarts Adam's bias correction."""

from __future__ import annotations

import numpy as np
import pytest

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.runtime.training import build_session


def mlp(batch: int = 4) -> Graph:
    g = Graph()
    x = g.input("x", [batch, 6])
    h = g.relu(g.bias_add(g.matmul(x, g.parameter("w1", [6, 5])), g.parameter("b1", [5])))
    g.set_outputs([g.mse_loss(g.matmul(h, g.parameter("w2", [5, 3])), g.input("y", [batch, 3]))])
    return g


def embedding_model() -> Graph:
    """A loss over an embedding lookup: an out-of-range id makes ORT's Gather fail at run time."""
    g = Graph()
    e = g.embedding(g.input_u32("ids", [4]), g.parameter("emb", [10, 3]))
    h = g.matmul(e, g.parameter("w", [3, 2]))
    g.set_outputs([g.mse_loss(h, g.input("y", [4, 2]))])
    return g


RNG = np.random.default_rng(0)
X, Y = RNG.normal(size=(4, 6)).astype(np.float32), RNG.normal(size=(4, 3)).astype(np.float32)


def _state(s) -> dict[str, np.ndarray]:
    """Every parameter and optimizer tensor of a training session, copied."""
    return {n: np.array(s._values[n].numpy(), copy=True) for n in s._types if s._kinds[n] in ("parameter", "optimizer")}


# ---- parameters= -----------------------------------------------------------------------------


@pytest.mark.parametrize("builder", ["inference", "training"])
@pytest.mark.parametrize(
    "value,error,words",
    [
        (np.zeros((5, 6), np.float32), ValueError, ["'w1'", "[6, 5]", "[5, 6]"]),  # transposed
        (np.zeros(29, np.float32), ValueError, ["'w1'", "30", "29"]),
        (np.full((6, 5), "a"), TypeError, ["'w1'", "numbers"]),
        (np.ones((6, 5), bool), TypeError, ["'w1'", "bool"]),
        (np.full((6, 5), np.nan, np.float32), ValueError, ["'w1'", "non-finite", "nan"]),
        (np.full((6, 5), np.inf), ValueError, ["'w1'", "non-finite", "inf"]),
    ],
)
def test_parameters_argument_is_checked_like_set_parameter(builder, value, error, words):
    build = build_inference_session if builder == "inference" else (lambda g, **kw: build_session(g, optimizer="sgd", **kw))
    with pytest.raises(error) as info:
        build(mlp(), parameters={"w1": value})
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"
    s = build(mlp())  # and set_parameter says the same
    with pytest.raises(error):
        s.set_parameter("w1", value)
    with pytest.raises(ValueError, match="not in the graph"):
        build(mlp(), parameters={"w9": np.zeros((6, 5))})


def test_parameters_argument_accepts_flat_or_exact_shape_and_float64():
    w1 = RNG.normal(size=(6, 5))
    for given in (w1, w1.reshape(-1), w1.astype(np.float32)):
        s = build_inference_session(mlp(), parameters={"w1": given})
        np.testing.assert_array_equal(s.read_param("w1"), w1.astype(np.float32))


# ---- out= ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_out",
    [
        lambda shape: np.empty(shape, np.float32, order="F"),
        lambda shape: np.empty((shape[0], shape[1] * 2), np.float32)[:, ::2],  # strided view
        lambda shape: np.empty(shape[::-1], np.float32).T,  # transposed view
        lambda shape: np.empty(shape, np.float64),
        lambda shape: np.empty(int(np.prod(shape)), np.float32)[::-1],  # flat, negative stride
    ],
)
def test_read_param_fills_out_whatever_its_memory_layout(make_out):
    w1 = RNG.normal(size=(6, 5)).astype(np.float32)
    s = build_inference_session(mlp(), parameters={"w1": w1})
    out = make_out((6, 5))
    assert s.read_param("w1", out) is out
    np.testing.assert_array_equal(out.reshape(6, 5) if out.ndim == 1 else out, w1)


@pytest.mark.parametrize(
    "out,error,word",
    [
        (np.empty((5, 6), np.float32), ValueError, "[5, 6]"),
        (np.empty(29, np.float32), ValueError, "[29]"),
        (np.empty((6, 5), np.int32), TypeError, "int32"),
        ([0.0] * 30, TypeError, "list"),
    ],
)
def test_read_param_refuses_an_out_of_the_wrong_shape_type_or_dtype(out, error, word):
    s = build_inference_session(mlp())
    with pytest.raises(error, match=word.replace("[", r"\[").replace("]", r"\]")):
        s.read_param("w1", out)


def test_read_param_refuses_a_read_only_out():
    out = np.zeros((6, 5), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        build_inference_session(mlp()).read_param("w1", out)


# ---- a failing step changes nothing ---------------------------------------------------------------


def _feed_embedding(s, ids) -> None:
    s.set_input_u32("ids", ids)
    s.set_input("y", np.ones((4, 2), np.float32))


def test_a_step_that_fails_in_onnx_runtime_changes_no_parameter_moment_or_step_count():
    s = build_session(embedding_model(), optimizer="adam")
    ref = build_session(embedding_model(), optimizer="adam")
    for sess in (s, ref):
        sess.set_adam(0.01)
        _feed_embedding(sess, [1, 2, 3, 4])
        sess.step()
    before, step = _state(s), s.optimizer_step
    with pytest.raises(ValueError, match="'ids' = 99"):  # refused on upload (token ids index the table)
        _feed_embedding(s, [1, 2, 3, 99])
    # past the upload check on purpose: row 99 of a 10-row table makes Gather fail at run time
    s._values["ids"].update_inplace(np.array([1, 2, 3, 99], np.uint32))
    for _ in range(2):
        with pytest.raises(Exception, match="(?i)indices|out of|bounds"):
            s.step()
    assert s.optimizer_step == step == 1
    after = _state(s)
    assert all(np.array_equal(before[n], after[n]) for n in before)
    # The next good step equals a session that never failed, bit for bit (Adam's t included).
    for sess in (s, ref):
        _feed_embedding(sess, [5, 6, 7, 8])
        sess.step()
    assert s.optimizer_step == ref.optimizer_step == 2
    good, want = _state(s), _state(ref)
    assert all(np.array_equal(good[n], want[n]) for n in want)


# ---- hyper-parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda s: s.set_learning_rate(float("nan")), ValueError, ["lr", "nan"]),
        (lambda s: s.set_learning_rate(float("inf")), ValueError, ["lr", "inf"]),
        (lambda s: s.set_learning_rate(-0.1), ValueError, ["lr >= 0", "-0.1"]),
        (lambda s: s.set_learning_rate(True), TypeError, ["lr", "bool"]),
        (lambda s: s.set_learning_rate("0.1"), TypeError, ["lr", "str"]),
        (lambda s: s.set_adam(1e-3, beta1=1.0), ValueError, ["beta1", "1.0"]),
        (lambda s: s.set_adam(1e-3, beta1=-0.1), ValueError, ["beta1", "-0.1"]),
        (lambda s: s.set_adam(1e-3, beta2=1.5), ValueError, ["beta2", "1.5"]),
        (lambda s: s.set_adam(1e-3, epsilon=0.0), ValueError, ["epsilon > 0", "0.0"]),
        (lambda s: s.set_adam(1e-3, epsilon=-1e-8), ValueError, ["epsilon", "-1e-08"]),
        (lambda s: s.set_adam(float("nan")), ValueError, ["lr", "nan"]),
        (lambda s: s.set_adamw(1e-3, weight_decay=-0.01), ValueError, ["weight_decay", "-0.01"]),
        (lambda s: s.set_adamw(1e-3, weight_decay=float("nan")), ValueError, ["weight_decay", "nan"]),
        (lambda s: s.set_grad_clip(0.0), ValueError, ["max_norm > 0", "0.0"]),
        (lambda s: s.set_grad_clip(-1.0), ValueError, ["max_norm", "-1.0"]),
        (lambda s: s.set_grad_clip(float("inf")), ValueError, ["max_norm", "inf"]),
    ],
)
def test_invalid_hyper_parameters_are_refused_and_change_nothing(call, error, words):
    s = build_session(mlp(), optimizer="sgd")
    s.set_learning_rate(0.1)
    with pytest.raises(error) as info:
        call(s)
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"
    # the session still runs plain SGD at lr 0.1 without clipping: compare with a fresh one
    ref = build_session(mlp(), optimizer="sgd")
    ref.set_learning_rate(0.1)
    for sess in (s, ref):
        sess.set_input("x", X)
        sess.set_input("y", Y)
        sess.step()
    assert all(np.array_equal(s.read_param(n), ref.read_param(n)) for n in s.parameter_names())


# ---- switching optimizer -----------------------------------------------------------------------------


def test_switching_from_sgd_to_adam_starts_bias_correction_at_step_one():
    lr, eps = 1e-2, 1e-8
    s = build_session(mlp(), optimizer="sgd")
    s.set_learning_rate(0.05)
    s.set_input("x", X)
    s.set_input("y", Y)
    for _ in range(2):
        s.step()
    params = {n: s.read_param(n) for n in s.parameter_names()}
    grads_session = build_session(mlp(), parameters=params)  # gradients only
    grads_session.set_input("x", X)
    grads_session.set_input("y", Y)
    grads_session.step()
    s.set_adam(lr, epsilon=eps)
    s.step()
    assert s.optimizer_step == 1
    for n, p in params.items():
        g = grads_session.read_grad(n).astype(np.float64)
        # Adam at t = 1: m_hat = g, v_hat = g^2, so the update is lr * g / (|g| + eps).
        want = p - lr * g / (np.abs(g) + eps)
        np.testing.assert_allclose(s.read_param(n), want, rtol=1e-5, atol=1e-7, err_msg=n)


# ---- check_finite ---------------------------------------------------------------------------------------


def test_check_finite_names_a_non_finite_input_and_changes_nothing():
    s = build_session(mlp(), optimizer="adam", check_finite=True)
    s.set_input("x", X)
    s.set_input("y", Y)
    s.step()
    before = _state(s)
    bad = X.copy()
    bad[2, 3] = np.nan
    s.set_input("x", bad)
    with pytest.raises(FloatingPointError, match=r"input 'x' is not finite: nan at flat index 15"):
        s.step()
    assert s.optimizer_step == 1 and all(np.array_equal(v, _state(s)[n]) for n, v in before.items())


def test_check_finite_names_an_overflowing_loss_and_changes_nothing():
    s = build_session(mlp(), optimizer="sgd", check_finite=True)
    s.set_learning_rate(0.1)
    s.set_input("x", np.full((4, 6), 3e38, np.float32))  # finite input; the loss overflows
    s.set_input("y", Y)
    before = _state(s)
    with pytest.raises(FloatingPointError, match=r"output 'output_0' is not finite"):
        s.step()
    assert s.optimizer_step == 0 and all(np.array_equal(v, _state(s)[n]) for n, v in before.items())


def test_check_finite_names_a_non_finite_gradient():
    g = Graph()
    w = g.parameter("w", [3])
    # sqrt at 0: the loss is finite (0) but its gradient is infinite
    g.set_outputs([g.sum_all(g.sqrt(g.mul(w, g.input("zero", [3]))))])
    s = build_session(g, check_finite=True)
    s.set_parameter("w", [1.0, 2.0, 3.0])
    with pytest.raises(FloatingPointError, match=r"'grad\.w' is not finite"):
        s.step()


def test_without_check_finite_a_non_finite_input_runs():
    s = build_inference_session(mlp())
    s.set_input("x", np.full((4, 6), np.nan, np.float32))
    s.step()
    assert np.isnan(s.read_loss())


def test_beta_zero_is_accepted_and_steps():
    """0 <= beta < 1: beta = 0 (no momentum / no second-moment averaging) is a valid Adam."""
    s = build_session(mlp(), optimizer="adam")
    s.set_adam(1e-2, beta1=0.0, beta2=0.0)
    s.set_input("x", X)
    s.set_input("y", Y)
    s.step()
    assert s.optimizer_step == 1 and np.isfinite(s.read_param("w1")).all()
