"""CPU kernels of the com.meganeura custom ops: results, kernel placement, in-place CacheWrite, bad input.

Skips when the library is not built (``make -C custom_ops``) or onnxruntime is missing.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import kernel_cases as kc  # noqa: E402

from meganeura_onnx.ops.rope import rope_ref as rope_table_ref  # noqa: E402

LIB = kc.kernel_library("cpu")
pytestmark = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops)")

RTOL = ATOL = 1e-5
# Attention sums exp(scores) over up to ~600 cached rows in float32 in a different order than the
# float64 reference / the function body's MatMul+Softmax: allow 1e-4.
ATTN_TOL = 1e-4

rng = np.random.default_rng(1234)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ cases
ROPE_CASES = [  # (S, D, head_dim, static offset, dynamic offset or None for an absent input)
    (1, 4 * 64, 64, 0, 0),
    (7, 2 * 128, 128, 3, 5),
    (5, 16, 8, 0, None),
    (33, 8 * 64, 64, 0, 17),
    (4, 128, 128, 100, 250),
]
CACHE_WRITE_CASES = [  # (max_seq, dim, T, kv_pos)
    (16, 2 * 64, 1, 0),
    (16, 128, 1, 15),
    (16, 256, 4, 5),
    (8, 64, 8, 0),
    (32, 64, 3, 29),
]
ATTN_CASES = [  # (T, H, KVH, head_dim, max_seq, kv_pos)
    (1, 4, 2, 64, 32, 0),
    (1, 8, 2, 128, 32, 31),
    (5, 4, 1, 64, 40, 10),
    (3, 2, 2, 128, 3, 0),
    (1, 32, 8, 128, 600, 599),
    (6, 6, 3, 64, 64, 58),
    (7, 12, 4, 64, 1100, 1000),  # cache split into chunks, T > 1
    (1, 16, 2, 32, 3000, 2999),  # chunks, head group of 8
    (1, 4, 2, 40, 70, 69),  # head_dim of 32 + 8 lanes (the AVX2 form's partial blocks), two tiles of rows
    (2, 6, 3, 12, 140, 130),  # head_dim below 32 and no multiple of 8: lanes one at a time
]
# Batches of sequences, each at its own position (the [B, ...] forms with [B] positions).
BATCH_ROPE_CASES = [  # (B, S, D, head_dim, static offset, dynamic offsets)
    (3, 1, 4 * 64, 64, 0, (7, 0, 4095)),
    (2, 5, 2 * 128, 128, 3, (11, 2)),
]
INVERSE_ROPE_CASES = [  # (B, S, D, head_dim, static offset, shared dynamic offset): the train step's backward form
    (8, 7, 3 * 64, 64, 0, 0),
    (2, 5, 2 * 128, 128, 3, 40),
]
BATCH_CACHE_WRITE_CASES = [  # (B, max_seq, dim, T, kv_pos per sequence)
    (3, 16, 2 * 64, 1, (0, 15, 7)),
    (2, 9, 64, 3, (6, 0)),
]
BATCH_ATTN_CASES = [  # (B, T, H, KVH, head_dim, max_seq, kv_pos per sequence)
    (4, 1, 8, 2, 64, 40, (39, 0, 17, 5)),
    (2, 3, 4, 1, 128, 1100, (1000, 12)),  # one long sequence (chunks), one short
    (3, 1, 32, 8, 128, 600, (599, 300, 1)),
]
SCATTER_CASES = [  # (N, D, num_rows, index dtype)
    (10, 64, 5, np.int64),
    (0, 8, 3, np.int64),
    (100, 128, 50, np.int64),
    (7, 3, 2, np.uint32),
]


def rope_case(S, D, hd, off, dyn, dtype=np.int64):
    x = f32(S, D)
    inputs = {"X": x}
    names = None
    if dyn is None:
        names = ["X"]
    else:
        inputs["offset_dyn"] = np.array([dyn], dtype=dtype)
    attrs = dict(theta=10000.0, head_dim=hd, offset=off)
    return inputs, attrs, names, kc.rope_ref(x, 10000.0, hd, off + (dyn or 0))


def cache_write_case(max_seq, dim, T, kv_pos):
    inputs = {"new": f32(T, dim), "cache": f32(max_seq, dim), "kv_pos": np.array([kv_pos], np.int64)}
    return inputs, {}, None, kc.cache_write_ref(inputs["new"], inputs["cache"], kv_pos)


def attn_case(T, H, KVH, hd, max_seq, kv_pos):
    inputs = {"Q": f32(T, H * hd), "K": f32(max_seq, KVH * hd), "V": f32(max_seq, KVH * hd), "kv_pos": np.array([kv_pos], np.int64)}
    attrs = dict(num_heads=H, num_kv_heads=KVH, head_dim=hd)
    ref = kc.cached_attention_ref(inputs["Q"], inputs["K"], inputs["V"], kv_pos, H, KVH, hd)
    return inputs, attrs, None, ref


def batch_rope_case(B, S, D, hd, off, dyns, dtype=np.float32):
    x = f32(B, S, D).astype(dtype)
    ref = kc.batched(lambda xb, p: kc.rope_ref(xb, 10000.0, hd, off + p), (x.astype(np.float32),), dyns)
    return {"X": x, "offset_dyn": np.array(dyns, np.int64)}, dict(theta=10000.0, head_dim=hd, offset=off), None, ref


def inverse_rope_case(B, S, D, hd, off, dyn):
    """Rope with inverse=1 (rotation by the negated angle) over [B, S, D], one shared offset; the op
    table's numpy reference rotates each sequence by -angle."""
    x = f32(B, S, D)
    ref = np.stack([rope_table_ref(xb, off + dyn + np.arange(S), 10000.0, hd, inverse=True) for xb in x])
    return {"X": x, "offset_dyn": np.array([dyn], np.int64)}, dict(theta=10000.0, head_dim=hd, offset=off, inverse=1), None, ref


