"""Position inputs validated by the Session (on upload and against each step's shapes), so that the
graphs it builds mark their position ops ``check_positions=0`` (the CUDA kernels then skip their
read-back and stream sync); ONNX files exported for other runtimes keep the kernels' own checks."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import pytest
from onnx import helper

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.export import to_model
from meganeura_onnx.ops import OPS
from meganeura_onnx.runtime.positions import skip_kernel_position_checks

POSITION_OPS = {d.custom.name for d in OPS.values() if d.positions and d.custom is not None}
MAX_SEQ, HEADS, KV_HEADS, HD = 8, 2, 1, 4


def prefill_graph(rows="T") -> Graph:
    """Rope + CacheWrite + CachedAttention over ``rows`` new rows (symbolic: a prefill of any length)."""
    g = Graph()
    pos = g.input_u32("kv_pos", [1])
    q = g.rope_dynamic_offset(g.input("q", [rows, HEADS * HD]), 10000.0, pos, HD)
    k = g.cache_write(g.input("k_new", [rows, KV_HEADS * HD]), g.input("k_cache", [MAX_SEQ, KV_HEADS * HD]), pos)
    v = g.cache_write(g.input("v_new", [rows, KV_HEADS * HD]), g.input("v_cache", [MAX_SEQ, KV_HEADS * HD]), pos)
    g.set_outputs([g.cached_attention(q, k, v, pos, HEADS, KV_HEADS, HD)])
    return g


def feed(s, rows: int, kv_pos: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = {
        "q": rng.standard_normal((rows, HEADS * HD)).astype(np.float32),
        "k_new": rng.standard_normal((rows, KV_HEADS * HD)).astype(np.float32),
        "v_new": rng.standard_normal((rows, KV_HEADS * HD)).astype(np.float32),
    }
    for name, x in data.items():
        s.set_input(name, x)
    s.set_input_u32("kv_pos", [kv_pos])
    return data


def attention_reference(data, kv_pos: int) -> np.ndarray:
    q = kc.rope_ref(data["q"], 10000.0, HD, kv_pos)
    zeros = np.zeros((MAX_SEQ, KV_HEADS * HD), np.float32)
    k = kc.cache_write_ref(data["k_new"], zeros, kv_pos)
    v = kc.cache_write_ref(data["v_new"], zeros, kv_pos)
    return kc.cached_attention_ref(q, k, v, kv_pos, HEADS, KV_HEADS, HD)


def check_positions_of(model) -> dict[str, list[int]]:
    """ONNX op -> the check_positions of each of its nodes (1 where the attribute is absent)."""
    found: dict[str, list[int]] = {}
    for n in model.graph.node:
        if n.op_type in POSITION_OPS:
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            found.setdefault(n.op_type, []).append(attrs.get("check_positions", 1))
    return found


@pytest.mark.parametrize("kernels", [False, True], ids=["function-bodies", "kernels"])
def test_a_prefill_position_past_the_cache_is_refused_by_step_at_that_steps_row_count(kernels):
    if kernels and kc.kernel_library("cpu") is None:
        pytest.skip("custom-op library not built (make kernels)")
    s = build_inference_session(prefill_graph(), use_custom_ops=kernels)
    assert s.position_limits == {"kv_pos": MAX_SEQ - 1}  # on upload: the symbolic row count as one row
    data = feed(s, rows=5, kv_pos=4)  # accepted on upload: 4 <= 7, but 4 + 5 rows > 8
    with pytest.raises(ValueError) as info:
        s.step()
    msg = str(info.value)
    assert "'kv_pos' = 4" in msg and "<= 3" in msg and "T=5" in msg, msg
    s.set_input_u32("kv_pos", [3])  # the last valid position at 5 rows runs
    s.step()
    np.testing.assert_allclose(s.read_output_by_index(0), attention_reference(data, 3), rtol=1e-4, atol=1e-5)
    feed(s, rows=8, kv_pos=1)  # a longer prefill: the limit shrinks to 0
    with pytest.raises(ValueError, match=r"'kv_pos' = 1 .*<= 0"):
        s.step()


def test_more_prefill_rows_than_the_cache_holds_are_refused_even_at_position_0():
    s = build_inference_session(prefill_graph(), use_custom_ops=False)
    feed(s, rows=MAX_SEQ + 1, kv_pos=0)
    with pytest.raises(ValueError, match=r"'kv_pos' = 0 .*<= -1"):
        s.step()


def test_session_graphs_skip_the_kernel_position_checks_and_exported_files_keep_them():
    g = prefill_graph()
    exported, _ = to_model(g)
    assert check_positions_of(exported) == {"Rope": [1], "CacheWrite": [1, 1], "CachedAttention": [1]}
    s = build_inference_session(g, use_custom_ops=False, optimize=False)
    assert check_positions_of(s.onnx_model()) == {"Rope": [0], "CacheWrite": [0, 0], "CachedAttention": [0]}


def test_a_position_the_session_does_not_check_keeps_the_kernel_check():
    exported, _ = to_model(prefill_graph())
    assert skip_kernel_position_checks(exported, checked=()) == 0  # kv_pos is not validated by anyone
    assert set(sum(check_positions_of(exported).values(), [])) == {1}
    assert skip_kernel_position_checks(exported, checked=("kv_pos",)) == 4


def test_training_graph_rope_nodes_need_no_position_read_back():
    """The train step's Rope nodes take the static offset [0]: a constant, so the kernels are told
    not to read it back (on CUDA each read-back was a stream sync: ~15% of a node-by-node step)."""
    from meganeura_onnx.runtime.training import build_session

    g = Graph()
    x = g.rope(g.matmul(g.input("x", [4, 8]), g.parameter("w", [8, 8])), 10000.0, 4)
    g.set_outputs([g.mse_loss(x, g.input("y", [4, 8]))])
    s = build_session(g, optimizer="sgd")
    ropes = check_positions_of(s.onnx_model())["Rope"]
    assert len(ropes) == 2 and set(ropes) == {0}  # forward rope and its transpose in the backward pass


def test_training_token_ids_are_checked_on_upload_so_scatter_add_needs_no_read_back():
    from meganeura_onnx.runtime.training import build_session

    g = Graph()
    x = g.embedding(g.input_u32("ids", [4]), g.parameter("emb", [10, 8]))
    g.set_outputs([g.mse_loss(x, g.input("y", [4, 8]))])
    s = build_session(g, optimizer="sgd")
    assert check_positions_of(s.onnx_model())["ScatterAdd"] == [0]  # the embedding's gradient
    s.set_input_u32("ids", [9, 0, 3, 3])
    with pytest.raises(ValueError) as info:
        s.set_input_u32("ids", [1, 10, 3, 3])
    msg = str(info.value)
    assert "'ids' = 10" in msg and "<= 9" in msg and "table (10 rows)" in msg, msg


@pytest.mark.skipif(kc.kernel_library("cpu") is None, reason="custom-op library not built (make -C custom_ops cpu)")
@pytest.mark.parametrize("op", ["CacheWrite", "CachedAttention", "Rope", "ScatterAdd"])
def test_cpu_kernels_check_positions_even_when_told_not_to(op):
    f32 = np.random.default_rng(0).standard_normal
    if op == "CacheWrite":
        inputs = {"new": f32((2, 4)).astype(np.float32), "cache": f32((6, 4)).astype(np.float32), "kv_pos": np.array([5], np.int64)}
        attrs, match = {}, "5"
    elif op == "CachedAttention":
        inputs = {
            "Q": f32((1, 8)).astype(np.float32),
            "K": f32((6, 4)).astype(np.float32),
            "V": f32((6, 4)).astype(np.float32),
            "kv_pos": np.array([6], np.int64),
        }
        attrs, match = {"num_heads": 2, "num_kv_heads": 1, "head_dim": 4}, "6"
    elif op == "ScatterAdd":
        inputs = {"indices": np.array([0, 4, 1], np.int64), "src": f32((3, 2)).astype(np.float32)}
        attrs, match = {"num_rows": 4}, "4"
    else:
        inputs = {"X": f32((3, 8)).astype(np.float32), "offset_dyn": np.array([-1], np.int64)}
        attrs, match = {"theta": 1e4, "head_dim": 4, "offset": 0}, "-1"
    model = kc.make_model(op, inputs, {**attrs, "check_positions": 0}, with_function=False)
    kc.assert_ort_error(lambda: kc.session(model, library=kc.kernel_library("cpu")).run(None, inputs), op, [match])
