"""Kernels of the fused decode-layer ops (SwiGLU, RopeCacheWrite) on the CPU: each against an
independent numpy reference, against the op table's function body, in place, and bad input."""

from __future__ import annotations

import ctypes

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
import pytest

LIB = kc.kernel_library("cpu")
pytestmark = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
RTOL = ATOL = 1e-5
rng = np.random.default_rng(7)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def swiglu_ref(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    g = gate.astype(np.float64)
    return (g / (1.0 + np.exp(-g)) * up).astype(np.float32)


def swiglu_case(*shape):
    gate, up = f32(*shape) * 4, f32(*shape)
    return {"gate": gate, "up": up}, {}, swiglu_ref(gate, up)


def rope_cache_write_case(max_seq, dim, hd, T, kv_pos):
    new, cache = f32(T, dim), f32(max_seq, dim)
    ref = kc.cache_write_ref(kc.rope_ref(new, 10000.0, hd, kv_pos), cache, kv_pos)
    return {"new_kv": new, "cache": cache, "kv_pos": np.array([kv_pos], np.int64)}, dict(theta=10000.0, head_dim=hd), ref


CASES = [
    ("SwiGLU", swiglu_case, (1, 1536)),
    ("SwiGLU", swiglu_case, (7, 33)),
    ("SwiGLU", swiglu_case, (2, 3, 40000)),  # several chunks of the thread pool
    ("RopeCacheWrite", rope_cache_write_case, (16, 192, 64, 1, 9)),  # a decode step, SmolLM2's K width
    ("RopeCacheWrite", rope_cache_write_case, (32, 64, 16, 5, 27)),  # a prefill chunk ending at the cache's end
    ("RopeCacheWrite", rope_cache_write_case, (5000, 16, 8, 1, 4999)),  # a far position
    ("RopeCacheWrite", rope_cache_write_case, (8, 24, 8, 0, 3)),  # no rows: the cache unchanged
]
IDS = [f"{op}-{'x'.join(map(str, c))}" for op, _, c in CASES]


def run(op, inputs, attrs, library, **kw):
    return kc.session(kc.make_model(op, inputs, attrs), library=library, **kw).run(None, inputs)[0]


@pytest.mark.parametrize("op,make,case", CASES, ids=IDS)
def test_fused_kernel_matches_numpy_and_the_function_body(op, make, case):
    inputs, attrs, ref = make(*case)
    got = run(op, inputs, attrs, LIB)
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(run(op, inputs, attrs, None), got, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op,make,case", [CASES[0], CASES[3]], ids=["SwiGLU", "RopeCacheWrite"])
def test_profile_shows_the_fused_kernel_not_its_function_body(op, make, case, tmp_path):
    inputs, attrs, _ = make(*case)
    model = kc.make_model(op, inputs, attrs)
    sess = kc.session(model, library=LIB, profile_prefix=str(tmp_path / "kernel"))
    sess.run(None, inputs)
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess)] == [(op, "CPUExecutionProvider")]
    sess = kc.session(model, library=None, profile_prefix=str(tmp_path / "function"))
    sess.run(None, inputs)
    ops = {n["op_name"] for n in kc.profiled_nodes(sess)}
    assert op not in ops and ops, ops


def test_rope_cache_write_accepts_int32_and_uint32_positions():
    for dtype in (np.int32, np.uint32):
        inputs, attrs, ref = rope_cache_write_case(12, 32, 16, 2, 7)
        inputs["kv_pos"] = inputs["kv_pos"].astype(dtype)
        np.testing.assert_allclose(run("RopeCacheWrite", inputs, attrs, LIB), ref, rtol=RTOL, atol=ATOL)


def test_rope_cache_write_writes_in_place_when_bound_to_the_same_buffer():
    inputs, attrs, ref = rope_cache_write_case(64, 32, 16, 1, 40)
    sess = kc.session(kc.make_model("RopeCacheWrite", inputs, attrs), library=LIB)
    cache = ort.OrtValue.ortvalue_from_numpy(inputs["cache"].copy())
    binding = sess.io_binding()
    binding.bind_cpu_input("new_kv", inputs["new_kv"])
    binding.bind_ortvalue_input("cache", cache)
    binding.bind_cpu_input("kv_pos", inputs["kv_pos"])
    binding.bind_ortvalue_output("Y", cache)
    lib = ctypes.CDLL(LIB)  # the handle ORT opened: the counter is shared
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    sess.run_with_iobinding(binding)
    assert lib.MeganeuraCacheWriteFullCopies() == before, "the kernel copied the cache although output == input buffer"
    np.testing.assert_allclose(cache.numpy(), ref, rtol=RTOL, atol=ATOL)