def batch_cache_write_case(B, max_seq, dim, T, kv_pos, dtype=np.float32):
    inputs = {"new": f32(B, T, dim).astype(dtype), "cache": f32(B, max_seq, dim).astype(dtype), "kv_pos": np.array(kv_pos, np.int64)}
    return inputs, {}, None, kc.batched(kc.cache_write_ref, (inputs["new"], inputs["cache"]), kv_pos)


def batch_attn_case(B, T, H, KVH, hd, max_seq, kv_pos, dtype=np.float32):
    q, k, v = f32(B, T, H * hd).astype(dtype), f32(B, max_seq, KVH * hd).astype(dtype), f32(B, max_seq, KVH * hd).astype(dtype)
    inputs = {"Q": q, "K": k, "V": v, "kv_pos": np.array(kv_pos, np.int64)}
    ref = kc.batched(lambda *a: kc.cached_attention_ref(*a, H, KVH, hd), tuple(x.astype(np.float32) for x in (q, k, v)), kv_pos)
    return inputs, dict(num_heads=H, num_kv_heads=KVH, head_dim=hd), None, ref


def scatter_case(N, D, rows, dtype):
    idx = rng.integers(0, rows, size=N).astype(dtype)
    if N > 2:
        idx[1] = idx[0]  # duplicates must accumulate
    src = f32(N, D)
    return {"indices": idx, "src": src}, dict(num_rows=rows), None, kc.scatter_add_ref(idx, src, rows)


