"""QKVRopeCacheWrite on CUDA: the kernel against the independent numpy reference (float32, float16, bfloat16;
SmolLM2's 9/3 heads of 64 at 128 rows, a batch at per-sequence positions), q_rot bit-equal to the CUDA Rope
kernel, in place on device buffers, bad input refused with an error naming the op, an invalid position
guarded on the device, and a tiny LLaMA prefill on CUDA replayed as a CUDA graph at two positions against
the unfused CPU prefill.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import ctypes

import kernel_cases as kc
import numpy as np
import pytest
import qkv_rope_cases as qc
from meganeura_onnx.models import llama

from meganeura_onnx import build_inference_session
from meganeura_onnx.init import default_parameters

pytestmark = kc.CUDA_SKIPS
TOL = 2e-5
HALF = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}

# (max_seq, T, heads, kv_heads, head_dim, position(s))
CASES = [
    (256, 128, 9, 3, 64, 0),  # SmolLM2's prefill of 128 rows
    (256, 128, 9, 3, 64, 128),  # ending at the last row
    (256, 128, 9, 3, 64, [0, 100, 128, 7]),  # a batch, one position per sequence
    (40, 17, 8, 2, 96, 23),  # head_dim 96, an odd row count
]
IDS = ["x".join(map(str, c[:5])) + f"@{c[5] if isinstance(c[5], int) else len(c[5])}" for c in CASES]


def case(k: int, seed: int = 0):
    max_seq, t, h, kvh, hd, pos = CASES[k]
    return qc.make_case(np.random.default_rng(seed + k), max_seq, t, h, kvh, hd, pos), (h, kvh, hd)


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_cuda_kernel_matches_numpy_and_runs_on_cuda(k, tmp_path):
    inputs, heads = case(k)
    sess = kc.cuda_session(qc.make_model(inputs, *heads), profile_prefix=str(tmp_path / "cuda"))
    got = sess.run(None, inputs)
    ran = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == "QKVRopeCacheWrite"]
    assert ran == [("QKVRopeCacheWrite", "CUDAExecutionProvider")], ran
    for name, g, w in zip(qc.OUTPUTS, got, qc.reference(inputs, *heads), strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


@pytest.mark.parametrize("dtype", list(HALF), ids=["float16", "bfloat16"])
@pytest.mark.parametrize("k", [1, 2], ids=[IDS[1], IDS[2]])
def test_half_precision_cuda_kernel_matches_the_float32_reference(k, dtype):
    inputs, heads = case(k, seed=10)
    exact = {n: v.astype(dtype).astype(np.float32) if v.dtype == np.float32 else v for n, v in inputs.items()}
    want = qc.reference(exact, *heads, rounding=lambda x: x.astype(dtype).astype(np.float32))
    got = kc.cuda_session(qc.make_model(inputs, *heads, dtype=dtype, with_function=False)).run(None, inputs)
    for name, g, w in zip(qc.OUTPUTS, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=4 * HALF[dtype], atol=4 * HALF[dtype], err_msg=name)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), *HALF], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("k", [1, 2], ids=[IDS[1], IDS[2]])
def test_q_rot_is_bit_equal_to_the_cuda_rope_kernel(k, dtype):
    inputs, heads = case(k, seed=40)
    h, _, hd = heads
    q_rot = kc.cuda_session(qc.make_model(inputs, *heads, dtype=dtype, with_function=False)).run(None, inputs)[0]
    q = np.ascontiguousarray(inputs["qkv"][..., : h * hd])
    rope = kc.cuda_session(qc.make_rope_model(q, hd, dtype)).run(None, {"x": q, "kv_pos": inputs["kv_pos"]})[0]
    np.testing.assert_array_equal(q_rot, rope)


@pytest.mark.parametrize("k", [0, 2], ids=[IDS[0], IDS[2]])
def test_cuda_kernel_writes_the_caches_in_place_on_device_buffers(k):
    inputs, heads = case(k, seed=20)
    sess = kc.cuda_session(qc.make_model(inputs, *heads))
    lib = ctypes.CDLL(kc.CUDA_LIB)
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    got = qc.run_in_place(sess, inputs, heads[0], heads[2], "cuda")
    assert lib.MeganeuraCacheWriteFullCopies() == before, "the kernel copied a cache although output == input buffer"
    for name, g, w in zip(qc.OUTPUTS, got, qc.reference(inputs, *heads), strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


def _bad(**change):
    inputs, _ = case(0)
    return {n: change.get(n, v) for n, v in inputs.items()}


BAD = [
    (_bad(kv_pos=np.array([129], np.int64)), ["kv_pos[0] = 129", "max_seq 256"]),
    (_bad(kv_pos=np.array([np.iinfo(np.int64).max], np.int64)), [str(np.iinfo(np.int64).max)]),
    (_bad(qkv=np.zeros((128, 900), np.float32)), ["qkv", "[128, 900]", "960"]),
    (_bad(v_cache=np.zeros((255, 192), np.float32)), ["v_cache", "[255, 192]"]),
]


@pytest.mark.parametrize("inputs,match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_an_ort_error_naming_the_op_and_the_values(inputs, match):
    model = qc.make_model(inputs, 9, 3, 64, unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: kc.cuda_session(model).run(None, inputs), "QKVRopeCacheWrite", match)
    sess = kc.cuda_session(model)  # on device buffers: run_with_iobinding's RuntimeError
    kc.assert_ort_error(lambda: qc.run_in_place(sess, inputs, 9, 64, "cuda"), "QKVRopeCacheWrite", match)


def test_invalid_position_without_checks_gives_nan_for_its_sequence_and_writes_nothing():
    """check_positions=0 (what a Session sets): no read-back; sequence 1's position is past the cache, so its
    q_rot is NaN and its caches stay as they were; the others are computed as usual."""
    import onnx

    inputs, heads = case(2, seed=30)
    inputs["kv_pos"] = np.array([0, 129, 128, 7], np.int64)
    proto = onnx.load_from_string(qc.make_model(inputs, *heads))
    proto.graph.node[-1].attribute.append(onnx.helper.make_attribute("check_positions", 0))
    q_rot, k_cache, v_cache = kc.cuda_session(proto.SerializeToString()).run(None, inputs)
    assert np.isnan(q_rot[1]).all() and not np.isnan(np.delete(q_rot, 1, axis=0)).any()
    np.testing.assert_array_equal(k_cache[1], inputs["k_cache"][1])
    np.testing.assert_array_equal(v_cache[1], inputs["v_cache"][1])
    valid = {k: np.delete(v, 1, axis=0) for k, v in inputs.items()}
    for name, g, w in zip(qc.OUTPUTS, (q_rot, k_cache, v_cache), qc.reference(valid, *heads), strict=True):
        np.testing.assert_allclose(np.delete(g, 1, axis=0), w, rtol=TOL, atol=TOL, err_msg=name)


@pytest.mark.parametrize("batch", [None, 3], ids=["one-sequence", "batch-3"])
def test_fused_prefill_replays_as_a_cuda_graph_and_matches_the_unfused_cpu_prefill(batch):
    """The tiny LLaMA's 24-row prefill on CUDA (one QKVRopeCacheWrite per layer, caches in place), captured
    once and replayed at a second position, against the CPU prefill with the separate ops."""
    cfg = llama.PRESETS["tiny"]
    g = llama.build_graph(cfg, "prefill", 24, 64, batch)
    params = default_parameters(g, 11)
    gpu = build_inference_session(g, "cuda", parameters=params, cuda_graph=True)
    cpu = build_inference_session(g, "cpu", parameters=params, optimize=False)
    ran = [op for _, _, op, _ in gpu.plan().placement]
    assert ran.count("QKVRopeCacheWrite") == cfg.num_hidden_layers and not {"Rope", "CacheWrite", "RopeCacheWrite"} & set(ran), ran
    rng = np.random.default_rng(2)
    n = batch or 1
    for start in ([0, 5, 9][:n], [24, 30, 17][:n]):  # the second prefill continues the first: it reads the rows written
        tokens = rng.integers(0, cfg.vocab_size, 24 * n).tolist()
        for s in (gpu, cpu):
            s.set_input_u32("input_ids", tokens)
            s.set_input_u32("kv_pos", start)
            s.set_input_u32("last_row", [b * 24 + 23 for b in range(n)])  # flat row indexes
            s.step()
        np.testing.assert_allclose(gpu.read_output_by_index(0), cpu.read_output_by_index(0), rtol=1e-4, atol=1e-4, err_msg=f"at {start}")
    for name in cpu.inplace_state:
        np.testing.assert_allclose(gpu.read_state(name), cpu.read_state(name), rtol=1e-4, atol=1e-4, err_msg=name)
