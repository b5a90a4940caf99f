"""The inference Session: inputs, parameters, outputs, KV-cache state, plan and memory summary."""

from __future__ import annotations

import re

import numpy as np
import pytest

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.reference import evaluate


def mlp() -> Graph:
    g = Graph()
    x = g.input("x", [4, 6])
    h = g.relu(g.bias_add(g.matmul(x, g.parameter("w1", [6, 5])), g.parameter("b1", [5])))
    g.set_outputs([g.matmul(h, g.parameter("w2", [5, 3])), g.sum_all(h)])
    return g


def test_step_computes_the_graph_with_set_inputs_and_parameters():
    g = mlp()
    s = build_inference_session(g)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    params = {"w1": rng.normal(size=(6, 5)), "b1": rng.normal(size=5), "w2": rng.normal(size=(5, 3))}
    for k, v in params.items():
        s.set_parameter(k, v.reshape(-1))
    s.set_input("x", x.reshape(-1))
    s.step()
    s.wait()
    want = evaluate(g, {"x": x, **params}, np.float64)
    assert s.num_outputs() == 2
    np.testing.assert_allclose(s.read_output_by_index(0), want[0], rtol=1e-5, atol=1e-5)
    out = np.empty(1, np.float32)
    assert s.read_output_by_index(1, out) is out
    np.testing.assert_allclose(out, want[1], rtol=1e-5)
    np.testing.assert_allclose(s.read_param("w2"), params["w2"], rtol=1e-7)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x,  # float32 of the input's shape: set_input's direct copy
        lambda x: np.asfortranarray(x),  # not C-contiguous: converted
        lambda x: x.astype(np.float64),  # another dtype: converted
        lambda x: x.astype(">f4"),  # big-endian float32: converted
    ],
    ids=["exact", "fortran", "float64", "big-endian"],
)
def test_set_input_copies_any_layout_and_later_changes_to_the_array_do_not_leak_in(make):
    g = mlp()
    s = build_inference_session(g)
    x = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    data = make(x.copy())
    s.set_input("x", data)
    data[...] = 7.0  # the session holds its own copy
    s.step()
    want = evaluate(g, {"x": x, **{n: s.read_param(n) for n in ("w1", "b1", "w2")}}, np.float64)
    np.testing.assert_allclose(s.read_output_by_index(0), want[0], rtol=1e-5, atol=1e-5)


def test_default_init_is_seeded_ones_zeros_and_scaled_uniform():
    g = Graph()
    x = g.input("x", [2, 8])
    h = g.rms_norm(g.matmul(x, g.parameter("w", [8, 64])), g.parameter("norm.weight", [64]), 1e-5)
    g.set_outputs([g.bias_add(h, g.parameter("bias", [64]))])
    a, b = build_inference_session(g), build_inference_session(g)
    np.testing.assert_array_equal(a.read_param("norm.weight"), np.ones(64))
    np.testing.assert_array_equal(a.read_param("bias"), np.zeros(64))
    w = a.read_param("w")
    assert np.abs(w).max() <= 1 / np.sqrt(8) and w.std() > 0.1
    np.testing.assert_array_equal(w, b.read_param("w"))
    assert not np.array_equal(w, build_inference_session(g, seed=1).read_param("w"))