ALL = (
    [("Rope", rope_case, c, RTOL) for c in ROPE_CASES]
    + [("CacheWrite", cache_write_case, c, 0.0) for c in CACHE_WRITE_CASES]
    + [("CachedAttention", attn_case, c, ATTN_TOL) for c in ATTN_CASES]
    + [("ScatterAdd", scatter_case, c, RTOL) for c in SCATTER_CASES]
    + [("Rope", batch_rope_case, c, RTOL) for c in BATCH_ROPE_CASES]
    + [("Rope", inverse_rope_case, c, RTOL) for c in INVERSE_ROPE_CASES]
    + [("CacheWrite", batch_cache_write_case, c, 0.0) for c in BATCH_CACHE_WRITE_CASES]
    + [("CachedAttention", batch_attn_case, c, ATTN_TOL) for c in BATCH_ATTN_CASES]
)
IDS = [f"{op}-{'-'.join(str(getattr(v, '__name__', v)) for v in c)}" for op, _, c, _ in ALL]


def run(model, inputs, *, library, **kw):
    sess = kc.session(model, library=library, **kw)
    return sess, sess.run(None, inputs)[0]


# ------------------------------------------------------------------ results
@pytest.mark.parametrize("op,make,case,tol", ALL, ids=IDS)
def test_kernel_matches_numpy_reference(op, make, case, tol):
    inputs, attrs, names, ref = make(*case)
    model = kc.make_model(op, inputs, attrs, input_names=names)
    _, got = run(model, inputs, library=LIB)
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("op,make,case,tol", ALL, ids=IDS)
def test_kernel_matches_function_body(op, make, case, tol):
    inputs, attrs, names, _ = make(*case)
    if names is not None:
        pytest.skip("the function body takes offset_dyn; absent-input form is kernel-only")
    if any(a.dtype.kind in "iu" and a.dtype != np.int64 for a in inputs.values()):
        pytest.skip("the exporter always passes int64 indices; other index dtypes are kernel-only")
    model = kc.make_model(op, inputs, attrs)
    _, with_kernel = run(model, inputs, library=LIB)
    _, with_function = run(model, inputs, library=None)
    np.testing.assert_allclose(with_kernel, with_function, rtol=tol, atol=tol)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_results_do_not_depend_on_thread_count(threads):
    inputs, attrs, _, ref = attn_case(4, 8, 2, 64, 80, 70)
    model = kc.make_model("CachedAttention", inputs, attrs)
    _, got = run(model, inputs, library=LIB, threads=threads)
    np.testing.assert_allclose(got, ref, rtol=ATTN_TOL, atol=ATTN_TOL)
    sinputs, sattrs, _, sref = scatter_case(300, 40, 7, np.int64)
    _, got = run(kc.make_model("ScatterAdd", sinputs, sattrs), sinputs, library=LIB, threads=threads)
    np.testing.assert_allclose(got, sref, rtol=RTOL, atol=RTOL)


def test_inverse_rope_kernel_undoes_rope():
    inputs, attrs, _, _ = batch_rope_case(*BATCH_ROPE_CASES[1])
    _, rotated = run(kc.make_model("Rope", inputs, attrs), inputs, library=LIB)
    back = {**inputs, "X": rotated}
    _, got = run(kc.make_model("Rope", back, {**attrs, "inverse": 1}), back, library=LIB)
    np.testing.assert_allclose(got, inputs["X"], rtol=RTOL, atol=RTOL)


def test_index_inputs_accept_int64_int32_uint32():
    for dtype in (np.int64, np.int32, np.uint32):
        inputs, attrs, names, ref = rope_case(3, 32, 16, 1, 6, dtype=dtype)
        _, got = run(kc.make_model("Rope", inputs, attrs, input_names=names), inputs, library=LIB)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=RTOL)


