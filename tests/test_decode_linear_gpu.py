"""CUDA kernels of RMSNormLinear and RMSNormSwiGLU: placement on CUDAExecutionProvider, parity with a
float64 numpy reference in float32/float16/bfloat16, M = 1 and 8 (and 16), odd K and N, both weight
layouts, row counts that take several launches (the tiny LLaMA's fused decode step on CUDA, as a CUDA
graph and in fp16: ``test_fused_kernels_gpu.py``).

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import decode_linear_cases as dl
import kernel_cases as kc
import numpy as np
import onnx
import pytest
from test_decode_linear_kernels import RTOL, case_id

pytestmark = kc.CUDA_SKIPS
# + a K so large that 16 rows of it do not fit one block's shared memory: row tiles of 5 (several launches)
LINEAR = [*dl.LINEAR, (16, 2048, (40, 24), True), (16, 2048, (33,), False), (8, 576, (49152,), True)]
SWIGLU = [*dl.SWIGLU, (16, 2048, 40, False), (1, 576, 1536, False)]
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), kc.BFLOAT16]


def cases():
    for c in LINEAR:
        yield "RMSNormLinear", c
    for c in SWIGLU:
        yield "RMSNormSwiGLU", c


def inputs_and_refs(op, case, dtype):
    m, k, n, trans_b = case
    widths = (n, n) if op == "RMSNormSwiGLU" else n
    inputs = dl.weights(np.random.default_rng(m * 7 + k), m, k, widths, trans_b)
    exact = inputs if dtype == np.float32 else dl.rounded(inputs, dtype)
    refs = [dl.swiglu_ref(exact, trans_b)] if op == "RMSNormSwiGLU" else dl.linear_ref(exact, trans_b)
    if op == "RMSNormSwiGLU":
        inputs = {"x": inputs["x"], "gamma": inputs["gamma"], "w_gate": inputs["w0"], "w_up": inputs["w1"]}
    return inputs, refs


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op,case", list(cases()), ids=[f"{op}-{case_id(c)}" for op, c in cases()])
def test_cuda_kernel_matches_the_float64_reference_and_runs_on_cuda(op, case, dtype, tmp_path):
    trans_b = case[3]
    inputs, refs = inputs_and_refs(op, case, dtype)
    sess = kc.cuda_session(dl.model(op, inputs, trans_b, dtype=dtype, with_function=False), profile_prefix=str(tmp_path / "cuda"))
    if dtype == np.float32:
        got = sess.run(None, inputs)
        tol = [{"rtol": RTOL, "atol": 1e-5 * max(1.0, float(np.max(np.abs(r))))} for r in refs]
    else:
        got = dl.run_half(sess, inputs, dtype, [r.shape for r in refs])
        tol = [dl.half_tolerance(dtype, r) for r in refs]
    placed = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == op]
    assert placed == [(op, "CUDAExecutionProvider")], placed
    for g, r, t in zip(got, refs, tol, strict=True):
        np.testing.assert_allclose(g, r, **t)


def test_bad_weight_shape_raises_an_ort_error_naming_the_op_on_cuda():
    x, gamma = np.ones((2, 8), np.float32), np.ones(8, np.float32)
    inputs = {"x": x, "gamma": gamma, "w0": np.ones((4, 9), np.float32)}
    proto = onnx.load_from_string(dl.model("RMSNormLinear", inputs, True, with_function=False))
    for vi in proto.graph.input:
        vi.type.tensor_type.ClearField("shape")
    kc.assert_ort_error(lambda: kc.cuda_session(proto.SerializeToString()).run(None, inputs), "RMSNormLinear", ["[4, 9]"])