@pytest.mark.parametrize("kernels", [False, True], ids=["function-bodies", "kernels"])
def test_kv_cache_persists_across_steps_like_meganeura_decode(kernels):
    from meganeura_onnx import custom_op_library

    if kernels and not custom_op_library():
        pytest.skip("custom-op library not built (make kernels)")
    max_seq, heads, kv_heads, hd = 6, 2, 1, 4
    g = Graph()
    q = g.input("q", [1, heads * hd])
    k_new = g.input("k_new", [1, kv_heads * hd])
    v_new = g.input("v_new", [1, kv_heads * hd])
    pos = g.input_u32("kv_pos", [1])
    kc = g.cache_write(k_new, g.input("k_cache", [max_seq, kv_heads * hd]), pos)
    vc = g.cache_write(v_new, g.input("v_cache", [max_seq, kv_heads * hd]), pos)
    g.set_outputs([g.cached_attention(q, kc, vc, pos, heads, kv_heads, hd)])
    s = build_inference_session(g, use_custom_ops=kernels)
    # The in-place CacheWrite kernel updates one buffer; function bodies swap two.
    assert s.inplace_state == ({"k_cache", "v_cache"} if kernels else set())
    assert s.plan().kernels() == dict.fromkeys(["CacheWrite", "CachedAttention"], "kernel" if kernels else "function")
    rng = np.random.default_rng(3)
    ks, vs = [], []
    for t in range(4):
        qt, kt, vt = (rng.normal(size=n).astype(np.float32) for n in (heads * hd, kv_heads * hd, kv_heads * hd))
        ks.append(kt)
        vs.append(vt)
        s.set_input("q", qt)
        s.set_input("k_new", kt)
        s.set_input("v_new", vt)
        s.set_input_u32("kv_pos", [t])
        s.step()
        k_all, v_all = np.array(ks, np.float64), np.array(vs, np.float64)
        scores = (qt.reshape(heads, hd) @ k_all.T) / np.sqrt(hd)  # both query heads read KV head 0
        p = np.exp(scores - scores.max(-1, keepdims=True))
        want = (p / p.sum(-1, keepdims=True)) @ v_all
        np.testing.assert_allclose(s.read_output_by_index(0).reshape(heads, hd), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(s.read_state("k_cache")[:4], np.array(ks))
    np.testing.assert_array_equal(s.read_state("k_cache")[4:], 0)


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda s: s.set_input("nope", np.zeros(24)), KeyError, ["nope", "'x'"]),
        (lambda s: s.set_input("x", np.zeros(23)), ValueError, ["'x'", "24", "23"]),
        (lambda s: s.set_input("x", np.array(["a"] * 24)), TypeError, ["'x'", "numbers"]),
        (lambda s: s.set_input_u32("x", np.zeros(24, np.uint32)), TypeError, ["'x'", "F32", "set_input"]),
        (lambda s: s.set_parameter("w1", np.zeros(5)), ValueError, ["'w1'", "30", "5"]),
        (lambda s: s.set_parameter("x", np.zeros(24)), KeyError, ["parameter", "'x'"]),
        (lambda s: s.read_param("nope"), KeyError, ["nope", "w1"]),
        (lambda s: s.read_output_by_index(2), IndexError, ["2", "2 outputs"]),
        (lambda s: s.read_output_by_index(0, np.empty(5, np.float32)), ValueError, ["12", "5"]),
    ],
)
def test_bad_session_calls_raise_with_expected_and_given(call, error, words):
    s = build_inference_session(mlp())
    with pytest.raises(error) as info:
        call(s)
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"


def test_u32_inputs_reject_negative_or_fractional_values():
    g = Graph()
    g.set_outputs([g.embedding(g.input_u32("ids", [3]), g.parameter("emb", [5, 2]))])
    s = build_inference_session(g)
    with pytest.raises(ValueError, match="non-negative integers"):
        s.set_input_u32("ids", [1, -2, 3])
    with pytest.raises(ValueError, match="non-negative integers"):
        s.set_input_u32("ids", [1.5, 2, 3])
    s.set_input_u32("ids", [4, 0, 4])
    s.step()
    table = s.read_param("emb")
    np.testing.assert_array_equal(s.read_output_by_index(0), table[[4, 0, 4]])


def test_memory_summary_counts_buffers_and_prints_like_meganeura():
    s = build_inference_session(mlp())
    m = s.memory_summary()
    sizes = [b.size_bytes for b in s.buffers()]
    assert (m.num_buffers, m.total_buffer_bytes, m.largest_buffer_bytes, m.adam_state_bytes) == (len(sizes), sum(sizes), max(sizes), 0)
    assert m.total_buffer_bytes == 4 * (24 + 30 + 5 + 15 + 12 + 1)
    assert re.fullmatch(r"6 buffers, 0\.0 MB total \(0\.0 MB adam state\), largest 0\.0 MB", str(m))


def test_plan_shows_nodes_buffers_and_provider_placement():
    g = Graph()
    g.set_outputs([g.rope(g.input("x", [3, 8]), 10000.0, 4)])
    plan = build_inference_session(g, use_custom_ops=False).plan()
    assert plan.providers == ["CPUExecutionProvider"]
    assert ("com.meganeura", "Rope") in {(d, o) for _, d, o in plan.nodes}
    assert plan.kernels() == {"Rope": "function"}
    assert {ep for *_, ep in plan.placement} == {"CPUExecutionProvider"}
    assert "Rope: function" in str(plan)


def test_cuda_device_without_onnxruntime_gpu_says_what_is_missing():
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    with pytest.raises(RuntimeError, match="onnxruntime-gpu"):
        build_inference_session(mlp(), device="cuda")
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        build_inference_session(mlp(), device="tpu")


def test_cuda_graph_is_refused_off_cuda():
    with pytest.raises(ValueError, match="cuda_graph=True needs device='cuda'"):
        build_inference_session(mlp(), device="cpu", cuda_graph=True)


def decode_graph(max_seq: int = 6, rows: int = 1) -> Graph:
    heads, kv_heads, hd = 2, 1, 4
    g = Graph()
    pos = g.input_u32("kv_pos", [1])
    q = g.rope_dynamic_offset(g.input("q", [rows, heads * hd]), 10000.0, pos, hd)
    kc = g.cache_write(g.input("k_new", [rows, kv_heads * hd]), g.input("k_cache", [max_seq, kv_heads * hd]), pos)
    vc = g.cache_write(g.input("v_new", [rows, kv_heads * hd]), g.input("v_cache", [max_seq, kv_heads * hd]), pos)
    g.set_outputs([g.cached_attention(q, kc, vc, pos, heads, kv_heads, hd)])
    return g