# ------------------------------------------------------------------ the kernel (not the function) ran
@pytest.mark.parametrize(
    "op,make,case,tol",
    [next(c for c in ALL if c[0] == op) for op in ("Rope", "CacheWrite", "CachedAttention", "ScatterAdd")],
    ids=["Rope", "CacheWrite", "CachedAttention", "ScatterAdd"],
)
def test_profile_shows_custom_kernel_on_cpu(op, make, case, tol, tmp_path):
    inputs, attrs, names, _ = make(*case)
    model = kc.make_model(op, inputs, attrs, input_names=names)
    sess = kc.session(model, library=LIB, profile_prefix=str(tmp_path / "kernel"))
    sess.run(None, inputs)
    nodes = kc.profiled_nodes(sess)
    assert [(n["name"], n["op_name"], n["provider"]) for n in nodes] == [(f"{op}_0", op, "CPUExecutionProvider")]

    if names is None:
        # Without the library the same model runs its function body: standard ops, not the node.
        sess = kc.session(model, library=None, profile_prefix=str(tmp_path / "function"))
        sess.run(None, inputs)
        ops = {n["op_name"] for n in kc.profiled_nodes(sess)}
        assert op not in ops and ops, ops


# ------------------------------------------------------------------ CacheWrite in place
def _copies():
    lib = ctypes.CDLL(LIB)  # same handle ORT opened: the counter is shared
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    return lib.MeganeuraCacheWriteFullCopies()


def test_cache_write_in_place_when_bound_to_the_same_buffer():
    inputs, attrs, _, ref = cache_write_case(64, 32, 1, 40)
    sess = kc.session(kc.make_model("CacheWrite", inputs, attrs), library=LIB)
    cache = ort.OrtValue.ortvalue_from_numpy(inputs["cache"].copy())
    binding = sess.io_binding()
    binding.bind_cpu_input("new", inputs["new"])
    binding.bind_ortvalue_input("cache", cache)
    binding.bind_cpu_input("kv_pos", inputs["kv_pos"])
    binding.bind_ortvalue_output("Y", cache)
    before = _copies()
    sess.run_with_iobinding(binding)
    assert _copies() == before, "kernel copied the cache although output == input buffer"
    np.testing.assert_array_equal(cache.numpy(), ref)


def test_cache_write_plain_run_leaves_the_input_untouched():
    inputs, attrs, _, ref = cache_write_case(16, 8, 2, 3)
    original = inputs["cache"].copy()
    _, got = run(kc.make_model("CacheWrite", inputs, attrs), inputs, library=LIB)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(inputs["cache"], original)


def test_cache_write_reuses_an_intermediate_cache_buffer():
    from onnx import TensorProto, helper

    inputs, _, _, _ = cache_write_case(8, 16, 1, 2)
    nodes = [
        helper.make_node("Add", ["cache", "cache"], ["c2"]),
        helper.make_node("CacheWrite", ["new", "c2", "kv_pos"], ["c3"], domain=kc.DOMAIN),
        helper.make_node("Add", ["c3", "c3"], ["Y"]),
    ]
    vi = [
        helper.make_tensor_value_info(n, TensorProto.INT64 if n == "kv_pos" else TensorProto.FLOAT, list(a.shape))
        for n, a in inputs.items()
    ]
    graph = helper.make_graph(nodes, "g", vi, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [8, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(kc.DOMAIN, 1)])
    model.ir_version = 10
    before = _copies()
    _, got = run(model.SerializeToString(), inputs, library=LIB)
    assert _copies() == before, "ORT did not apply CacheWrite's may-inplace hint"
    np.testing.assert_array_equal(got, 2 * kc.cache_write_ref(inputs["new"], 2 * inputs["cache"], 2))


# ------------------------------------------------------------------ bad input -> ORT error naming the op
def _expect_error(op, inputs, attrs, *match, names=None):
    model = kc.make_model(op, inputs, attrs, input_names=names, unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=LIB).run(None, inputs), op, match)


I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


