"""DecodeLayer on CUDA: the CUDA kernel against the CPU kernel (the CUDA library serves both) and the
independent numpy reference of decode_layer_cases, in float32, float16 and bfloat16, one sequence and a
batch (SmolLM2's layer, long caches at their last row, several rows per sequence, [in, out] weights), in
place on device buffers, bad input; and the tiny LLaMA's greedy decode on CUDA with the decode-layer
fusion on equal to it off (the five fused kernels per layer).

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import ctypes

import decode_layer_cases as dc
import kernel_cases as kc
import numpy as np
import pytest
from meganeura_onnx.models import llama

from meganeura_onnx.generation import generate, generate_batch

pytestmark = kc.CUDA_SKIPS
TOL = 1e-4  # float32: the CUDA kernel's sums run in another order than the CPU kernel's
HALF = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}

# (max_seq, rows per sequence, D, heads, kv_heads, head_dim, intermediate, position(s), trans_b)
CASES = [
    (4096, 1, 576, 9, 3, 64, 1536, 4095, True),  # SmolLM2-135M's layer, a long cache at its last row
    (300, 1, 576, 9, 3, 64, 1536, 0, True),  # the first position
    (64, 1, 64, 4, 2, 16, 96, 40, False),  # [in, out] weights
    (400, 3, 128, 8, 2, 16, 256, 200, True),  # three rows
    (1000, 1, 576, 9, 3, 64, 1536, [999, 0, 500, 77], True),  # a batch, one position per sequence
    (128, 1, 576, 9, 3, 64, 1536, [5, 127, 64, 0, 1, 100, 31, 126], True),  # SmolLM2 at batch 8
    (50, 2, 64, 4, 2, 16, 96, [48, 3], False),  # a batch of two-row steps, one ending at max_seq
]
IDS = [f"D{c[2]}-s{c[0]}-T{c[1]}@{c[7] if isinstance(c[7], int) else len(c[7])}-{'nk' if c[8] else 'kn'}" for c in CASES]


def case(k: int, seed: int = 0):
    max_seq, s, d, h, kvh, hd, inter, pos, trans_b = CASES[k]
    return dc.make_case(np.random.default_rng(seed + k), max_seq, s, d, h, kvh, hd, inter, pos, trans_b), (h, kvh, hd, trans_b)


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_cuda_kernel_matches_the_cpu_kernel_and_numpy_and_runs_on_cuda(k, tmp_path):
    inputs, heads = case(k)
    model = dc.make_model(inputs, dc.attrs(*heads))
    sess = kc.cuda_session(model, profile_prefix=str(tmp_path / "cuda"))
    got = sess.run(None, inputs)
    ran = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == "DecodeLayer"]
    assert ran == [("DecodeLayer", "CUDAExecutionProvider")], ran
    on_cpu = kc.session(model, library=kc.CUDA_LIB).run(None, inputs)  # the CUDA library's CPU kernel
    for name, g, c, w in zip(dc.OUTPUTS, got, on_cpu, dc.reference(inputs, *heads), strict=True):
        np.testing.assert_allclose(g, c, rtol=TOL, atol=TOL, err_msg=f"CUDA vs CPU kernel: {name}")
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=f"CUDA kernel vs numpy: {name}")


@pytest.mark.parametrize("dtype", list(HALF), ids=["float16", "bfloat16"])
@pytest.mark.parametrize("k", [0, 3, 4, 6], ids=[IDS[i] for i in (0, 3, 4, 6)])
def test_half_precision_cuda_kernel_matches_the_cpu_kernel_and_the_rounded_reference(k, dtype):
    inputs, heads = case(k, seed=10)
    model = dc.make_model(inputs, dc.attrs(*heads), dtype=dtype, with_function=False)
    got = kc.cuda_session(model).run(None, inputs)
    on_cpu = kc.session(model, library=kc.CUDA_LIB).run(None, inputs)
    exact = {n: v.astype(dtype).astype(np.float32) if v.dtype == np.float32 else v for n, v in inputs.items()}
    want = dc.reference(exact, *heads, rounding=lambda a: np.asarray(a).astype(dtype).astype(np.float32))
    tol = 4 * HALF[dtype]  # an intermediate may round the other way: a few units in the last place
    for name, g, c, w in zip(dc.OUTPUTS, got, on_cpu, want, strict=True):
        np.testing.assert_allclose(g, c, rtol=tol, atol=tol, err_msg=f"CUDA vs CPU kernel: {name}")
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"CUDA kernel vs numpy: {name}")


@pytest.mark.parametrize("k", [0, 5], ids=[IDS[0], IDS[5]])
def test_cuda_kernel_writes_the_caches_in_place_on_device_buffers(k):
    inputs, heads = case(k, seed=20)
    sess = kc.cuda_session(dc.make_model(inputs, dc.attrs(*heads)))
    lib = ctypes.CDLL(kc.CUDA_LIB)
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    got = dc.run_in_place(sess, inputs, "cuda")
    assert lib.MeganeuraCacheWriteFullCopies() == before, "the kernel copied a cache although output == input buffer"
    for name, g, w in zip(dc.OUTPUTS, got, dc.reference(inputs, *heads), strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


def _bad(k: int, **change):
    inputs, heads = case(k)
    return {name: change.get(name, v) for name, v in inputs.items()}, heads


BAD = [
    (_bad(2, kv_pos=np.array([64], np.int64)), ["kv_pos 64", "max_seq 64"]),
    (_bad(4, kv_pos=np.array([999, 1000, 0, 0], np.int64)), ["kv_pos[1] = 1000", "max_seq 1000"]),
    (_bad(2, w_q=np.zeros((64, 32), np.float32)), ["w_q", "[64, 32]"]),
]


@pytest.mark.parametrize("bad,match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_an_ort_error_on_cuda(bad, match):
    inputs, heads = bad
    model = dc.make_model(inputs, dc.attrs(*heads), unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: kc.cuda_session(model).run(None, inputs), "DecodeLayer", match)


# -- whole decode steps: the fusion on and off ---------------------------------------------------------
def _runners(batch: int | None, precision: str = "fp32"):
    """Tiny-LLaMA runners on CUDA with the same random weights: DecodeLayer per layer, and the five kernels."""
    cfg = llama.PRESETS["tiny"]
    kw = {"max_seq": 48, "prefill_chunk": 8, "device": "cuda", "seed": 5, "precision": precision}
    if batch is not None:
        kw["batch"] = batch
    cls = llama.LlamaRunner if batch is None else llama.LlamaBatchRunner
    on, off = cls(cfg, decode_layer=True, **kw), cls(cfg, decode_layer=False, **kw)
    layers = cfg.num_hidden_layers
    ran_on = [op for _, _, op, ep in on.decoder.plan().placement if ep == "CUDAExecutionProvider"]
    ran_off = [op for _, _, op, _ in off.decoder.plan().placement]
    assert ran_on.count("DecodeLayer") == layers and not {"RopeCachedAttention", "RMSNormSwiGLU", "LinearResidual"} & set(ran_on)
    assert "DecodeLayer" not in ran_off and ran_off.count("RopeCachedAttention") == layers
    return on, off


@pytest.mark.parametrize("batch", [None, 4], ids=["one-sequence", "batch-4"])
def test_tiny_llama_greedy_decode_on_cuda_with_the_fusion_equals_it_without(batch):
    on, off = _runners(batch)
    prompts = [[3, 17, 42, 7, 99], [5, 6], [200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [42]][: batch or 1]
    if batch is None:
        tokens_on, tokens_off = list(generate(on, prompts[0], 24)), list(generate(off, prompts[0], 24))
    else:
        tokens_on, tokens_off = generate_batch(on, prompts, 24), generate_batch(off, prompts, 24)
    assert tokens_on == tokens_off
    for step in range(3):  # and the logits themselves, a few steps on
        last = [t[-1] for t in tokens_on] if batch else tokens_on[-1]
        a, b = on.decode(last), off.decode(last)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_tiny_llama_half_decode_on_cuda_with_the_fusion_follows_it_without(precision):
    on, off = _runners(4, precision)
    assert on.decoder.plan().precision_of("DecodeLayer", "com.meganeura") == {{"fp16": "float16", "bf16": "bfloat16"}[precision]}
    prompts = [[3, 17, 42], [5, 6], [200, 1, 2, 3], [42]]
    a, b = on.prefill(prompts), off.prefill(prompts)
    tokens = np.argmax(b, axis=-1).tolist()
    for step in range(6):
        a, b = on.decode(tokens), off.decode(tokens)
        np.testing.assert_allclose(a, b, rtol=3e-2, atol=3e-2, err_msg=f"step {step}")  # half rounding of different sum orders
        tokens = np.argmax(b, axis=-1).tolist()
