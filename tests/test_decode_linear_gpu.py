"""CUDA kernels of RMSNormLinear, RMSNormSwiGLU and LinearResidual: placement on CUDAExecutionProvider,
parity with a float64 numpy reference in float32/float16/bfloat16, M = 1 and 8 (and 16), odd K and N,
wide weights at M = 1 (several columns per warp),
both weight layouts, row counts that take several launches; a batched decode step replayed as a CUDA
graph with every residual product in LinearResidual (the tiny LLaMA's fused one-sequence decode step on
CUDA, as a CUDA graph and in fp16: ``test_fused_kernels_gpu.py``).

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
# + a K so large that 16 rows of it do not fit one block's shared memory: row tiles of 5 (several launches);
# one row through a weight wide enough for the grouped kernel (several columns per warp: K = 256, 576 and
# 1024 hold 1, 3 and 4 of a lane's 16-byte chunks at 16 bits, 2 at float32; N = 20001 ends in a partial group)
LINEAR = [
    *dl.LINEAR,
    (16, 2048, (40, 24), True),
    (16, 2048, (33,), False),
    (8, 576, (49152,), True),
    (1, 576, (49152,), True),
    (1, 256, (20001,), True),
    (1, 1024, (33000,), True),
]
SWIGLU = [*dl.SWIGLU, (16, 2048, 40, False), (1, 576, 1536, False)]
# + 16 rows of K = 4096 (a tile of 2 rows per launch) and SmolLM2's down_proj in the [K, N] layout
RESIDUAL = [*dl.RESIDUAL, (16, 4096, 40, True), (16, 4096, 33, False), (1, 1536, 576, False)]
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), kc.BFLOAT16]


def cases():
    for c in LINEAR:
        yield "RMSNormLinear", c
    for c in SWIGLU:
        yield "RMSNormSwiGLU", c
    for c in RESIDUAL:
        yield "LinearResidual", c


def inputs_and_refs(op, case, dtype):
    m, k, n, trans_b = case
    if op == "LinearResidual":
        inputs = dl.residual_inputs(np.random.default_rng(m * 7 + k), m, k, n, trans_b)
        return inputs, [dl.residual_ref(inputs if dtype == np.float32 else dl.rounded(inputs, dtype), trans_b)]
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


def test_bad_residual_shape_raises_an_ort_error_naming_the_argument_on_cuda():
    inputs = {"x": np.ones((2, 8), np.float32), "w": np.ones((4, 8), np.float32), "residual": np.ones((3, 4), np.float32)}
    proto = onnx.load_from_string(dl.model("LinearResidual", inputs, True, with_function=False))
    for vi in proto.graph.input:
        vi.type.tensor_type.ClearField("shape")
    kc.assert_ort_error(lambda: kc.cuda_session(proto.SerializeToString()).run(None, inputs), "LinearResidual", ["residual", "[3, 4]"])


def test_batched_decode_step_with_linear_residual_replays_as_a_cuda_graph_and_matches_the_cpu():
    """4 sequences at different positions: the fused step on CUDA (o_proj and down_proj as LinearResidual
    over 4 rows), captured once and replayed, gives the logits of the unfused step on the CPU."""
    from meganeura_onnx.models import llama

    from meganeura_onnx import build_inference_session
    from meganeura_onnx.init import default_parameters

    cfg, batch = llama.PRESETS["tiny"], 4
    g = llama.build_graph(cfg, "decode", 1, 32, batch)
    params = default_parameters(g, 11)
    gpu = build_inference_session(g, "cuda", parameters=params, cuda_graph=True, decode_layer=False)  # the layers' five kernels
    cpu = build_inference_session(g, "cpu", parameters=params, optimize=False)
    placement = gpu.plan().placement
    ran = [op for _, _, op, _ in placement]
    assert gpu.plan().kernels().get("LinearResidual") == "kernel" and ran.count("LinearResidual") == 2 * cfg.num_hidden_layers, ran
    assert "Gemm" not in ran and "MatMul" not in ran, ran  # every product of the step is one of our GEMVs
    assert {ep for *_, ep in placement} == {"CUDAExecutionProvider"}, placement
    rng = np.random.default_rng(2)
    starts = np.array([0, 3, 7, 1])
    for step in range(5):
        tokens, positions = rng.integers(0, cfg.vocab_size, batch).tolist(), (starts + step).tolist()
        for s in (gpu, cpu):
            s.set_input_u32("input_ids", tokens)
            s.set_input_u32("kv_pos", positions)
            s.step()
        np.testing.assert_allclose(gpu.read_output_by_index(0), cpu.read_output_by_index(0), rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