@pytest.mark.parametrize("kernels", [False, True], ids=["function-bodies", "kernels"])
@pytest.mark.parametrize("max_seq,rows", [(6, 1), (8, 3)])
def test_kv_position_past_the_cache_is_refused_by_set_input_u32(kernels, max_seq, rows):
    """On CUDA the kernels read kv_pos on the device and cannot return an error (they write NaN or
    skip the write), so the Session checks positions on the host: input name, value and limit."""
    from meganeura_onnx import custom_op_library

    if kernels and not custom_op_library():
        pytest.skip("custom-op library not built (make kernels)")
    s = build_inference_session(decode_graph(max_seq, rows), use_custom_ops=kernels)
    limit = max_seq - rows
    assert s.position_limits == {"kv_pos": limit}
    s.set_input_u32("kv_pos", [limit])  # the last valid position is accepted and runs
    s.step()
    assert np.isfinite(s.read_output_by_index(0)).all()
    for bad in (limit + 1, max_seq, 2**32 - 1):
        with pytest.raises(ValueError) as info:
            s.set_input_u32("kv_pos", [bad])
        msg = str(info.value)
        assert "'kv_pos'" in msg and str(bad) in msg and f"<= {limit}" in msg, msg
    with pytest.raises(ValueError, match="non-negative"):
        s.set_input_u32("kv_pos", [-1])


def test_position_limits_cover_cache_positions_and_token_ids_not_rope_offsets():
    from meganeura_onnx.runtime.inference import position_limits

    g = Graph()
    ids = g.input_u32("ids", [3])
    off = g.input_u32("offset", [1])  # rope only: any U32 is a valid rope offset
    x = g.embedding(ids, g.parameter("emb", [50, 8]))
    g.set_outputs([g.rope_dynamic_offset(x, 10000.0, off, 4)])
    assert position_limits(g) == {"ids": 49}  # token ids index the 50 rows of the table
    s = build_inference_session(g)
    s.set_input_u32("offset", [2**32 - 1])
    s.set_input_u32("ids", [49, 0, 7])
    with pytest.raises(ValueError, match=r"'ids' = 50 .*<= 49 .*table \(50 rows\)"):
        s.set_input_u32("ids", [0, 50, 7])
    # the LLaMA graphs: one kv_pos feeds every layer's cache ops
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("llama_model_for_limits", Path(__file__).resolve().parent.parent / "models" / "llama.py")
    llama = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(llama)
    cfg = llama.PRESETS["tiny"]
    ids_limit = cfg.vocab_size - 1
    assert position_limits(llama.build_graph(cfg, "decode", 1, 32)) == {"kv_pos": 31, "input_ids": ids_limit}
    assert position_limits(llama.build_graph(cfg, "prefill", 8, 32)) == {"kv_pos": 24, "input_ids": ids_limit, "last_row": 7}


def test_training_leaves_the_callers_parameter_arrays_unchanged():
    # On CPU an OrtValue made from a numpy array shares its memory: the session must copy.
    from meganeura_onnx.runtime.training import build_session

    g = Graph()
    w = g.parameter("w", [4, 2])
    g.set_outputs([g.mse_loss(g.matmul(g.input("x", [3, 4]), w), g.input("y", [3, 2]))])
    given = {"w": np.full((4, 2), 0.5, np.float32)}
    s = build_session(g, optimizer="sgd", parameters=given)
    s.set_learning_rate(0.1)
    s.set_input("x", np.ones((3, 4)))
    s.set_input("y", np.zeros((3, 2)))
    for _ in range(3):
        s.step()
    assert not np.allclose(s.read_param("w"), 0.5)
    np.testing.assert_array_equal(given["w"], np.full((4, 2), 0.5, np.float32))


def test_share_buffers_binds_each_pairs_matching_parameters_and_keeps_them_shared():
    def two_layer(width: int) -> Graph:  # w2's shape depends on width: only w1 and b1 match across widths
        g = Graph()
        x = g.input("x", [4, 6])
        h = g.relu(g.bias_add(g.matmul(x, g.parameter("w1", [6, 5])), g.parameter("b1", [5])))
        g.set_outputs([g.matmul(h, g.parameter("w2", [5, width]))])
        return g

    a, b, c = (build_inference_session(two_layer(w)) for w in (3, 3, 2))
    assert sorted(b.share_buffers(a)) == ["b1", "w1", "w2"]
    assert sorted(b.share_buffers(a)) == ["b1", "w1", "w2"]  # again: the same names
    assert sorted(c.share_buffers(a)) == ["b1", "w1"]  # another pair: its own names
    assert c.share_buffers(a, parameters=False) == []  # no state in an MLP
    rng = np.random.default_rng(1)
    w1 = rng.normal(size=(6, 5)).astype(np.float32)
    a.set_parameter("w1", w1)
    for s in (b, c):
        np.testing.assert_array_equal(s.read_param("w1"), w1)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    for s in (a, b):
        s.set_input("x", x)
        s.step()
    np.testing.assert_array_equal(a.read_output_by_index(0), b.read_output_by_index(0))