def test_rope_cache_write_plain_run_leaves_its_input_untouched():
    inputs, attrs, ref = rope_cache_write_case(16, 8, 4, 2, 3)
    original = inputs["cache"].copy()
    np.testing.assert_allclose(run("RopeCacheWrite", inputs, attrs, LIB), ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(inputs["cache"], original)


I64 = lambda *v: np.array(v, np.int64)  # noqa: E731
ROPE = dict(theta=1e4, head_dim=8)
BAD = [
    ("SwiGLU", {"gate": f32(2, 4), "up": f32(2, 5)}, {}, ["[2, 4]", "[2, 5]"]),
    ("RopeCacheWrite", {"new_kv": f32(1, 8), "cache": f32(4, 8), "kv_pos": I64(4)}, ROPE, ["kv_pos 4", "max_seq 4"]),
    ("RopeCacheWrite", {"new_kv": f32(3, 8), "cache": f32(4, 8), "kv_pos": I64(2)}, ROPE, ["kv_pos 2", "T 3"]),
    ("RopeCacheWrite", {"new_kv": f32(1, 8), "cache": f32(4, 8), "kv_pos": I64(-1)}, ROPE, ["-1"]),
    ("RopeCacheWrite", {"new_kv": f32(1, 16), "cache": f32(4, 8), "kv_pos": I64(0)}, ROPE, ["[1, 16]", "[4, 8]"]),
    ("RopeCacheWrite", {"new_kv": f32(1, 12), "cache": f32(4, 12), "kv_pos": I64(0)}, ROPE, ["12", "head_dim 8"]),
    ("RopeCacheWrite", {"new_kv": f32(1, 8), "cache": f32(4, 8), "kv_pos": I64(0, 1)}, ROPE, ["kv_pos", "[2]"]),
]


@pytest.mark.parametrize("op,inputs,attrs,match", BAD, ids=[f"{b[0]}-{k}" for k, b in enumerate(BAD)])
def test_bad_input_raises_an_ort_error_naming_the_op_and_the_values(op, inputs, attrs, match):
    model = kc.make_model(op, inputs, attrs, unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=LIB).run(None, inputs), op, match)


# ------------------------------------------------------------------ float16 / bfloat16
# Read and written in the 16-bit type, computed in float32: the float32 reference of the rounded
# inputs, rounded once (one unit in the last place); untouched cache rows are bit-exact copies.
HALF_TOL = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op,make,case", [CASES[0], CASES[1], CASES[3], CASES[4]], ids=["SwiGLU-0", "SwiGLU-1", "RCW-0", "RCW-1"])
def test_half_precision_fused_kernels_match_the_float32_reference(op, make, case, dtype):
    inputs, attrs, _ = make(*case)
    rounded = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in inputs.items()}
    _, _, ref = make_from(op, {k: v.astype(np.float32) if v.dtype == dtype else v for k, v in rounded.items()}, attrs)
    sess = kc.session(kc.make_model(op, rounded, attrs, out_dtype=dtype, with_function=False), library=LIB)
    got = kc.run_typed(sess, rounded, ref.shape, dtype)
    tol = HALF_TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=tol, atol=tol)
    if op == "RopeCacheWrite":
        untouched = np.ones(ref.shape[0], bool)
        untouched[int(inputs["kv_pos"][0]) : int(inputs["kv_pos"][0]) + inputs["new_kv"].shape[0]] = False
        np.testing.assert_array_equal(got[untouched].view(np.uint16), rounded["cache"][untouched].view(np.uint16))


def make_from(op, inputs, attrs):
    """The float32 reference of given inputs (the rounded half inputs widened back to float32)."""
    if op == "SwiGLU":
        return inputs, attrs, swiglu_ref(inputs["gate"], inputs["up"])
    pos = int(inputs["kv_pos"][0])
    rotated = kc.rope_ref(inputs["new_kv"], attrs["theta"], attrs["head_dim"], pos)
    return inputs, attrs, kc.cache_write_ref(rotated, inputs["cache"], pos)