BAD = [
    ("Rope", {"X": f32(3, 20), "offset_dyn": I64(0)}, dict(theta=1e4, head_dim=8, offset=0), ["20", "8"]),
    ("Rope", {"X": f32(3, 18), "offset_dyn": I64(0)}, dict(theta=1e4, head_dim=9, offset=0), ["head_dim", "9"]),
    ("Rope", {"X": f32(3, 16), "offset_dyn": I64(-1)}, dict(theta=1e4, head_dim=8, offset=0), ["-1"]),
    ("Rope", {"X": f32(1, 2, 3, 16), "offset_dyn": I64(0)}, dict(theta=1e4, head_dim=8, offset=0), ["rank", "[1, 2, 3, 16]"]),
    ("Rope", {"X": f32(2, 3, 16), "offset_dyn": I64(0, -3)}, dict(theta=1e4, head_dim=8, offset=0), ["offset_dyn[1]", "-3"]),
    ("Rope", {"X": f32(2, 3, 16), "offset_dyn": I64(1, 2, 3)}, dict(theta=1e4, head_dim=8, offset=0), ["offset_dyn", "[2]", "[3]"]),
    ("Rope", {"X": f32(3, 16), "offset_dyn": I64(1, 2)}, dict(theta=1e4, head_dim=8, offset=0), ["offset_dyn", "[2]"]),
    ("CacheWrite", {"new": f32(1, 8), "cache": f32(4, 8), "kv_pos": I64(4)}, {}, ["kv_pos 4", "max_seq 4"]),
    ("CacheWrite", {"new": f32(3, 8), "cache": f32(4, 8), "kv_pos": I64(2)}, {}, ["kv_pos 2", "T 3"]),
    ("CacheWrite", {"new": f32(1, 8), "cache": f32(4, 8), "kv_pos": I64(-1)}, {}, ["-1"]),
    ("CacheWrite", {"new": f32(1, 6), "cache": f32(4, 8), "kv_pos": I64(0)}, {}, ["[1, 6]", "[4, 8]"]),
    ("CacheWrite", {"new": f32(1, 8), "cache": f32(4, 8, 1), "kv_pos": I64(0)}, {}, ["rank"]),
    # batches: every sequence's position is checked, overflow-safe, and the counts must agree
    ("CacheWrite", {"new": f32(2, 1, 8), "cache": f32(2, 4, 8), "kv_pos": I64(0, 4)}, {}, ["kv_pos[1] = 4", "max_seq 4"]),
    ("CacheWrite", {"new": f32(2, 1, 8), "cache": f32(2, 4, 8), "kv_pos": I64(2**63 - 1, 0)}, {}, ["kv_pos[0] = 9223372036854775807"]),
    ("CacheWrite", {"new": f32(2, 1, 8), "cache": f32(2, 4, 8), "kv_pos": I64(0)}, {}, ["kv_pos", "[2]", "[1]"]),
    ("CacheWrite", {"new": f32(2, 1, 8), "cache": f32(3, 4, 8), "kv_pos": I64(0, 0)}, {}, ["[2, 1, 8]", "[3, 4, 8]"]),
    (
        "CachedAttention",
        {"Q": f32(2, 1, 16), "K": f32(2, 4, 8), "V": f32(2, 4, 8), "kv_pos": I64(3, -1)},
        dict(num_heads=2, num_kv_heads=1, head_dim=8),
        ["kv_pos[1] = -1"],
    ),
    (
        "CachedAttention",
        {"Q": f32(2, 1, 16), "K": f32(3, 4, 8), "V": f32(3, 4, 8), "kv_pos": I64(0, 0)},
        dict(num_heads=2, num_kv_heads=1, head_dim=8),
        ["batch sizes differ"],
    ),
    (
        "CachedAttention",
        {"Q": f32(2, 16), "K": f32(4, 8), "V": f32(4, 8), "kv_pos": I64(3)},
        dict(num_heads=2, num_kv_heads=1, head_dim=8),
        ["kv_pos 3", "T 2", "max_seq 4"],
    ),
    (
        "CachedAttention",
        {"Q": f32(1, 16), "K": f32(4, 8), "V": f32(4, 8), "kv_pos": I64(-2)},
        dict(num_heads=2, num_kv_heads=1, head_dim=8),
        ["-2"],
    ),
    (
        "CachedAttention",
        {"Q": f32(1, 24), "K": f32(4, 8), "V": f32(4, 8), "kv_pos": I64(0)},
        dict(num_heads=2, num_kv_heads=1, head_dim=8),
        ["[1, 24]", "16"],
    ),
    (
        "CachedAttention",
        {"Q": f32(1, 24), "K": f32(4, 16), "V": f32(4, 16), "kv_pos": I64(0)},
        dict(num_heads=3, num_kv_heads=2, head_dim=8),
        ["num_heads 3", "num_kv_heads 2"],
    ),
    (
        "CachedAttention",
        {"Q": f32(1, 16), "K": f32(4, 8), "V": f32(5, 8), "kv_pos": I64(0)},
        dict(num_heads=2, num_kv_heads=1, head_dim=8),
        ["[5, 8]", "[4, 8]"],
    ),
    (
        "CachedAttention",
        {"Q": f32(1, 16), "K": f32(4, 8), "V": f32(4, 8), "kv_pos": I64(0)},
        dict(num_heads=4, num_kv_heads=1, head_dim=4),
        ["K_cache", "[4, 8]"],
    ),
    ("ScatterAdd", {"indices": I64(0, 5), "src": f32(2, 4)}, dict(num_rows=5), ["indices[1] = 5", "[0, 5)"]),
    ("ScatterAdd", {"indices": I64(-1, 0), "src": f32(2, 4)}, dict(num_rows=5), ["indices[0] = -1"]),
    ("ScatterAdd", {"indices": I64(0, 1, 2), "src": f32(2, 4)}, dict(num_rows=5), ["3 entries", "[2, 4]"]),
    ("ScatterAdd", {"indices": np.zeros((2, 1), np.int64), "src": f32(2, 4)}, dict(num_rows=5), ["rank", "[2, 1]"]),
]


