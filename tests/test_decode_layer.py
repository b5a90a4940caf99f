"""DecodeLayer on the CPU: the kernel against an independent numpy reference (the sibling ops' float64
references composed, decode_layer_cases) and against the op table's function body, in float32, float16 and
bfloat16, one sequence and a batch, positions at the cache's edges, in place, and with bad input; the op's
Graph builder and session position checks. The graph pass that makes DecodeLayer nodes is tested in
test_decode_layer_fusion.py."""

from __future__ import annotations

import ctypes

import decode_layer_cases as dc
import kernel_cases as kc
import numpy as np
import pytest

from meganeura_onnx import Graph, build_inference_session

LIB = kc.kernel_library("cpu")
needs_library = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
TOL = 2e-5

# (max_seq, rows per sequence, D, heads, kv_heads, head_dim, intermediate, position(s), trans_b)
CASES = [
    (16, 1, 64, 4, 2, 16, 96, 0, True),  # the first position
    (16, 1, 64, 4, 2, 16, 96, 15, True),  # the last position
    (20, 3, 48, 3, 1, 16, 40, 5, False),  # three rows, [in, out] weights
    (32, 1, 576, 9, 3, 64, 1536, 31, True),  # SmolLM2-135M's layer at the cache's last row
    (12, 1, 64, 4, 2, 16, 96, [11, 0, 6], True),  # a batch, one position per sequence, both edges
    (10, 2, 32, 2, 1, 16, 24, [8, 3], False),  # a batch of two-row steps, the first ending at max_seq
    (600, 1, 64, 4, 2, 16, 96, 599, False),  # 600 cached rows: attention in chunks per KV head, merged
]
IDS = [f"D{c[2]}-h{c[3]}x{c[4]}x{c[5]}-T{c[1]}@{c[7]}-{'nk' if c[8] else 'kn'}" for c in CASES]


def case(k: int, seed: int = 0):
    max_seq, s, d, h, kvh, hd, inter, pos, trans_b = CASES[k]
    return dc.make_case(np.random.default_rng(seed + k), max_seq, s, d, h, kvh, hd, inter, pos, trans_b), (h, kvh, hd, trans_b)


def run(inputs, heads, library, dtype=np.float32):
    return kc.session(dc.make_model(inputs, dc.attrs(*heads), dtype=dtype), library=library).run(None, inputs)


@needs_library
@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_kernel_matches_numpy_and_the_function_body(k):
    inputs, heads = case(k)
    want = dc.reference(inputs, *heads)
    kc.assert_kernel_matches_reference_and_body(dc.OUTPUTS, run(inputs, heads, LIB), want, run(inputs, heads, None), TOL)


