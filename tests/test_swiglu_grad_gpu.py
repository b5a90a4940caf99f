"""The CUDA SwiGLUGrad kernel (SwiGLU's backward, two outputs): placement on CUDAExecutionProvider,
float32 against the float64 reference and the CPU kernel, float16 / bfloat16 against the float32
math of the rounded inputs, sizes that leave a tail after the 16-byte chunks.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import pytest
import swiglu_grad_cases as sg

pytestmark = kc.CUDA_SKIPS
# One element; widths that are not a multiple of 4 or 8 (a tail after the 16-byte chunks); SmolLM2's
# MLP width for 8 x 256 tokens.
SHAPES = [(1, 1), (7, 33), (3, 5, 1001), (2048, 1536)]
IDS = ["x".join(map(str, s)) for s in SHAPES]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_cuda_swiglu_grad_matches_numpy_and_the_cpu_kernel_and_runs_on_cuda(shape, tmp_path):
    feeds = sg.inputs(shape)
    want = sg.reference(feeds["gate"], feeds["up"], feeds["dy"])
    sess = kc.cuda_session(sg.model(shape), profile_prefix=str(tmp_path / "cuda"))
    got = sess.run(None, feeds)
    placed = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == "SwiGLUGrad"]
    assert placed == [("SwiGLUGrad", "CUDAExecutionProvider")]
    on_cpu = kc.session(sg.model(shape), library=kc.CUDA_LIB).run(None, feeds)  # the CUDA library serves CPU sessions too
    for name, g, c, w in zip(sg.OUTPUTS, got, on_cpu, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_half_precision_cuda_swiglu_grad_matches_the_float32_math(shape, dtype):
    sg.check_half(kc.cuda_session, shape, dtype)
