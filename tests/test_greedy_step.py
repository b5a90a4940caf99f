"""``com.meganeura.GreedyStep`` (a greedy decode step's argmax, next position and token log in one op) on
the CPU: the kernel and the function body against numpy's argmax / add / clamped scatter, in every
element type, with ties, NaNs, infinities, a position that wraps at 2**32 and one past the log's end;
bad shapes and types refused with ONNX Runtime errors naming the op."""

from __future__ import annotations

import kernel_cases as kc
import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from meganeura_onnx.ops.indices import greedy_step_ref

LIB = kc.kernel_library("cpu")
needs_lib = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
ONNX_FLOAT = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, ml_dtypes.bfloat16: TensorProto.BFLOAT16}
OUTPUTS = ("next_token", "next_pos", "next_log")


def model(dtype=np.float32, declared: bool = True, *, kv_type=TensorProto.UINT32) -> bytes:
    """A one-node GreedyStep model with its function body attached (shapes undeclared unless ``declared``)."""
    shape = (lambda s: s) if declared else (lambda s: None)
    ins = [
        helper.make_tensor_value_info("logits", ONNX_FLOAT[dtype], shape(["B", "V"])),
        helper.make_tensor_value_info("kv_pos", kv_type, shape(["B"])),
        helper.make_tensor_value_info("token_log", TensorProto.UINT32, shape(["B", "N"])),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.UINT32, None) for n in OUTPUTS]
    node = helper.make_node("GreedyStep", ["logits", "kv_pos", "token_log"], list(OUTPUTS), domain=kc.DOMAIN, name="GreedyStep_0")
    m = helper.make_model(
        helper.make_graph([node], "greedy", ins, outs),
        opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)],
        functions=[kc.function_proto("GreedyStep")],
    )
    m.ir_version = 10
    return m.SerializeToString()


def hostile_logits(rng: np.random.Generator, rows: int, vocab: int) -> np.ndarray:
    """Random rows with a tie for the maximum (row 0), a NaN after the maximum (row 1), only -inf (row 2),
    a -0 before a +0 as the maximum (row 3)."""
    x = rng.standard_normal((rows, vocab)).astype(np.float32)
    x[0, [3, vocab - 2]] = 9.0  # the first of two equal maxima wins
    if rows > 1:
        x[1, 5], x[1, 9] = 20.0, np.nan  # a NaN beats any number
    if rows > 2:
        x[2, :] = -np.inf  # no number above -inf: index 0
    if rows > 3:
        x[3, :], x[3, 4], x[3, 8] = -1.0, -0.0, 0.0  # -0 and +0 are equal: the first wins
    return x


def run(sess, logits, kv_pos, log):
    """The three outputs; bfloat16 logits go in as an OrtValue (ORT's numpy bridge has no bfloat16)."""
    if logits.dtype == kc.BFLOAT16:
        logits = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(logits.view(np.uint16), TensorProto.BFLOAT16)
    return sess.run(None, {"logits": logits, "kv_pos": kv_pos, "token_log": log})


@needs_lib
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["float32", "float16", "bfloat16"])
def test_kernel_and_function_body_match_numpy_argmax_add_and_clamped_put(dtype):
    rng = np.random.default_rng(3)
    logits = hostile_logits(rng, 4, 37).astype(dtype)
    kv_pos = np.array([2, 2**32 - 1, 40, 0], np.uint32)  # row 1 wraps to 0; row 2's column is clamped to n - 1
    log = rng.integers(0, 1000, (4, 6)).astype(np.uint32)
    want = greedy_step_ref(logits.astype(np.float32), kv_pos, log)
    assert want[0].tolist() == [3, 9, 0, 4] and want[1][1] == 0 and want[2][2, 5] == want[0][2]
    for library in (LIB, None):  # the kernel, then the function body
        got = run(kc.session(model(dtype), library=library), logits, kv_pos, log)
        for name, g, w in zip(OUTPUTS, got, want, strict=True):
            assert g.dtype == np.uint32 and np.array_equal(g, w), (library, name, g, w)


@needs_lib
def test_kernel_matches_the_function_body_on_random_logits_and_a_large_vocabulary():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 49152)).astype(np.float16)
    kv_pos, log = rng.integers(0, 300, 3).astype(np.uint32), np.zeros((3, 257), np.uint32)
    kernel = run(kc.session(model(np.float16), library=LIB), logits, kv_pos, log)
    body = run(kc.session(model(np.float16), library=None), logits, kv_pos, log)
    for k, b in zip(kernel, body, strict=True):
        assert np.array_equal(k, b)
    assert np.array_equal(kernel[0], np.argmax(logits.astype(np.float32), axis=-1))


@needs_lib
def test_an_empty_batch_gives_empty_outputs():
    got = run(kc.session(model(), library=LIB), np.zeros((0, 5), np.float32), np.zeros(0, np.uint32), np.zeros((0, 3), np.uint32))
    assert [g.shape for g in got] == [(0,), (0,), (0, 3)]


@needs_lib
@pytest.mark.parametrize(
    ("logits", "kv_pos", "log", "match"),
    [
        (np.zeros((2, 0), np.float32), np.zeros(2, np.uint32), np.zeros((2, 3), np.uint32), ["logits must be [B, V] with 1 <= V"]),
        (np.zeros((2, 5), np.float32), np.zeros(3, np.uint32), np.zeros((2, 3), np.uint32), ["kv_pos must be [2]", "[3]"]),
        (np.zeros((2, 5), np.float32), np.zeros(2, np.uint32), np.zeros((3, 3), np.uint32), ["token_log must be [2, n]", "[3, 3]"]),
        (np.zeros((2, 5), np.float32), np.zeros(2, np.uint32), np.zeros((2, 0), np.uint32), ["token_log must be [2, n] with n >= 1"]),
        (np.zeros((2, 5, 1), np.float32), np.zeros(2, np.uint32), np.zeros((2, 3), np.uint32), ["'logits' must have rank 2"]),
    ],
    ids=["empty-vocabulary", "kv_pos-length", "log-rows", "empty-log", "logits-rank"],
)
def test_bad_shapes_raise_ort_errors_naming_the_op_and_the_shapes(logits, kv_pos, log, match):
    sess = kc.session(model(declared=False), library=LIB)
    kc.assert_ort_error(lambda: run(sess, logits, kv_pos, log), "GreedyStep", match)


@needs_lib
def test_an_int64_position_is_refused_at_load_with_the_type_named():
    with pytest.raises(Exception, match=r"Type 'tensor\(int64\)' of input parameter \(kv_pos\) of operator \(GreedyStep\)"):  # noqa: PT011
        kc.session(model(declared=False, kv_type=TensorProto.INT64), library=LIB)
