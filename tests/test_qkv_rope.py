"""QKVRopeCacheWrite on the CPU: the kernel against an independent numpy reference (Rope and CacheWrite's
float32 references of kernel_cases) and against the op table's function body, in float32, float16 and
bfloat16; q_rot bit-equal to the Rope kernel's output; the caches written in place at the given rows only;
bad input refused with an ONNX Runtime error naming the op."""

from __future__ import annotations

import ctypes

import kernel_cases as kc
import numpy as np
import pytest
import qkv_rope_cases as qc

LIB = kc.kernel_library("cpu")
pytestmark = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
TOL = 2e-5

# (max_seq, T, heads, kv_heads, head_dim, position(s))
CASES = [
    (160, 128, 9, 3, 64, 0),  # SmolLM2's heads, a 128-row prefill at the start
    (200, 128, 9, 3, 64, 72),  # the same, ending at the last row
    (24, 5, 4, 4, 32, 11),  # no GQA
    (12, 3, 8, 2, 24, [9, 0, 6]),  # a batch, one position per sequence; head_dim not a power of 2
    (10, 4, 4, 1, 8, [3, 6]),  # a batch, the second ending at the last row
]
IDS = ["x".join(map(str, c[:5])) + f"@{c[5]}" for c in CASES]


def case(k: int, seed: int = 0):
    max_seq, t, h, kvh, hd, pos = CASES[k]
    return qc.make_case(np.random.default_rng(seed + k), max_seq, t, h, kvh, hd, pos), (h, kvh, hd)


def run(inputs, heads, library, dtype=np.float32):
    return kc.session(qc.make_model(inputs, *heads, dtype=dtype), library=library).run(None, inputs)


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_kernel_matches_numpy_and_the_function_body(k):
    inputs, heads = case(k)
    want = qc.reference(inputs, *heads)
    kc.assert_kernel_matches_reference_and_body(qc.OUTPUTS, run(inputs, heads, LIB), want, run(inputs, heads, None), TOL)


HALF = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}
TYPES = [np.dtype(np.float32), *HALF]
TYPE_IDS = ["float32", "float16", "bfloat16"]


@pytest.mark.parametrize("dtype", list(HALF), ids=TYPE_IDS[1:])
@pytest.mark.parametrize("k", [0, 3], ids=[IDS[0], IDS[3]])
def test_half_precision_kernel_matches_the_float32_reference(k, dtype):
    """The float32 reference of the rounded inputs with the rotated rows rounded as Rope stores them."""
    inputs, heads = case(k, seed=10)
    exact = {n: v.astype(dtype).astype(np.float32) if v.dtype == np.float32 else v for n, v in inputs.items()}
    want = qc.reference(exact, *heads, rounding=lambda x: x.astype(dtype).astype(np.float32))
    for name, g, w in zip(qc.OUTPUTS, run(inputs, heads, LIB, dtype), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=4 * HALF[dtype], atol=4 * HALF[dtype], err_msg=name)


@pytest.mark.parametrize("dtype", TYPES, ids=TYPE_IDS)
@pytest.mark.parametrize("k", [1, 3], ids=[IDS[1], IDS[3]])
def test_q_rot_is_bit_equal_to_the_rope_kernel_and_the_v_rows_are_copied_exactly(k, dtype):
    inputs, heads = case(k, seed=20)
    h, kvh, hd = heads
    q_rot, _, v_cache = run(inputs, heads, LIB, dtype)
    q = inputs["qkv"][..., : h * hd]
    rope = kc.session(qc.make_rope_model(q, hd, dtype), library=LIB).run(None, {"x": q, "kv_pos": inputs["kv_pos"]})[0]
    np.testing.assert_array_equal(q_rot, rope)
    v = inputs["qkv"][..., (h + kvh) * hd :].astype(dtype).astype(np.float32)
    for b, p in enumerate(int(x) for x in inputs["kv_pos"]):
        rows = (v_cache if v_cache.ndim == 2 else v_cache[b])[p : p + q.shape[-2]]
        np.testing.assert_array_equal(rows, v if v.ndim == 2 else v[b])


