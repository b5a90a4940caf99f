"""CPU kernel of SwiGLUPacked (``out[..., j] = silu(x[..., j]) * x[..., F + j]`` for x ``[..., 2F]``): against
an independent float64 numpy reference and the op table's function body (ONNX Runtime without our library)
in float32, float16 and bfloat16 (there against the reference of the rounded input, rounded once; ONNX
Runtime's CPU has no bfloat16 Sigmoid for the body), at widths that are no multiple of the vector width, with
batch dimensions, one row across the thread pool's chunks; one fused node in the profile; bad input refused
with an ONNX Runtime error naming the op, the argument and the values; empty inputs give empty outputs."""

from __future__ import annotations

import decode_linear_cases as dl
import kernel_cases as kc
import numpy as np
import onnx
import pytest

LIB = kc.kernel_library("cpu")
pytestmark = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
OP = "SwiGLUPacked"
# x shapes [..., 2F]: F = 1, F = 17 and 33 (no multiple of 4 or 8 lanes), a batch dimension, SmolLM2-135M's
# 128-row prefill (F = 1536), rows of 3001 whose 16384-element chunks start and end mid-row, one wide row
CASES = [(1, 2), (3, 34), (2, 5, 66), (128, 3072), (7, 6002), (1, 2 * 40000)]
IDS = ["x".join(map(str, c)) for c in CASES]
HALF = [np.dtype(np.float16), kc.BFLOAT16]


def packed_ref(x: np.ndarray) -> np.ndarray:
    """float64: gate / (1 + exp(-gate)) * up with gate, up the two halves of the last axis."""
    x = x.astype(np.float64)
    f = x.shape[-1] // 2
    gate, up = x[..., :f], x[..., f:]
    return gate / (1.0 + np.exp(-gate)) * up


def packed_input(shape, seed: int = 0) -> np.ndarray:
    """Gates over [-8, 8] (both tails of the sigmoid), ups standard normal."""
    rng = np.random.default_rng(seed)
    f = shape[-1] // 2
    x = rng.standard_normal(shape)
    x[..., :f] = rng.uniform(-8.0, 8.0, (*shape[:-1], f))
    return x.astype(np.float32)


def model(x: np.ndarray, dtype=np.float32, *, with_function: bool = True, unknown_shapes: bool = False) -> bytes:
    return kc.make_model(OP, {"x": x.astype(dtype)}, {}, out_dtype=dtype, with_function=with_function, unknown_shapes=unknown_shapes)