@needs_library
@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_results_do_not_depend_on_the_threads(threads):
    """The layer's loops run on a team of the pool's threads (however many join in time): every
    thread count gives the one-thread result bit for bit (SmolLM2-135M's layer with [in, out] weights,
    whose products are split in row blocks, and a batch of two-row steps)."""
    smollm = dc.make_case(np.random.default_rng(7), 32, 1, 576, 9, 3, 64, 1536, 31, False), (9, 3, 64, False)
    for inputs, heads in (smollm, case(5)):
        model = dc.make_model(inputs, dc.attrs(*heads))
        one = kc.session(model, library=LIB, threads=1).run(None, inputs)
        got = kc.session(model, library=LIB, threads=threads).run(None, inputs)
        for name, g, w in zip(dc.OUTPUTS, got, one, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_function_body_matches_numpy_without_the_library():
    inputs, heads = case(4)
    for name, g, w in zip(dc.OUTPUTS, run(inputs, heads, None), dc.reference(inputs, *heads), strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


# Half types: the float64 reference of the rounded inputs, rounded where the unfused ops store in the
# element type, compared at a few units in the last place (as RopeCachedAttention's tests do).
HALF = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}


@needs_library
@pytest.mark.parametrize("dtype", list(HALF), ids=["float16", "bfloat16"])
@pytest.mark.parametrize("k", [0, 2, 3, 4, 5], ids=[IDS[i] for i in (0, 2, 3, 4, 5)])
def test_half_precision_kernel_matches_the_reference_rounded_as_the_unfused_ops(k, dtype):
    inputs, heads = case(k, seed=10)
    exact = {n: v.astype(dtype).astype(np.float32) if v.dtype == np.float32 else v for n, v in inputs.items()}
    want = dc.reference(exact, *heads, rounding=lambda a: np.asarray(a).astype(dtype).astype(np.float32))
    for name, g, w in zip(dc.OUTPUTS, run(inputs, heads, LIB, dtype), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=4 * HALF[dtype], atol=4 * HALF[dtype], err_msg=name)


@pytest.mark.parametrize("k", [0, 4], ids=[IDS[0], IDS[4]])
def test_function_body_runs_on_float16_tensors(k):
    """Without a DecodeLayer kernel (a library that predates the op) the precision pass still hands the node
    half tensors: the body computes in float16 (its epsilon cast to the rows' type), to half's precision."""
    inputs, heads = case(k, seed=10)
    exact = {n: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v for n, v in inputs.items()}
    want = dc.reference(exact, *heads, rounding=lambda a: np.asarray(a).astype(np.float16).astype(np.float32))
    for name, g, w in zip(dc.OUTPUTS, run(inputs, heads, None, np.float16), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=4 * HALF[np.dtype(np.float16)], atol=4 * HALF[np.dtype(np.float16)], err_msg=name)


@needs_library
def test_kernel_writes_the_caches_in_place_when_bound_to_their_buffers():
    inputs, heads = case(4)
    want = dc.reference(inputs, *heads)
    sess = kc.session(dc.make_model(inputs, dc.attrs(*heads)), library=LIB)
    lib = ctypes.CDLL(LIB)  # the handle ORT opened: the counter is shared
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    got = dc.run_in_place(sess, inputs)
    assert lib.MeganeuraCacheWriteFullCopies() == before, "the kernel copied a cache although output == input buffer"
    for name, g, w in zip(dc.OUTPUTS, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


@needs_library
def test_plain_run_leaves_its_input_caches_untouched():
    inputs, heads = case(1)
    originals = {k: v.copy() for k, v in inputs.items()}
    run(inputs, heads, LIB)
    for name, v in originals.items():
        np.testing.assert_array_equal(inputs[name], v, err_msg=name)


def _bad(k: int = 0, **change):
    inputs, _ = case(k)
    return {name: change.get(name, v) for name, v in inputs.items()}


z = np.zeros  # shapes only matter below
# case 0: one sequence, max_seq 16, D 64, 4 x 2 heads of 16, intermediate 96; case 4: a batch of 3
BAD = [
    (_bad(kv_pos=np.array([16], np.int64)), ["kv_pos 16", "max_seq 16"]),
    (_bad(kv_pos=np.array([-1], np.int64)), ["-1"]),
    (_bad(4, kv_pos=np.array([11, 12, 0], np.int64)), ["kv_pos[1] = 12", "max_seq 12"]),
    (_bad(4, kv_pos=np.array([0, 1], np.int64)), ["kv_pos", "[2]"]),
    (_bad(attn_norm=z(63, np.float32)), ["attn_norm", "[64]", "[63]"]),
    (_bad(w_q=z((64, 32), np.float32)), ["w_q", "[64, 64]", "[64, 32]"]),
    (_bad(w_k=z((16, 64), np.float32)), ["w_k", "[32, 64]", "[16, 64]"]),
    (_bad(w_down=z((64, 95), np.float32)), ["w_down", "[64, 96]", "[64, 95]"]),
    (_bad(k_cache=z((16, 48), np.float32)), ["[16, 48]", "num_kv_heads 2"]),
    (_bad(v_cache=z((15, 32), np.float32)), ["V_cache", "[15, 32]"]),
    (_bad(4, x=z((4, 64), np.float32)), ["x has 4 rows", "batch 3"]),
]


@needs_library
@pytest.mark.parametrize("inputs,match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_an_ort_error_naming_the_op_the_argument_and_the_values(inputs, match):
    _, heads = case(0)
    model = dc.make_model(inputs, dc.attrs(*heads), unknown_shapes=True, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=LIB).run(None, inputs), "DecodeLayer", match)


BAD_ATTRS = [
    ({"head_dim": 15}, ["head_dim", "15"]),
    ({"num_kv_heads": 3}, ["num_heads 4", "num_kv_heads 3"]),
    ({"epsilon": 0.0}, ["epsilon", "0"]),
    ({"trans_b": 2}, ["trans_b", "2"]),
    ({"theta": -1.0}, ["theta", "-1"]),
]


@needs_library
@pytest.mark.parametrize("change,match", BAD_ATTRS, ids=[next(iter(c)) for c, _ in BAD_ATTRS])
def test_bad_attributes_are_refused_when_the_session_is_created(change, match):
    inputs, heads = case(0)
    model = dc.make_model(inputs, {**dc.attrs(*heads), **change}, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=LIB), "DecodeLayer", match)


# -- the Graph builder ------------------------------------------------------------------------------
def _layer(g: Graph, d: int = 16, rows: int = 1, batch: int | None = None) -> dict:
    """decode_layer's node arguments for a layer of width d (4 x 2 heads of 4, intermediate 24)."""
    lead = [] if batch is None else [batch]
    return {
        "x": g.input("x", [rows, d]),
        "attn_norm": g.parameter("attn_norm", [d]),
        "w_q": g.parameter("w_q", [16, d]),
        "w_k": g.parameter("w_k", [8, d]),
        "w_v": g.parameter("w_v", [8, d]),
        "w_o": g.parameter("w_o", [d, 16]),
        "mlp_norm": g.parameter("mlp_norm", [d]),
        "w_gate": g.parameter("w_gate", [24, d]),
        "w_up": g.parameter("w_up", [24, d]),
        "w_down": g.parameter("w_down", [d, 24]),
        "k_cache": g.input("k_cache", [*lead, 8, 8]),
        "v_cache": g.input("v_cache", [*lead, 8, 8]),
        "kv_pos": g.input_u32("kv_pos", [batch or 1]),
    }


def _build(g: Graph, args: dict, **attrs):
    kw = {"num_heads": 4, "num_kv_heads": 2, "head_dim": 4, "theta": 1e4, "eps": 1e-5, **attrs}
    return g.decode_layer(*args.values(), **kw)


def test_builder_returns_y_and_both_caches_with_their_shapes():
    g = Graph()
    y, kc_, vc_ = _build(g, _layer(g, rows=6, batch=3))
    assert [g.node(n).ty.shape for n in (y, kc_, vc_)] == [(6, 16), (3, 8, 8), (3, 8, 8)]


@pytest.mark.parametrize(
    "field,shape,words",
    [
        ("attn_norm", [15], ["attn_norm must be [16]", "[15]"]),
        ("w_q", [12, 16], ["w_q must give 16 columns", "num_heads 4 * head_dim 4", "12"]),
        ("w_v", [8, 15], ["w_v must be [N, K] with K = 16", "[8, 15]"]),
        ("w_down", [16, 23], ["w_down must be [N, K] with K = 24", "[16, 23]"]),
        ("w_up", [20, 16], ["w_gate and w_up must give one output width", "[1, 24]", "[1, 20]"]),
        ("k_cache", [8, 12], ["k_cache and v_cache must both be", "[8, 12]"]),
    ],
)
def test_builder_names_the_argument_the_expected_and_the_given_shape(field, shape, words):
    g = Graph()
    args = _layer(g)
    args[field] = (g.input if field.endswith("cache") else g.parameter)(f"{field}_bad", shape)
    with pytest.raises(ValueError) as info:
        _build(g, args)
    msg = str(info.value)
    assert msg.startswith("decode_layer: ") and all(w in msg for w in words), msg


def test_builder_refuses_rows_that_are_not_a_whole_number_per_sequence():
    g = Graph()
    with pytest.raises(ValueError, match=r"decode_layer: x's rows must be B\*S for the batch of B = 3 .* got x \[4, 16\]"):
        _build(g, _layer(g, rows=4, batch=3))


def test_session_position_limit_counts_the_rows_of_each_sequence_of_a_batch():
    """x holds 4 sequences of one row: kv_pos may reach max_seq - 1 (not max_seq - 4), and no further."""
    g = Graph()
    outs = _build(g, _layer(g, rows=4, batch=4))
    g.set_outputs({"y": outs[0]})
    s = build_inference_session(g, "cpu", optimize=False, use_custom_ops=LIB is not None)
    s.set_input_u32("kv_pos", [7, 0, 7, 3])
    with pytest.raises(ValueError, match=r"'kv_pos' = 8 is out of range: it must be <= 7"):
        s.set_input_u32("kv_pos", [8, 0, 0, 0])
