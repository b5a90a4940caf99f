"""CUDA kernels of the com.meganeura ops: placement on CUDAExecutionProvider, parity with the CPU
kernels and numpy, in-place CacheWrite on device buffers, bad input.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
import pytest
import test_kernels_cpu as cpu  # shares the cases

CUDA_LIB = kc.CUDA_LIB
CPU_LIB = kc.kernel_library("cpu")
pytestmark = kc.CUDA_SKIPS
CUDA = kc.CUDA_PROVIDERS
cuda_session = kc.cuda_session

EXTRA_ATTN = [  # (T, H, KVH, head_dim, max_seq, kv_pos): many splits, head groups > 8, generic head_dim
    (1, 32, 8, 128, 4096, 4095),
    (1, 32, 2, 64, 2000, 1500),
    (1, 4, 4, 256, 300, 299),
    (2, 6, 2, 96, 50, 40),
    (1, 2, 1, 32, 10, 9),
    (9, 8, 8, 128, 700, 600),
]
ALL = cpu.ALL + [("CachedAttention", cpu.attn_case, c, cpu.ATTN_TOL) for c in EXTRA_ATTN]
IDS = [f"{op}-{'-'.join(str(getattr(v, '__name__', v)) for v in c)}" for op, _, c, _ in ALL]


@pytest.mark.parametrize("op,make,case,tol", ALL, ids=IDS)
def test_cuda_kernel_matches_reference_and_cpu_kernel_and_runs_on_cuda(op, make, case, tol, tmp_path):
    inputs, attrs, names, ref = make(*case)
    model = kc.make_model(op, inputs, attrs, input_names=names)
    sess = cuda_session(model, profile_prefix=str(tmp_path / "cuda"))
    got = sess.run(None, inputs)[0]
    placed = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == op]
    assert placed == [(op, "CUDAExecutionProvider")], placed
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    if CPU_LIB is not None:
        on_cpu = kc.session(model, library=CPU_LIB).run(None, inputs)[0]
        np.testing.assert_allclose(got, on_cpu, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op,make,case", cpu.HALF_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(cpu.HALF_CASES)])
def test_cuda_half_precision_kernels_match_float32_reference(op, make, case, dtype, tmp_path):
    inputs, attrs, _, ref = make(*case, dtype=dtype)
    sess = cuda_session(kc.make_model(op, inputs, attrs, out_dtype=dtype, with_function=False), profile_prefix=str(tmp_path / "half"))
    got = kc.run_typed(sess, inputs, ref.shape, dtype)
    placed = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess) if n["op_name"] == op]
    assert placed == [(op, "CUDAExecutionProvider")], placed
    if op == "CacheWrite":  # a copy: bit-exact
        np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))
    else:
        tol = cpu.HALF_TOL[dtype]
        np.testing.assert_allclose(got.astype(np.float32), ref, rtol=tol, atol=tol)


# Decode shapes of the split-K kernel's tuned paths: head_dim 64 and 128, GQA ratios 1, 3 and 4, cache
# lengths that are no multiple of any tile, the first and the last position (one sequence at each).
DECODE_ATTN = [  # (B, T, H, KVH, head_dim, max_seq, kv_pos per sequence)
    (1, 1, 8, 8, 64, 4099, (4098,)),
    (1, 1, 9, 3, 64, 1027, (0,)),
    (2, 1, 16, 4, 64, 2051, (2050, 0)),
    (1, 1, 8, 8, 128, 1031, (0,)),
    (1, 1, 12, 4, 128, 4101, (4100,)),
    (2, 1, 32, 8, 128, 3001, (0, 3000)),
]
DECODE_TOL = {np.dtype(np.float32): cpu.ATTN_TOL, **cpu.HALF_TOL}


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), kc.BFLOAT16], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(
    "case", DECODE_ATTN, ids=[f"hd{c[4]}-gqa{c[2] // c[3]}-len{c[5]}-pos{'-'.join(map(str, c[6]))}" for c in DECODE_ATTN]
)
def test_cuda_decode_attention_matches_reference_per_head_dim_and_gqa_ratio(case, dtype):
    _assert_batched_attention_matches_reference(case, dtype)


def _assert_batched_attention_matches_reference(case: tuple, dtype: np.dtype) -> None:
    inputs, attrs, _, ref = cpu.batch_attn_case(*case, dtype=dtype)
    sess = cuda_session(kc.make_model("CachedAttention", inputs, attrs, out_dtype=dtype, with_function=False))
    got = kc.run_typed(sess, inputs, ref.shape, dtype)
    tol = DECODE_TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=tol, atol=tol)


# Chunks of query rows (prefills) that the library runs on the flash forward: >= 64 rows and at least
# 33 blocks of (sequence, head, 64 rows), a quarter of an H100's or H200's SMs (FlashForChunk). Per
# sequence positions up to the last one, GQA 3 / 4 / 5, head_dim 64, 128 and 96 (zero-padded to 128),
# row counts that are no multiple of the 64-row tile.
CHUNK_ATTN = [  # (B, T, H, KVH, head_dim, max_seq, kv_pos per sequence)
    (4, 64, 9, 3, 64, 256, (0, 100, 192, 17)),
    (2, 128, 16, 4, 128, 400, (0, 272)),
    (1, 200, 40, 8, 64, 1100, (900,)),
    (3, 70, 12, 4, 96, 150, (80, 0, 33)),
    # far into long caches: the flash forward splits each row block's keys over blocks
    (1, 64, 9, 3, 64, 4096, (3000,)),
    (2, 32, 8, 2, 128, 1024, (990, 3)),
    (1, 128, 12, 4, 64, 2048, (1920,)),
]


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), kc.BFLOAT16], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", CHUNK_ATTN, ids=[f"B{c[0]}-T{c[1]}-hd{c[4]}-pos{'-'.join(map(str, c[6]))}" for c in CHUNK_ATTN])
def test_cuda_prefill_chunk_attention_matches_reference(case, dtype):
    _assert_batched_attention_matches_reference(case, dtype)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16)], ids=["float32", "float16"])
@pytest.mark.parametrize(
    "shape",
    [(3, 64, 12, 4, 64, 200), (3, 32, 9, 3, 64, 1024)],
    ids=["flash", "flash-key-splits"],  # 36 blocks of 64 rows; 9 blocks in a cache of 32 chunks
)
def test_cuda_prefill_chunk_with_an_invalid_position_raises_or_without_read_back_gives_nan_for_that_sequence_only(shape, dtype):
    """The position is validated by reading it back (an ORT error naming it); graphs our Session
    builds skip that read-back (``check_positions=0``), and then the kernel itself guards: NaN rows
    for the sequence with the bad position, the others attended as usual, nothing read out of bounds."""
    B, T, H, KVH, hd, max_seq = shape
    inputs, attrs, _, ref = cpu.batch_attn_case(B, T, H, KVH, hd, max_seq, (max_seq - T, 0, 0), dtype=dtype)
    inputs["kv_pos"] = np.array([max_seq - T, max_seq - T + 1, -1], np.int64)  # the last valid, one past it, negative
    checked = kc.make_model("CachedAttention", inputs, attrs, out_dtype=dtype, with_function=False)
    bad = f"kv_pos[1] = {max_seq - T + 1}"
    kc.assert_ort_error(lambda: kc.run_typed(cuda_session(checked), inputs, ref.shape, dtype), "CachedAttention", [bad])
    unchecked = kc.make_model("CachedAttention", inputs, {**attrs, "check_positions": 0}, out_dtype=dtype, with_function=False)
    got = kc.run_typed(cuda_session(unchecked), inputs, ref.shape, dtype).astype(np.float32)
    np.testing.assert_allclose(got[0], ref[0], rtol=DECODE_TOL[dtype], atol=DECODE_TOL[dtype])
    assert np.isnan(got[1:]).all()


def test_cuda_library_also_serves_cpu_sessions():
    inputs, attrs, names, ref = cpu.attn_case(2, 4, 2, 64, 16, 5)
    got = kc.session(kc.make_model("CachedAttention", inputs, attrs), library=CUDA_LIB).run(None, inputs)[0]
    np.testing.assert_allclose(got, ref, rtol=cpu.ATTN_TOL, atol=cpu.ATTN_TOL)


def test_cache_write_in_place_on_device():
    inputs, attrs, _, ref = cpu.cache_write_case(4096, 1024, 1, 1234)
    sess = cuda_session(kc.make_model("CacheWrite", inputs, attrs))
    cache = ort.OrtValue.ortvalue_from_numpy(inputs["cache"].copy(), "cuda", 0)
    new = ort.OrtValue.ortvalue_from_numpy(inputs["new"], "cuda", 0)
    b = sess.io_binding()
    b.bind_ortvalue_input("new", new)
    b.bind_ortvalue_input("cache", cache)
    b.bind_cpu_input("kv_pos", inputs["kv_pos"])
    b.bind_ortvalue_output("Y", cache)
    before = _copies()
    sess.run_with_iobinding(b)
    assert _copies() == before, "CacheWrite copied the whole cache although output == input buffer"
    np.testing.assert_array_equal(cache.numpy(), ref)


def _copies():
    import ctypes

    lib = ctypes.CDLL(CUDA_LIB)
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    return lib.MeganeuraCacheWriteFullCopies()


def test_decode_step_graph_keeps_everything_on_cuda(tmp_path):
    """CacheWrite -> CachedAttention with a uint32 position cast to int64, as the exporter emits."""
    from onnx import TensorProto, helper

    H, KVH, hd, max_seq, pos = 8, 2, 64, 128, 77
    nodes = [
        helper.make_node("Cast", ["pos_u32"], ["pos"], to=TensorProto.INT64),
        helper.make_node("Rope", ["q_in", "pos"], ["q"], domain=kc.DOMAIN, name="rope_q", theta=1e4, head_dim=hd, offset=0),
        helper.make_node("CacheWrite", ["k_new", "k_cache", "pos"], ["k_upd"], domain=kc.DOMAIN, name="write_k"),
        helper.make_node("CacheWrite", ["v_new", "v_cache", "pos"], ["v_upd"], domain=kc.DOMAIN, name="write_v"),
        helper.make_node(
            "CachedAttention",
            ["q", "k_upd", "v_upd", "pos"],
            ["Y"],
            domain=kc.DOMAIN,
            name="attn",
            num_heads=H,
            num_kv_heads=KVH,
            head_dim=hd,
        ),
    ]
    f = TensorProto.FLOAT
    vi = [
        helper.make_tensor_value_info("pos_u32", TensorProto.UINT32, [1]),
        helper.make_tensor_value_info("q_in", f, [1, H * hd]),
        helper.make_tensor_value_info("k_new", f, [1, KVH * hd]),
        helper.make_tensor_value_info("v_new", f, [1, KVH * hd]),
        helper.make_tensor_value_info("k_cache", f, [max_seq, KVH * hd]),
        helper.make_tensor_value_info("v_cache", f, [max_seq, KVH * hd]),
    ]
    graph = helper.make_graph(nodes, "decode", vi, [helper.make_tensor_value_info("Y", f, [1, H * hd])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(kc.DOMAIN, 1)])
    model.ir_version = 10
    feeds = {
        "pos_u32": np.array([pos], np.uint32),
        "q_in": cpu.f32(1, H * hd),
        "k_new": cpu.f32(1, KVH * hd),
        "v_new": cpu.f32(1, KVH * hd),
        "k_cache": cpu.f32(max_seq, KVH * hd),
        "v_cache": cpu.f32(max_seq, KVH * hd),
    }
    sess = cuda_session(model.SerializeToString(), profile_prefix=str(tmp_path / "decode"))
    got = sess.run(None, feeds)[0]
    placement = {n["name"]: n["provider"] for n in kc.profiled_nodes(sess)}
    for name in ("rope_q", "write_k", "write_v", "attn"):
        assert placement.get(name) == "CUDAExecutionProvider", placement
    q = kc.rope_ref(feeds["q_in"], 1e4, hd, pos)
    k = kc.cache_write_ref(feeds["k_new"], feeds["k_cache"], pos)
    v = kc.cache_write_ref(feeds["v_new"], feeds["v_cache"], pos)
    np.testing.assert_allclose(got, kc.cached_attention_ref(q, k, v, pos, H, KVH, hd), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op,inputs,attrs,match", cpu.BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(cpu.BAD)])
def test_invalid_input_raises_ort_error_on_cuda(op, inputs, attrs, match):
    """The same bad inputs as on the CPU give the same ORT errors on CUDA. Positions live in device
    memory; outside CUDA-graph capture the kernel reads them back to validate them."""
    model = kc.make_model(op, inputs, attrs, unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: cuda_session(model).run(None, inputs), op, match)


def _decode_graph(max_seq: int, heads: int, kv_heads: int, hd: int):
    from meganeura_onnx import Graph

    g = Graph()
    pos = g.input_u32("kv_pos", [1])
    q = g.rope_dynamic_offset(g.input("q", [1, heads * hd]), 10000.0, pos, hd)
    k = g.rope_dynamic_offset(g.input("k_new", [1, kv_heads * hd]), 10000.0, pos, hd)
    kc_ = g.cache_write(k, g.input("k_cache", [max_seq, kv_heads * hd]), pos)
    vc_ = g.cache_write(g.input("v_new", [1, kv_heads * hd]), g.input("v_cache", [max_seq, kv_heads * hd]), pos)
    g.set_outputs([g.cached_attention(q, kc_, vc_, pos, heads, kv_heads, hd)])
    return g


# Unoptimized, the step is the separate ops; optimized (CUDA), one RopeCachedAttention.
STEP_KERNELS = {False: ["CacheWrite", "CachedAttention", "Rope"], True: ["RopeCachedAttention"]}


@pytest.mark.parametrize("optimize", [False, True], ids=["separate-ops", "fused"])
@pytest.mark.parametrize("hd", [64, 48], ids=["split-k", "generic"])
def test_decode_step_replays_as_cuda_graph_with_device_positions(hd, optimize):
    """Cast(u32 -> int64) kv_pos, Rope (dynamic offset), CacheWrite, CachedAttention (or, optimized,
    the one RopeCachedAttention they fuse into) through Session(cuda_graph=True): ORT captures the
    step once and replays it with new kv_pos values (read on the device); every node runs on CUDA, no
    Memcpy node; results equal the CPU session."""
    from meganeura_onnx import build_inference_session

    max_seq, heads, kv_heads = 300, 8, 2
    g = _decode_graph(max_seq, heads, kv_heads, hd)
    gpu = build_inference_session(g, "cuda", cuda_graph=True, optimize=optimize)
    cpu_s = build_inference_session(g, "cpu")
    plan = gpu.plan()
    assert gpu.inplace_state == {"k_cache", "v_cache"}
    assert plan.kernels() == dict.fromkeys(STEP_KERNELS[optimize], "kernel")
    assert not [p for p in plan.placement if "Memcpy" in p[2]], plan.placement
    assert {ep for *_, ep in plan.placement} == {"CUDAExecutionProvider"}, plan.placement
    rng = np.random.default_rng(5)
    for pos in [0, 1, 2, 3, 150, 4, 299, 5]:  # out of order too: the captured graph reads the buffer
        feeds = {"q": heads * hd, "k_new": kv_heads * hd, "v_new": kv_heads * hd}
        for name, n in feeds.items():
            x = rng.standard_normal(n).astype(np.float32)
            gpu.set_input(name, x)
            cpu_s.set_input(name, x)
        gpu.set_input_u32("kv_pos", [pos])
        cpu_s.set_input_u32("kv_pos", [pos])
        gpu.step()
        cpu_s.step()
        np.testing.assert_allclose(
            gpu.read_output_by_index(0), cpu_s.read_output_by_index(0), rtol=1e-4, atol=1e-4, err_msg=f"kv_pos {pos}"
        )
    np.testing.assert_allclose(gpu.read_state("k_cache"), cpu_s.read_state("k_cache"), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(gpu.read_state("v_cache"), cpu_s.read_state("v_cache"))
    with pytest.raises(ValueError, match=r"'kv_pos' = 300 .*<= 299"):
        gpu.set_input_u32("kv_pos", [300])


def test_under_cuda_graph_an_invalid_position_gives_nan_and_leaves_the_cache_untouched():
    """A captured graph cannot sync to validate: the Session refuses bad positions at upload, and
    if one reaches the device anyway (written past the Session here) the kernels guard on the GPU:
    NaN attention output, no cache row written, no out-of-bounds access."""
    from meganeura_onnx import build_inference_session

    max_seq, heads, kv_heads, hd = 64, 4, 2, 64
    gpu = build_inference_session(_decode_graph(max_seq, heads, kv_heads, hd), "cuda", cuda_graph=True)
    rng = np.random.default_rng(1)
    for name, n in {"q": heads * hd, "k_new": kv_heads * hd, "v_new": kv_heads * hd}.items():
        gpu.set_input(name, rng.standard_normal(n).astype(np.float32))
    gpu.set_input_u32("kv_pos", [3])
    gpu.step()  # captures the graph
    before = gpu.read_state("k_cache")
    with pytest.raises(ValueError, match="kv_pos"):
        gpu.set_input_u32("kv_pos", [max_seq])
    gpu._values["kv_pos"].update_inplace(np.array([max_seq], np.uint32))  # bypass the host check on purpose
    gpu.step()
    assert np.isnan(gpu.read_output_by_index(0)).all()
    np.testing.assert_array_equal(gpu.read_state("k_cache"), before)