def run(sess, x: np.ndarray, dtype) -> np.ndarray:
    """One run in ``dtype`` (half through IOBinding), the output as float32."""
    out_shape = (*x.shape[:-1], x.shape[-1] // 2)
    return dl.run_half(sess, {"x": x}, dtype, [out_shape])[0] if np.dtype(dtype) in HALF else sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_float32_kernel_matches_numpy_and_the_function_body(case):
    x = packed_input(case, seed=len(IDS[CASES.index(case)]))
    got = run(kc.session(model(x), library=LIB), x, np.float32)
    ref = packed_ref(x)
    assert got.shape == ref.shape == (*case[:-1], case[-1] // 2) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)  # as SwiGLU's kernel tests: its exp is a polynomial
    body = run(kc.session(model(x), library=None), x, np.float32)
    np.testing.assert_allclose(body, got, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_half_kernel_computes_in_float32_and_rounds_once(case, dtype):
    x = packed_input(case, seed=3).astype(dtype).astype(np.float32)  # the input as stored in half
    ref = packed_ref(x).astype(dtype).astype(np.float32)
    got = run(kc.session(model(x, dtype, with_function=False), library=LIB), x, dtype)
    np.testing.assert_allclose(got, ref, **dl.half_tolerance(dtype, ref))
    if dtype == np.float16:  # the body in float16 (ORT's CPU rounds each of its nodes)
        body = run(kc.session(model(x, dtype), library=None), x, dtype)
        np.testing.assert_allclose(body, ref, rtol=4 * 2.0**-10, atol=4 * 2.0**-10 * float(np.max(np.abs(ref))))


def test_the_kernel_reads_the_halves_not_neighbouring_rows():
    """A row's up half is the same row's second half: rows of distinct constants give distinct products."""
    rows = np.repeat(np.arange(1.0, 5.0, dtype=np.float32)[:, None], 6, axis=1)  # row r: all r + 1
    rows[:, 3:] *= 10.0  # up = 10 * gate
    got = kc.session(model(rows), library=LIB).run(None, {"x": rows})[0]
    g = np.arange(1.0, 5.0)[:, None]
    np.testing.assert_allclose(got, np.repeat(g / (1 + np.exp(-g)) * 10 * g, 3, axis=1), rtol=1e-6)


def test_profile_shows_one_fused_kernel_not_its_function_body(tmp_path):
    x = packed_input((4, 16))
    sess = kc.session(model(x), library=LIB, profile_prefix=str(tmp_path / "kernel"))
    sess.run(None, {"x": x})
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess)] == [(OP, "CPUExecutionProvider")]
    sess = kc.session(model(x), library=None, profile_prefix=str(tmp_path / "function"))
    sess.run(None, {"x": x})
    ops = {n["op_name"] for n in kc.profiled_nodes(sess)}
    assert OP not in ops and "Split" in ops, ops


def test_output_shape_is_inferred_for_a_static_input():
    """The library's shape inference gives the next node ``[..., F]`` (a wrong shape would fail its Add)."""
    x, bias = packed_input((3, 2, 10)), np.ones((3, 2, 5), np.float32)
    proto = onnx.load_from_string(model(x, with_function=False))
    proto.graph.input.append(onnx.helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [3, 2, 5]))
    proto.graph.node.append(onnx.helper.make_node("Add", ["Y", "b"], ["Z"]))
    proto.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [3, 2, 5]))
    sess = kc.session(proto.SerializeToString(), library=LIB)
    assert sess.get_outputs()[0].shape == [3, 2, 5]
    np.testing.assert_allclose(sess.run(None, {"x": x, "b": bias})[0], packed_ref(x) + 1.0, rtol=1e-5, atol=1e-5)


# x values the kernel refuses (the model's input shape left unknown, so they reach it), and what its error names
BAD = [
    (np.ones((2, 7), np.float32), ["x", "even last dimension", "got 7", "[2, 7]"]),
    (np.ones((3, 1), np.float32), ["x", "even last dimension", "got 1", "[3, 1]"]),
    (np.ones((2, 2, 5), np.float32), ["x", "even last dimension", "got 5", "[2, 2, 5]"]),
    (np.array(1.0, np.float32), ["x", "rank >= 1", "scalar"]),
]


def bad_model(dtype=np.float32) -> bytes:
    """The one-node model in ``dtype`` with x of unknown shape."""
    return model(np.ones((2, 2), np.float32), dtype, with_function=False, unknown_shapes=True)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), *HALF], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("x,match", BAD, ids=[str(k) for k in range(len(BAD))])
def test_bad_input_raises_an_ort_error_naming_the_op_and_the_values(x, match, dtype):
    sess = kc.session(bad_model(dtype), library=LIB)
    if dtype == np.float32:
        kc.assert_ort_error(lambda: sess.run(None, {"x": x}), OP, match)
    else:
        kc.assert_ort_error(lambda: dl.run_half(sess, {"x": x}, dtype, [(1,)]), OP, match)


@pytest.mark.parametrize("shape,out", [((0, 8), (0, 4)), ((3, 0), (3, 0)), ((2, 0, 6), (2, 0, 3))])
def test_empty_inputs_give_empty_outputs(shape, out):
    x = np.zeros(shape, np.float32)
    got = kc.session(model(x, with_function=False, unknown_shapes=True), library=LIB).run(None, {"x": x})[0]
    assert got.shape == out
