"""CPU kernels of RMSNormLinear, RMSNormSwiGLU and LinearResidual: against a float64 numpy reference,
against the op table's function body, in float16/bfloat16, one fused node in the profile, and bad input."""

from __future__ import annotations

import decode_linear_cases as dl
import kernel_cases as kc
import numpy as np
import onnx
import pytest

LIB = kc.kernel_library("cpu")
pytestmark = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
RTOL = ATOL = 1e-5
HALF = [np.dtype(np.float16), kc.BFLOAT16]


def case_id(c) -> str:
    m, k, n, t = c
    return f"M{m}-K{k}-N{'x'.join(map(str, n)) if isinstance(n, tuple) else n}-{'nk' if t else 'kn'}"


@pytest.mark.parametrize("case", dl.LINEAR, ids=[case_id(c) for c in dl.LINEAR])
def test_rms_norm_linear_kernel_matches_numpy_and_the_function_body(case):
    m, k, widths, trans_b = case
    inputs = dl.weights(np.random.default_rng(m * k), m, k, widths, trans_b)
    model = dl.model("RMSNormLinear", inputs, trans_b)
    got = kc.session(model, library=LIB).run(None, inputs)
    refs = dl.linear_ref(inputs, trans_b)
    assert [g.shape for g in got] == [r.shape for r in refs]
    for g, r in zip(got, refs, strict=True):
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)
    for g, b in zip(got, kc.session(model, library=None).run(None, inputs), strict=True):
        np.testing.assert_allclose(g, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", dl.SWIGLU, ids=[case_id(c) for c in dl.SWIGLU])
def test_rms_norm_swiglu_kernel_matches_numpy_and_the_function_body(case):
    m, k, n, trans_b = case
    inputs = dl.weights(np.random.default_rng(m + k), m, k, (n, n), trans_b)
    inputs = {"x": inputs["x"], "gamma": inputs["gamma"], "w_gate": inputs["w0"], "w_up": inputs["w1"]}
    model = dl.model("RMSNormSwiGLU", inputs, trans_b)
    got = kc.session(model, library=LIB).run(None, inputs)[0]
    ref = dl.swiglu_ref({"x": inputs["x"], "gamma": inputs["gamma"], "w0": inputs["w_gate"], "w1": inputs["w_up"]}, trans_b)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(kc.session(model, library=None).run(None, inputs)[0], got, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", dl.RESIDUAL, ids=[case_id(c) for c in dl.RESIDUAL])
def test_linear_residual_kernel_matches_numpy_and_the_function_body(case):
    m, k, n, trans_b = case
    inputs = dl.residual_inputs(np.random.default_rng(m * n + k), m, k, n, trans_b)
    model = dl.model("LinearResidual", inputs, trans_b)
    got = kc.session(model, library=LIB).run(None, inputs)[0]
    ref = dl.residual_ref(inputs, trans_b)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(kc.session(model, library=None).run(None, inputs)[0], got, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("trans_b", [True, False], ids=["nk", "kn"])
def test_half_precision_linear_residual_matches_the_float64_reference_of_the_rounded_inputs(trans_b, dtype):
    inputs = dl.residual_inputs(np.random.default_rng(7), 5, 70, 67, trans_b)  # widths off the 8-value conversion blocks
    ref = dl.residual_ref(dl.rounded(inputs, dtype), trans_b)
    sess = kc.session(dl.model("LinearResidual", inputs, trans_b, dtype=dtype, with_function=False), library=LIB)
    (got,) = dl.run_half(sess, inputs, dtype, [ref.shape])
    np.testing.assert_allclose(got, ref, **dl.half_tolerance(dtype, ref))


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", [dl.LINEAR[0], dl.LINEAR[1], dl.SWIGLU[1]], ids=["linear-nk", "linear-kn", "swiglu-kn"])
def test_half_precision_kernels_match_the_float64_reference_of_the_rounded_inputs(case, dtype):
    m, k, n, trans_b = case
    swiglu = not isinstance(n, tuple)
    inputs = dl.weights(np.random.default_rng(k), m, k, (n, n) if swiglu else n, trans_b)
    exact = dl.rounded(inputs, dtype)
    refs = [dl.swiglu_ref(exact, trans_b)] if swiglu else dl.linear_ref(exact, trans_b)
    if swiglu:
        inputs = {"x": inputs["x"], "gamma": inputs["gamma"], "w_gate": inputs["w0"], "w_up": inputs["w1"]}
    op = "RMSNormSwiGLU" if swiglu else "RMSNormLinear"
    sess = kc.session(dl.model(op, inputs, trans_b, dtype=dtype, with_function=False), library=LIB)
    for got, ref in zip(dl.run_half(sess, inputs, dtype, [r.shape for r in refs]), refs, strict=True):
        np.testing.assert_allclose(got, ref, **dl.half_tolerance(dtype, ref))


@pytest.mark.parametrize("op", ["RMSNormLinear", "RMSNormSwiGLU", "LinearResidual"])
def test_profile_shows_one_fused_kernel_not_its_function_body(op, tmp_path):
    inputs = dl.weights(np.random.default_rng(0), 2, 16, (8, 8), True)
    if op == "RMSNormSwiGLU":
        inputs = {"x": inputs["x"], "gamma": inputs["gamma"], "w_gate": inputs["w0"], "w_up": inputs["w1"]}
    if op == "LinearResidual":
        inputs = dl.residual_inputs(np.random.default_rng(0), 2, 16, 8, True)
    model = dl.model(op, inputs, True)
    sess = kc.session(model, library=LIB, profile_prefix=str(tmp_path / "kernel"))
    sess.run(None, inputs)
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess)] == [(op, "CPUExecutionProvider")]
    sess = kc.session(model, library=None, profile_prefix=str(tmp_path / "function"))
    sess.run(None, inputs)
    ops = {n["op_name"] for n in kc.profiled_nodes(sess)}
    assert op not in ops and "Gemm" in ops, ops


def f32(*shape):
    return np.ones(shape, np.float32)


BAD = [
    ("RMSNormLinear", {"x": f32(2, 8), "gamma": f32(7), "w0": f32(4, 8)}, True, ["gamma", "[7]", "[2, 8]"]),
    ("RMSNormLinear", {"x": f32(2, 8), "gamma": f32(8), "w0": f32(4, 8), "w1": f32(5, 9)}, True, ["w1", "[5, 9]", "[N, K]"]),
    ("RMSNormLinear", {"x": f32(2, 8), "gamma": f32(8), "w0": f32(4, 8)}, False, ["w0", "[4, 8]", "[K, N]"]),
    ("RMSNormSwiGLU", {"x": f32(2, 8), "gamma": f32(8), "w_gate": f32(4, 8), "w_up": f32(5, 8)}, True, ["w_gate", "4", "5"]),
    ("RMSNormLinear", {"x": f32(2, 0), "gamma": f32(0), "w0": f32(4, 0)}, True, ["[2, 0]", "feature"]),
    ("LinearResidual", {"x": f32(2, 8), "w": f32(4, 9), "residual": f32(2, 4)}, True, ["weight w", "[4, 9]", "[N, K]"]),
    ("LinearResidual", {"x": f32(2, 8), "w": f32(8, 4), "residual": f32(2, 5)}, False, ["residual", "[2, 5]", "[2, 4]"]),
    ("LinearResidual", {"x": f32(2, 8), "w": f32(4, 8), "residual": f32(8)}, True, ["residual", "rank"]),
]


@pytest.mark.parametrize("op,inputs,trans_b,match", BAD, ids=[f"{b[0]}-{k}" for k, b in enumerate(BAD)])
def test_bad_input_raises_an_ort_error_naming_the_op_and_the_values(op, inputs, trans_b, match):
    proto = onnx.load_from_string(dl.model(op, inputs, trans_b, with_function=False))
    for vi in proto.graph.input:  # unknown shapes: the values reach the kernel
        vi.type.tensor_type.ClearField("shape")
    kc.assert_ort_error(lambda: kc.session(proto.SerializeToString(), library=LIB).run(None, inputs), op, match)


def test_fewer_outputs_than_weights_is_an_error_naming_the_counts():
    inputs = {"x": f32(2, 8), "gamma": f32(8), "w0": f32(4, 8), "w1": f32(3, 8)}
    proto = onnx.load_from_string(dl.model("RMSNormLinear", inputs, True, with_function=False))
    del proto.graph.node[0].output[1]
    del proto.graph.output[1]
    run = lambda: kc.session(proto.SerializeToString(), library=LIB).run(None, inputs)  # noqa: E731
    kc.assert_ort_error(run, "RMSNormLinear", ["2 weights need 2 outputs, got 1"])


def test_linear_residual_of_empty_rows_is_the_residual():
    """K = 0: the product is zeros, the output the residual (what the function body's Gemm gives)."""
    inputs = {"x": f32(3, 0), "w": f32(5, 0), "residual": np.arange(15, dtype=np.float32).reshape(3, 5)}
    model = dl.model("LinearResidual", inputs, True)
    np.testing.assert_array_equal(kc.session(model, library=LIB).run(None, inputs)[0], inputs["residual"])
