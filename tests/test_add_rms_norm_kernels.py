"""CPU kernel of AddRMSNorm (``sum = x + residual``, ``y = rms_norm(sum) * gamma``): against a float64 numpy
reference and the op table's function body in float32, in float16/bfloat16 against the reference of the
rounded inputs (the sum bit for bit: added in float32, rounded once), one fused node in the profile, and
bad shapes refused with an ONNX Runtime error naming the op."""

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
IDS = [f"M{m}-K{k}" for m, k in dl.ADD_NORM]


@pytest.mark.parametrize("case", dl.ADD_NORM, ids=IDS)
def test_add_rms_norm_kernel_matches_numpy_and_the_function_body(case):
    inputs = dl.add_norm_inputs(np.random.default_rng(case[0] * case[1]), *case)
    model = dl.add_norm_model(inputs)
    y, s = kc.session(model, library=LIB).run(None, inputs)
    ref_y, ref_s = dl.add_norm_ref(inputs)
    np.testing.assert_array_equal(s, ref_s)  # one float32 add
    np.testing.assert_allclose(y, ref_y, rtol=RTOL, atol=ATOL)
    body_y, body_s = kc.session(model, library=None).run(None, inputs)
    np.testing.assert_array_equal(body_s, s)
    np.testing.assert_allclose(body_y, y, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", [dl.ADD_NORM[1], dl.ADD_NORM[3], dl.ADD_NORM[5]], ids=[IDS[1], IDS[3], IDS[5]])
def test_half_precision_kernel_rounds_the_sum_once_and_normalises_the_rounded_sum(case, dtype):
    inputs = dl.add_norm_inputs(np.random.default_rng(case[1]), *case)
    ref_y, ref_s = dl.add_norm_ref(inputs, dtype)
    sess = kc.session(dl.add_norm_model(inputs, dtype=dtype, with_function=False), library=LIB)
    y, s = dl.run_half(sess, inputs, dtype, [ref_y.shape, ref_s.shape])
    np.testing.assert_array_equal(s, ref_s)
    np.testing.assert_allclose(y, ref_y, **dl.half_tolerance(dtype, ref_y))


def test_profile_shows_one_fused_kernel_not_its_function_body(tmp_path):
    inputs = dl.add_norm_inputs(np.random.default_rng(0), 4, 16)
    model = dl.add_norm_model(inputs)
    sess = kc.session(model, library=LIB, profile_prefix=str(tmp_path / "kernel"))
    sess.run(None, inputs)
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess)] == [("AddRMSNorm", "CPUExecutionProvider")]
    sess = kc.session(model, library=None, profile_prefix=str(tmp_path / "function"))
    sess.run(None, inputs)
    ops = {n["op_name"] for n in kc.profiled_nodes(sess)}
    assert "AddRMSNorm" not in ops and "Add" in ops, ops


def f32(*shape):
    return np.ones(shape, np.float32)


BAD = [
    ({"x": f32(2, 8), "residual": f32(2, 7), "gamma": f32(8)}, ["residual", "[2, 7]", "[2, 8]"]),
    ({"x": f32(2, 8), "residual": f32(3, 8), "gamma": f32(8)}, ["residual", "[3, 8]"]),
    ({"x": f32(2, 8), "residual": f32(2, 8), "gamma": f32(9)}, ["weight", "[9]", "[8]"]),
    ({"x": f32(16), "residual": f32(16), "gamma": f32(16)}, ["x", "rank"]),
    ({"x": f32(2, 8), "residual": f32(16), "gamma": f32(8)}, ["residual", "rank"]),
]


def bad_model(inputs, dtype=np.float32) -> bytes:
    """The one-node model with unknown input shapes, so that the values reach the kernel."""
    proto = onnx.load_from_string(dl.add_norm_model(inputs, dtype=dtype, with_function=False))
    for vi in proto.graph.input:
        vi.type.tensor_type.ClearField("shape")
    return proto.SerializeToString()


@pytest.mark.parametrize("inputs,match", BAD, ids=[str(k) for k in range(len(BAD))])
def test_bad_input_raises_an_ort_error_naming_the_op_and_the_values(inputs, match):
    kc.assert_ort_error(lambda: kc.session(bad_model(inputs), library=LIB).run(None, inputs), "AddRMSNorm", match)


def test_empty_rows_give_empty_outputs():
    inputs = {"x": f32(0, 8), "residual": f32(0, 8), "gamma": f32(8)}
    y, s = kc.session(dl.add_norm_model(inputs), library=LIB).run(None, inputs)
    assert y.shape == s.shape == (0, 8)
