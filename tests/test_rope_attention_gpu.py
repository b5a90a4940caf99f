"""RopeCachedAttention on CUDA: the kernel against the independent numpy reference (float32, float16,
bfloat16; SmolLM2's 9/3 heads of 64 and 32/8 heads of 128; long caches split over many blocks, a batch at
per-sequence positions, T > 1, the two-kernel path of other head dims), in place on device buffers, an
invalid position guarded on the device, and whole decode steps (one sequence and a batch) replayed as a
CUDA graph matching the unfused CPU step.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import ctypes

import kernel_cases as kc
import numpy as np
import pytest
import rope_attention_cases as rc
from meganeura_onnx.models import llama

from meganeura_onnx import build_inference_session
from meganeura_onnx.init import default_parameters

pytestmark = kc.CUDA_SKIPS
TOL = 2e-5
HALF = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}

# (max_seq, T, heads, kv_heads, head_dim, position(s))
CASES = [
    (4096, 1, 9, 3, 64, 4095),  # SmolLM2, the last position: many splits, the new row in the last one
    (300, 1, 9, 3, 64, 0),  # the first position
    (8192, 1, 32, 8, 128, 5000),  # the new row inside one split of many
    (2048, 1, 32, 4, 128, 1023),  # 8 query heads per KV head: two blocks per KV head write the row
    (1000, 1, 9, 3, 64, [999, 0, 500, 77]),  # a batch, one position per sequence
    (400, 3, 8, 2, 64, 200),  # three new rows
    (300, 1, 8, 2, 96, 150),  # head_dim 96: the two-kernel path
]
IDS = ["x".join(map(str, c[:5])) + f"@{c[5] if isinstance(c[5], int) else len(c[5])}" for c in CASES]


def case(k: int, seed: int = 0):
    max_seq, t, h, kvh, hd, pos = CASES[k]
    return rc.make_case(np.random.default_rng(seed + k), max_seq, t, h, kvh, hd, pos), (h, kvh, hd)


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_cuda_kernel_matches_numpy_and_runs_on_cuda(k, tmp_path):
    inputs, heads = case(k)
    sess = kc.cuda_session(rc.make_model(inputs, *heads), profile_prefix=str(tmp_path / "cuda"))
    got = sess.run(None, inputs)
    ran = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == "RopeCachedAttention"]
    assert ran == [("RopeCachedAttention", "CUDAExecutionProvider")], ran
    for name, g, w in zip(rc.OUTPUTS, got, rc.reference(inputs, *heads), strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


@pytest.mark.parametrize("dtype", list(HALF), ids=["float16", "bfloat16"])
@pytest.mark.parametrize("k", [0, 2, 4, 6], ids=[IDS[i] for i in (0, 2, 4, 6)])
def test_half_precision_cuda_kernel_matches_the_float32_reference(k, dtype):
    inputs, heads = case(k, seed=10)
    want = rc.reference(rc.rounded(inputs, dtype), *heads, rounding=lambda x: x.astype(dtype).astype(np.float32))
    got = kc.cuda_session(rc.make_model(inputs, *heads, dtype=dtype, with_function=False)).run(None, inputs)
    for name, g, w in zip(rc.OUTPUTS, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=4 * HALF[dtype], atol=4 * HALF[dtype], err_msg=name)


@pytest.mark.parametrize("k", [0, 4, 6], ids=[IDS[i] for i in (0, 4, 6)])
def test_cuda_kernel_writes_the_caches_in_place_on_device_buffers(k):
    inputs, heads = case(k, seed=20)
    sess = kc.cuda_session(rc.make_model(inputs, *heads))
    lib = ctypes.CDLL(kc.CUDA_LIB)
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    got = rc.run_in_place(sess, inputs, "cuda")
    assert lib.MeganeuraCacheWriteFullCopies() == before, "the kernel copied a cache although output == input buffer"
    for name, g, w in zip(rc.OUTPUTS, got, rc.reference(inputs, *heads), strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


def test_invalid_position_without_checks_gives_nan_for_its_sequence_and_writes_nothing():
    """check_positions=0 (what a Session sets): no read-back; sequence 1's position is past the cache,
    so its output is NaN and its caches stay as they were, the others are computed as usual."""
    import onnx

    inputs, heads = case(4, seed=30)
    inputs["kv_pos"] = np.array([999, 1000, 500, 77], np.int64)
    proto = onnx.load_from_string(rc.make_model(inputs, *heads))
    proto.graph.node[-1].attribute.append(onnx.helper.make_attribute("check_positions", 0))
    out, k_cache, v_cache = kc.cuda_session(proto.SerializeToString()).run(None, inputs)
    assert np.isnan(out[1]).all() and not np.isnan(np.delete(out, 1, axis=0)).any()
    np.testing.assert_array_equal(k_cache[1], inputs["k_cache"][1])
    np.testing.assert_array_equal(v_cache[1], inputs["v_cache"][1])
    valid = {k: np.delete(v, 1, axis=0) for k, v in inputs.items()}
    for name, g, w in zip(rc.OUTPUTS, (out, k_cache, v_cache), rc.reference(valid, *heads), strict=True):
        np.testing.assert_allclose(np.delete(g, 1, axis=0), w, rtol=TOL, atol=TOL, err_msg=name)


@pytest.mark.parametrize("batch", [None, 4], ids=["one-sequence", "batch-4"])
def test_fused_decode_step_replays_as_a_cuda_graph_and_matches_the_unfused_cpu_step(batch):
    """The tiny LLaMA's decode step on CUDA (RopeCachedAttention in every layer, caches in place),
    captured once and replayed with positions changing on the device, against the CPU step with the
    separate Rope / CacheWrite / CachedAttention ops."""
    cfg = llama.PRESETS["tiny"]
    g = llama.build_graph(cfg, "decode", 1, 32, batch)
    params = default_parameters(g, 11)
    gpu = build_inference_session(g, "cuda", parameters=params, cuda_graph=True, decode_layer=False)  # the layers' five kernels
    cpu = build_inference_session(g, "cpu", parameters=params, optimize=False)
    ran = [op for _, _, op, _ in gpu.plan().placement]
    assert ran.count("RopeCachedAttention") == cfg.num_hidden_layers and not {"Rope", "CacheWrite", "RopeCacheWrite"} & set(ran), ran
    rng = np.random.default_rng(2)
    starts = np.array([0] if batch is None else [0, 3, 7, 1])
    for step in range(6):
        tokens, positions = rng.integers(0, cfg.vocab_size, len(starts)).tolist(), (starts + step).tolist()
        for s in (gpu, cpu):
            s.set_input_u32("input_ids", tokens)
            s.set_input_u32("kv_pos", positions)
            s.step()
        np.testing.assert_allclose(gpu.read_output_by_index(0), cpu.read_output_by_index(0), rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
    for name in cpu.inplace_state:
        np.testing.assert_allclose(gpu.read_state(name), cpu.read_state(name), rtol=1e-4, atol=1e-4, err_msg=name)
