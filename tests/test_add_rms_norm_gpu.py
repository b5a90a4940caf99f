"""CUDA kernel of AddRMSNorm: placement on CUDAExecutionProvider, parity with the float64 reference of the
rounded inputs in float32/float16/bfloat16 (the sum bit for bit: added in float32, rounded once) at one row,
odd widths, a prefill's 128 and 512 rows of SmolLM2's 576 and a wide row (a block per row, grid-stride), bad
shapes refused with an ONNX Runtime error in each type; and a tiny LLaMA prefill of
32 rows on CUDA, replayed as a CUDA graph with its norms fused, giving the CPU's logits.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import decode_linear_cases as dl
import kernel_cases as kc
import numpy as np
import pytest
from prefill_fusion_checks import assert_prefill_replays_like_cpu
from test_add_rms_norm_kernels import BAD, bad_model

pytestmark = kc.CUDA_SKIPS
CASES = [*dl.ADD_NORM, (512, 576), (33, 8192), (2, 1)]
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), kc.BFLOAT16]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=[f"M{m}-K{k}" for m, k in CASES])
def test_cuda_kernel_matches_the_float64_reference_and_runs_on_cuda(case, dtype, tmp_path):
    inputs = dl.add_norm_inputs(np.random.default_rng(case[0] + case[1]), *case)
    ref_y, ref_s = dl.add_norm_ref(inputs, dtype)
    sess = kc.cuda_session(dl.add_norm_model(inputs, dtype=dtype, with_function=False), profile_prefix=str(tmp_path / "cuda"))
    if dtype == np.float32:
        y, s = sess.run(None, inputs)
        tol = {"rtol": 1e-5, "atol": 1e-5 * max(1.0, float(np.max(np.abs(ref_y))))}  # rsqrtf: <= 2 ulp
    else:
        y, s = dl.run_half(sess, inputs, dtype, [ref_y.shape, ref_s.shape])
        tol = dl.half_tolerance(dtype, ref_y)
    placed = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == "AddRMSNorm"]
    assert placed == [("AddRMSNorm", "CUDAExecutionProvider")], placed
    np.testing.assert_array_equal(s, ref_s)
    np.testing.assert_allclose(y, ref_y, **tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("inputs,match", BAD, ids=[str(k) for k in range(len(BAD))])
def test_bad_input_raises_an_ort_error_naming_the_op_on_cuda(inputs, match, dtype):
    run = lambda: dl.run_half(kc.cuda_session(bad_model(inputs, dtype)), inputs, dtype, [(1,), (1,)])  # noqa: E731
    if dtype == np.float32:
        run = lambda: kc.cuda_session(bad_model(inputs)).run(None, inputs)  # noqa: E731
    kc.assert_ort_error(run, "AddRMSNorm", match)


def test_prefill_with_fused_norms_replays_as_a_cuda_graph_and_matches_the_cpu():
    from meganeura_onnx.models import llama

    from meganeura_onnx import build_inference_session
    from meganeura_onnx.init import default_parameters

    cfg, rows = llama.PRESETS["tiny"], 32
    g = llama.build_graph(cfg, "prefill", rows, 64)
    params = default_parameters(g, 4)
    gpu = build_inference_session(g, "cuda", parameters=params, cuda_graph=True)
    cpu = build_inference_session(g, "cpu", parameters=params, optimize=False)
    ran = [op for _, _, op, _ in gpu.plan().placement]
    assert ran.count("AddRMSNorm") == 2 * cfg.num_hidden_layers - 1, ran
    assert gpu.plan().kernels().get("AddRMSNorm") == "kernel"
    assert_prefill_replays_like_cpu(gpu, cpu, cfg, rows)
