"""CUDA kernels of the fused decode-layer ops (SwiGLU, RopeCacheWrite): placement on
CUDAExecutionProvider, parity with numpy and the CPU kernels, in place on device buffers, bad input,
and the tiny LLaMA's fused decode step replayed as a CUDA graph.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
import pytest
import test_fused_kernels as cpu
from meganeura_onnx.models import llama
from test_decode_fusion import decode_sessions, feed_steps

from meganeura_onnx import build_inference_session
from meganeura_onnx.init import default_parameters

CUDA_LIB = kc.CUDA_LIB
pytestmark = kc.CUDA_SKIPS
CUDA = kc.CUDA_PROVIDERS
cuda_session = kc.cuda_session
CASES = cpu.CASES + [
    ("RopeCacheWrite", cpu.rope_cache_write_case, (8192, 1024, 128, 1, 8191)),  # 8 KV heads of 128
    ("RopeCacheWrite", cpu.rope_cache_write_case, (300, 96, 48, 64, 200)),  # a prefill chunk, head_dim not a power of 2
]


@pytest.mark.parametrize("op,make,case", CASES, ids=[f"{op}-{'x'.join(map(str, c))}" for op, _, c in CASES])
def test_cuda_fused_kernel_matches_numpy_and_the_cpu_kernel_and_runs_on_cuda(op, make, case, tmp_path):
    inputs, attrs, ref = make(*case)
    model = kc.make_model(op, inputs, attrs)
    sess = cuda_session(model, profile_prefix=str(tmp_path / "cuda"))
    got = sess.run(None, inputs)[0]
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == op] == [(op, "CUDAExecutionProvider")]
    np.testing.assert_allclose(got, ref, rtol=cpu.RTOL, atol=cpu.ATOL)
    on_cpu = kc.session(model, library=CUDA_LIB).run(None, inputs)[0]  # the CUDA library serves CPU sessions too
    np.testing.assert_allclose(got, on_cpu, rtol=cpu.RTOL, atol=cpu.ATOL)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op,make,case", CASES, ids=[f"{op}-{'x'.join(map(str, c))}" for op, _, c in CASES])
def test_half_precision_cuda_kernels_match_the_float32_reference(op, make, case, dtype):
    inputs, attrs, _ = make(*case)
    rounded = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in inputs.items()}
    _, _, ref = cpu.make_from(op, {k: v.astype(np.float32) if v.dtype == dtype else v for k, v in rounded.items()}, attrs)
    sess = cuda_session(kc.make_model(op, rounded, attrs, out_dtype=dtype, with_function=False))
    got = kc.run_typed(sess, rounded, ref.shape, dtype)
    tol = cpu.HALF_TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=tol, atol=tol)


def test_rope_cache_write_in_place_on_device():
    inputs, attrs, ref = cpu.rope_cache_write_case(4096, 1024, 128, 1, 1234)
    sess = cuda_session(kc.make_model("RopeCacheWrite", inputs, attrs))
    cache = ort.OrtValue.ortvalue_from_numpy(inputs["cache"].copy(), "cuda", 0)
    b = sess.io_binding()
    b.bind_ortvalue_input("new_kv", ort.OrtValue.ortvalue_from_numpy(inputs["new_kv"], "cuda", 0))
    b.bind_ortvalue_input("cache", cache)
    b.bind_cpu_input("kv_pos", inputs["kv_pos"])
    b.bind_ortvalue_output("Y", cache)
    sess.run_with_iobinding(b)
    np.testing.assert_allclose(cache.numpy(), ref, rtol=cpu.RTOL, atol=cpu.ATOL)


@pytest.mark.parametrize("op,inputs,attrs,match", cpu.BAD, ids=[f"{b[0]}-{k}" for k, b in enumerate(cpu.BAD)])
def test_bad_input_raises_an_ort_error_on_cuda(op, inputs, attrs, match):
    model = kc.make_model(op, inputs, attrs, unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: cuda_session(model).run(None, inputs), op, match)


def test_tiny_llama_fp16_decode_runs_the_fused_kernels_in_half_on_cuda():
    """precision="fp16": RopeCachedAttention, RMSNormLinear, RMSNormSwiGLU and LinearResidual run in half on CUDA with both KV
    caches stored in half; the logits follow the fp32 step on the CPU to half precision's rounding."""
    g = llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 32)
    params = default_parameters(g, 3)
    half = build_inference_session(g, "cuda", parameters=params, precision="fp16", cuda_graph=True, decode_layer=False)
    (plain,) = decode_sessions(("cpu", False, False))
    plan = half.plan()
    fused = ("RopeCachedAttention", "RMSNormLinear", "RMSNormSwiGLU", "LinearResidual")
    assert {plan.kernels()[op] for op in fused} == {"kernel"}
    for op in fused:
        assert plan.precision_of(op, "com.meganeura") == {"float16"}, (op, plan.precision_of(op, "com.meganeura"))
    assert not [p for p in plan.placement if "Memcpy" in p[2]], plan.placement
    for step, (got, want) in enumerate(feed_steps(half, plain, steps=6)):
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2, err_msg=f"step {step}")


def test_tiny_llama_fused_decode_step_replays_as_a_cuda_graph_and_matches_the_cpu():
    """The optimized decode step (RMSNormLinear, RopeCachedAttention, RMSNormSwiGLU, LinearResidual) captured once and replayed:
    every node on CUDA, the same logits as the unoptimized step on the CPU, step after step."""
    gpu, cpu_plain = decode_sessions(("cuda", True, True), ("cpu", False, False), decode_layer=False)
    assert {gpu.plan().kernels()[op] for op in ("RopeCachedAttention", "RMSNormLinear", "RMSNormSwiGLU", "LinearResidual")} == {"kernel"}
    assert {ep for *_, ep in gpu.plan().placement} == {"CUDAExecutionProvider"}, gpu.plan().placement
    for step, (got, want) in enumerate(feed_steps(gpu, cpu_plain, steps=6)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