@pytest.mark.parametrize("op,inputs,attrs,match", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_invalid_input_raises_ort_error_naming_op_and_values(op, inputs, attrs, match):
    _expect_error(op, inputs, attrs, *match)


def test_missing_attribute_is_reported_at_load():
    _expect_error(
        "CachedAttention",
        {"Q": f32(1, 16), "K": f32(4, 8), "V": f32(4, 8), "kv_pos": I64(0)},
        dict(num_heads=2, head_dim=8),
        "num_kv_heads",
    )


# ------------------------------------------------------------------ float16 / bfloat16
# The kernels read and write the 16-bit types and compute in float32: the result is the float32
# reference of the (rounded) inputs, rounded once to the type. Tolerance: one unit in the last place.
HALF_TOL = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}
HALF_CASES = [
    ("Rope", batch_rope_case, BATCH_ROPE_CASES[1]),
    ("Rope", lambda *c, dtype: batch_rope_case(1, *c, (5,), dtype=dtype), (7, 2 * 128, 128, 0)),
    ("CacheWrite", batch_cache_write_case, BATCH_CACHE_WRITE_CASES[0]),
    ("CachedAttention", batch_attn_case, BATCH_ATTN_CASES[1]),
    ("CachedAttention", batch_attn_case, (1, 1, 16, 2, 32, 3000, (2999,))),
]


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op,make,case", HALF_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(HALF_CASES)])
def test_half_precision_kernels_match_float32_reference(op, make, case, dtype):
    inputs, attrs, _, ref = make(*case, dtype=dtype)
    sess = kc.session(kc.make_model(op, inputs, attrs, out_dtype=dtype, with_function=False), library=LIB)
    got = kc.run_typed(sess, inputs, ref.shape, dtype)
    if op == "CacheWrite":  # a copy: bit-exact
        np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))
    else:
        tol = HALF_TOL[dtype]
        np.testing.assert_allclose(got.astype(np.float32), ref, rtol=tol, atol=tol)
