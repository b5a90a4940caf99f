"""RopeCachedAttention on the CPU: the kernel against an independent numpy reference (Rope, CacheWrite and
CachedAttention's float32/float64 references of kernel_cases) and against the op table's function body,
in float32, float16 and bfloat16, in place, and with bad input."""

from __future__ import annotations

import ctypes

import kernel_cases as kc
import numpy as np
import pytest
import rope_attention_cases as rc

LIB = kc.kernel_library("cpu")
pytestmark = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
TOL = 2e-5

# (max_seq, T, heads, kv_heads, head_dim, position(s))
CASES = [
    (16, 1, 9, 3, 64, 0),  # SmolLM2's heads, the first position
    (40, 1, 9, 3, 64, 39),  # the last position
    (24, 1, 4, 4, 32, 11),  # no GQA
    (20, 3, 4, 2, 16, 5),  # three rows (a short chunk)
    (12, 1, 8, 2, 24, [11, 0, 6]),  # a batch, one position per sequence; head_dim not a power of 2
    (10, 2, 4, 1, 8, [3, 8]),  # a batch of two-row steps
]
IDS = ["x".join(map(str, c[:5])) + f"@{c[5]}" for c in CASES]


def case(k: int, seed: int = 0):
    max_seq, t, h, kvh, hd, pos = CASES[k]
    return rc.make_case(np.random.default_rng(seed + k), max_seq, t, h, kvh, hd, pos), (h, kvh, hd)


def run(inputs, heads, library, dtype=np.float32):
    return kc.session(rc.make_model(inputs, *heads, dtype=dtype), library=library).run(None, inputs)


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_kernel_matches_numpy_and_the_function_body(k):
    inputs, heads = case(k)
    want = rc.reference(inputs, *heads)
    kc.assert_kernel_matches_reference_and_body(rc.OUTPUTS, run(inputs, heads, LIB), want, run(inputs, heads, None), TOL)


# Half types: the float32 reference of the rounded inputs with the rotated rows rounded as the unfused
# Rope stores them, the outputs compared at a few units in the last place of the type.
HALF = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}


@pytest.mark.parametrize("dtype", list(HALF), ids=["float16", "bfloat16"])
@pytest.mark.parametrize("k", [0, 3, 4], ids=[IDS[0], IDS[3], IDS[4]])
def test_half_precision_kernel_matches_the_float32_reference(k, dtype):
    inputs, heads = case(k, seed=10)
    exact = rc.rounded(inputs, dtype)
    want = rc.reference(exact, *heads, rounding=lambda x: x.astype(dtype).astype(np.float32))
    for name, g, w in zip(rc.OUTPUTS, run(inputs, heads, LIB, dtype), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=4 * HALF[dtype], atol=4 * HALF[dtype], err_msg=name)


def test_kernel_writes_the_caches_in_place_when_bound_to_their_buffers():
    inputs, heads = case(4)
    want = rc.reference(inputs, *heads)
    sess = kc.session(rc.make_model(inputs, *heads), library=LIB)
    lib = ctypes.CDLL(LIB)  # the handle ORT opened: the counter is shared
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    got = rc.run_in_place(sess, inputs)
    assert lib.MeganeuraCacheWriteFullCopies() == before, "the kernel copied a cache although output == input buffer"
    for name, g, w in zip(rc.OUTPUTS, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


def test_plain_run_leaves_its_input_caches_untouched():
    inputs, heads = case(1)
    originals = {k: v.copy() for k, v in inputs.items()}
    run(inputs, heads, LIB)
    for name, v in originals.items():
        np.testing.assert_array_equal(inputs[name], v, err_msg=name)


def _bad(**change):
    inputs, _ = case(0)
    inputs = {k: change.get(k, v) for k, v in inputs.items()}
    return inputs


f32 = np.zeros  # shapes only matter below
BAD = [
    (_bad(kv_pos=np.array([16], np.int64)), ["kv_pos 16", "max_seq 16"]),
    (_bad(kv_pos=np.array([-1], np.int64)), ["-1"]),
    (_bad(k_new=f32((1, 128), np.float32)), ["k_new", "[1, 192]", "[1, 128]"]),
    (_bad(v_new=f32((2, 192), np.float32)), ["v_new", "[1, 192]", "[2, 192]"]),
    (_bad(k_cache=f32((16, 128), np.float32)), ["[16, 128]", "num_kv_heads 3"]),
    (_bad(kv_pos=np.array([0, 1], np.int64)), ["kv_pos", "[2]"]),
]


@pytest.mark.parametrize("inputs,match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_an_ort_error_naming_the_op_and_the_values(inputs, match):
    model = rc.make_model(inputs, 9, 3, 64, unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=LIB).run(None, inputs), "RopeCachedAttention", match)


def test_odd_head_dim_is_refused_when_the_session_is_created():
    inputs = rc.make_case(np.random.default_rng(0), 8, 1, 2, 1, 9, 3)
    model = rc.make_model(inputs, 2, 1, 9, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=LIB), "RopeCachedAttention", ["head_dim", "9"])


def test_batched_fused_decode_session_updates_its_caches_in_place_and_matches_the_unfused_one():
    """4 sequences at their own positions: the graph after the fusion (as a CUDA session builds it), run on
    the CPU, binds each cache as one buffer (no full copy per step) and gives the unfused step's logits
    and caches."""
    from meganeura_onnx.models import llama

    from meganeura_onnx import build_inference_session
    from meganeura_onnx.init import default_parameters
    from meganeura_onnx.transforms.rewrite import optimize

    g = llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 32, 4)
    params = default_parameters(g, 4)
    compiled, report = optimize(g, stage="inference", decode_fusion=False, rope_attention=True)
    assert report.rules_fired.get("fuse_rope_cached_attention") == 2, report.summary()
    fused = build_inference_session(compiled, "cpu", parameters=params, optimize=False)
    plain = build_inference_session(g, "cpu", parameters=params, optimize=False)
    assert fused.plan().kernels().get("RopeCachedAttention") == "kernel" and len(fused.inplace_state) == 4
    lib = ctypes.CDLL(LIB)
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    rc.decode_in_lockstep(fused, plain, np.array([0, 5, 2, 9]), steps=4, vocab=256)
    assert lib.MeganeuraCacheWriteFullCopies() == before
    for name in fused.inplace_state:
        np.testing.assert_allclose(fused.read_state(name), plain.read_state(name), rtol=1e-5, atol=1e-5, err_msg=name)


def test_optimizing_a_fused_graph_again_keeps_its_cache_writes():
    """The fused graph's cache nodes are read by no output; a second optimize (a session built with
    optimize=True from it) must not rebuild the graph from its outputs and lose them."""
    from meganeura_onnx.models import llama

    from meganeura_onnx.transforms.rewrite import optimize

    g = llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 16)
    once, _ = optimize(g, stage="inference", decode_layer=False)  # the layers as five nodes (one DecodeLayer: test_decode_layer_fusion)
    twice, report = optimize(once, stage="inference")
    assert twice is once and report.kept_input
    assert sum(n.op == "rope_cached_attention" for n in twice.nodes()) == 3 * llama.PRESETS["tiny"].num_hidden_layers