@pytest.mark.parametrize("k", [1, 4], ids=[IDS[1], IDS[4]])
def test_kernel_writes_the_caches_in_place_at_the_given_rows_only(k):
    inputs, heads = case(k)
    want = qc.reference(inputs, *heads)
    sess = kc.session(qc.make_model(inputs, *heads), library=LIB)
    lib = ctypes.CDLL(LIB)  # the handle ORT opened: the counter is shared
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    got = qc.run_in_place(sess, inputs, heads[0], heads[2])
    assert lib.MeganeuraCacheWriteFullCopies() == before, "the kernel copied a cache although output == input buffer"
    for name, g, w in zip(qc.OUTPUTS, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)
    t = inputs["qkv"].shape[-2]
    for name, cache in (("k_cache", got[1]), ("v_cache", got[2])):  # every other row as it was, bit for bit
        for b, p in enumerate(int(x) for x in inputs["kv_pos"]):
            old, new = (inputs[name], cache) if cache.ndim == 2 else (inputs[name][b], cache[b])
            kept = np.ones(old.shape[0], bool)
            kept[p : p + t] = False
            np.testing.assert_array_equal(new[kept], old[kept], err_msg=name)
            assert not np.array_equal(new[~kept], old[~kept]), name


def test_plain_run_leaves_its_input_caches_untouched():
    inputs, heads = case(2)
    originals = {k: v.copy() for k, v in inputs.items()}
    run(inputs, heads, LIB)
    for name, v in originals.items():
        np.testing.assert_array_equal(inputs[name], v, err_msg=name)


def _bad(k: int = 0, **change):
    inputs, _ = case(k)
    return {n: change.get(n, v) for n, v in inputs.items()}


I64_MAX = np.iinfo(np.int64).max
BAD = [  # (inputs, heads, strings the message contains)
    (_bad(kv_pos=np.array([33], np.int64)), (9, 3, 64), ["kv_pos[0] = 33", "max_seq 160"]),
    (_bad(kv_pos=np.array([-1], np.int64)), (9, 3, 64), ["-1"]),
    (_bad(kv_pos=np.array([I64_MAX], np.int64)), (9, 3, 64), [str(I64_MAX)]),
    (_bad(qkv=np.zeros((128, 900), np.float32)), (9, 3, 64), ["qkv", "[128, 900]", "960"]),
    (_bad(k_cache=np.zeros((160, 128), np.float32)), (9, 3, 64), ["k_cache", "[160, 128]", "num_kv_heads 3"]),
    (_bad(v_cache=np.zeros((161, 192), np.float32)), (9, 3, 64), ["v_cache", "[161, 192]", "[160, 192]"]),
    (_bad(kv_pos=np.array([0, 1], np.int64)), (9, 3, 64), ["kv_pos", "[2]"]),
    (_bad(qkv=np.zeros((161, 960), np.float32)), (9, 3, 64), ["161 rows", "max_seq 160"]),
    (_bad(3, kv_pos=np.array([9, 10, 0], np.int64)), (8, 2, 24), ["kv_pos[1] = 10", "max_seq 12"]),
    (_bad(3, k_cache=np.zeros((2, 12, 48), np.float32), v_cache=np.zeros((2, 12, 48), np.float32)), (8, 2, 24), ["k_cache", "[2, 12, 48]"]),
]


@pytest.mark.parametrize("inputs,heads,match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_an_ort_error_naming_the_op_and_the_values(inputs, heads, match):
    model = qc.make_model(inputs, *heads, unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=LIB).run(None, inputs), "QKVRopeCacheWrite", match)


def test_odd_head_dim_is_refused_when_the_session_is_created():
    inputs = qc.make_case(np.random.default_rng(0), 8, 2, 2, 1, 9, 3)
    model = qc.make_model(inputs, 2, 1, 9, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=LIB), "QKVRopeCacheWrite", ["head_dim", "9"])


def test_nodes_on_the_same_inputs_with_another_theta_export_as_their_own_onnx_node():
    """The index nodes of one ``qkv_rope_cache_write`` share an ONNX node; a second op on the same inputs
    with another theta must not be folded into it (it rotates by other angles)."""
    from meganeura_onnx import Graph
    from meganeura_onnx.export import to_model

    g = Graph()
    qkv = g.input("qkv", [4, (3 + 2) * 8])
    caches = [g.input(name, [8, 8]) for name in ("k_cache", "v_cache")]
    pos = g.input_u32("kv_pos", [1])
    first = g.qkv_rope_cache_write(qkv, *caches, pos, 3, 1, 8, 10000.0)
    second = g.qkv_rope_cache_write(qkv, *caches, pos, 3, 1, 8, 500000.0)
    g.set_outputs({"q_a": first[0], "k_a": first[1], "q_b": second[0]})
    model, _ = to_model(g)
    thetas = sorted(a.f for n in model.graph.node if n.op_type == "QKVRopeCacheWrite" for a in n.attribute if a.name == "theta")
    assert thetas == [10000.0, 500000.0]
