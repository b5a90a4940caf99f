"""CUDA kernel of SwiGLUPacked: placement on CUDAExecutionProvider, parity with the float64 reference of the
rounded input in float32/float16/bfloat16 at the CPU tests' shapes (widths no multiple of a vector, a batch
dimension, SmolLM2-135M's 128-row prefill, a wide row), a 512-row prefill and a grid-stride size, bad input
refused with an ONNX Runtime error in each type; a tiny LLaMA prefill of 32 rows on CUDA, replayed as a CUDA
graph with its SwiGLUs packed, giving the CPU's logits; and ``LlamaRunner(swiglu_packed=...)`` on CUDA giving
the same logits either way.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import decode_linear_cases as dl
import kernel_cases as kc
import numpy as np
import pytest
from prefill_fusion_checks import assert_prefill_replays_like_cpu
from test_swiglu_packed_kernels import BAD, CASES, OP, bad_model, model, packed_input, packed_ref, run

pytestmark = kc.CUDA_SKIPS
GPU_CASES = [*CASES, (512, 3072), (4, 2 * 2**20)]  # the last: more elements than 65536 blocks of 256 threads
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), kc.BFLOAT16]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", GPU_CASES, ids=["x".join(map(str, c)) for c in GPU_CASES])
def test_cuda_kernel_matches_the_float64_reference_and_runs_on_cuda(case, dtype, tmp_path):
    x = packed_input(case, seed=len(case)).astype(dtype).astype(np.float32)  # the input as stored in dtype
    sess = kc.cuda_session(model(x, dtype, with_function=False), profile_prefix=str(tmp_path / "cuda"))
    got = run(sess, x, dtype)
    if dtype == np.float32:
        ref = packed_ref(x)
        tol = {"rtol": 1e-5, "atol": 1e-5 * max(1.0, float(np.max(np.abs(ref))))}  # expf and a division
    else:
        ref = packed_ref(x).astype(dtype).astype(np.float32)
        tol = dl.half_tolerance(dtype, ref)
    placed = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == OP]
    assert placed == [(OP, "CUDAExecutionProvider")], placed
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, **tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("x,match", BAD, ids=[str(k) for k in range(len(BAD))])
def test_bad_input_raises_an_ort_error_naming_the_op_on_cuda(x, match, dtype):
    sess = kc.cuda_session(bad_model(dtype))
    if dtype == np.float32:
        kc.assert_ort_error(lambda: sess.run(None, {"x": x}), OP, match)
    else:
        kc.assert_ort_error(lambda: dl.run_half(sess, {"x": x}, dtype, [(1,)]), OP, match)


def test_prefill_with_packed_swiglu_replays_as_a_cuda_graph_and_matches_the_cpu():
    from meganeura_onnx.models import llama

    from meganeura_onnx import build_inference_session
    from meganeura_onnx.init import default_parameters

    cfg, rows = llama.PRESETS["tiny"], 32
    g = llama.build_graph(cfg, "prefill", rows, 64)
    params = default_parameters(g, 4)
    gpu = build_inference_session(g, "cuda", parameters=params, cuda_graph=True)  # packed by default on CUDA
    cpu = build_inference_session(g, "cpu", parameters=params, optimize=False)
    ran = [op for _, _, op, _ in gpu.plan().placement]
    assert ran.count(OP) == cfg.num_hidden_layers and "SwiGLU" not in ran, ran
    assert gpu.plan().kernels().get(OP) == "kernel"
    assert_prefill_replays_like_cpu(gpu, cpu, cfg, rows)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_llama_runner_on_cuda_gives_the_same_prefill_with_and_without_packed_swiglu(precision):
    from meganeura_onnx.models import llama

    cfg = llama.PRESETS["tiny"]
    prompt = [int(t) for t in np.random.default_rng(5).integers(0, cfg.vocab_size, 24)]
    kw = dict(max_seq=48, prefill_chunk=24, device="cuda", precision=precision)
    runners = {flag: llama.LlamaRunner(cfg, None, swiglu_packed=flag, **kw) for flag in (False, True)}
    fired = {flag: r.prefiller.report.rules_fired.get("fuse_swiglu_packed", 0) for flag, r in runners.items()}
    assert fired == {False: 0, True: cfg.num_hidden_layers}
    logits = {flag: np.asarray(r.prefill(prompt), np.float32) for flag, r in runners.items()}
    tol = 1e-5 if precision == "fp32" else 2e-2  # fp16: the Split's copy is exact, SwiGLU's rounding the same
    np.testing.assert_allclose(logits[True], logits[False], rtol=tol, atol=tol)
