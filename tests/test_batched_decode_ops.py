"""A decode step of a batch of sequences, each at its own position, through the Graph API and a
Session: rope (per-sequence dynamic offset) -> cache_write -> cached_attention on [B, ...] tensors
with a U32 [B] kv_pos. Checked against numpy step by step (caches persist as session state), with
and without the kernel library, and the session refuses a position past the cache for any sequence."""

from __future__ import annotations

import numpy as np
import pytest

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.ops.attention import attention_ref
from meganeura_onnx.ops.rope import rope_ref

B, H, KVH, HD, MAX_SEQ, THETA = 3, 4, 2, 8, 12, 10000.0


def decode_graph() -> Graph:
    g = Graph()
    pos = g.input_u32("kv_pos", [B])
    q = g.rope_dynamic_offset(g.input("q", [B, 1, H * HD]), THETA, pos, HD)
    k = g.rope_dynamic_offset(g.input("k", [B, 1, KVH * HD]), THETA, pos, HD)
    k_all = g.cache_write(k, g.input("k_cache", [B, MAX_SEQ, KVH * HD]), pos)
    v_all = g.cache_write(g.input("v", [B, 1, KVH * HD]), g.input("v_cache", [B, MAX_SEQ, KVH * HD]), pos)
    g.set_outputs([g.cached_attention(q, k_all, v_all, pos, H, KVH, HD)])
    return g


@pytest.mark.parametrize("use_custom_ops", [True, False], ids=["kernels", "function_bodies"])
def test_batched_decode_steps_match_numpy_with_per_sequence_positions(use_custom_ops):
    sess = build_inference_session(decode_graph(), use_custom_ops=use_custom_ops, optimize=False)
    rng = np.random.default_rng(3)
    k_cache = np.zeros((B, MAX_SEQ, KVH * HD), np.float32)
    v_cache = np.zeros_like(k_cache)
    positions = np.array([0, 4, 9], np.uint32)  # the sequences are at different lengths
    for _ in range(3):
        q, k, v = (rng.standard_normal((B, 1, w)).astype(np.float32) for w in (H * HD, KVH * HD, KVH * HD))
        for name, x in (("q", q), ("k", k), ("v", v)):
            sess.set_input(name, x)
        sess.set_input_u32("kv_pos", positions)
        sess.step()
        want = []
        for b, p in enumerate(positions.astype(int)):
            k_cache[b, p] = rope_ref(k[b], np.array([p]), THETA, HD)[0]
            v_cache[b, p] = v[b, 0]
            qb = rope_ref(q[b], np.array([p]), THETA, HD)
            want.append(attention_ref(qb, k_cache[b], v_cache[b], H, KVH, HD, np.array([p])))
        np.testing.assert_allclose(sess.read_output_by_index(0).reshape(B, 1, H * HD), np.stack(want), rtol=1e-5, atol=1e-5)
        positions += 1


def test_session_refuses_a_position_past_the_cache_for_any_sequence():
    sess = build_inference_session(decode_graph(), optimize=False)
    assert sess.position_limits == {"kv_pos": MAX_SEQ - 1}
    sess.set_input_u32("kv_pos", [0, MAX_SEQ - 1, 3])
    with pytest.raises(ValueError, match=rf"'kv_pos' = {MAX_SEQ} .*<= {MAX_SEQ - 1}"):
        sess.set_input_u32("kv_pos", [0, MAX_SEQ, 3])


def test_batched_cache_ops_refuse_a_position_count_that_is_not_the_batch():
    g = Graph()
    with pytest.raises(ValueError, match=r"cache_write: kv_pos must be a U32 \[3\] node"):
        g.cache_write(g.input("new", [3, 1, 8]), g.input("cache", [3, 5, 8]), g.input_u32("kv_pos", [1]))
    with pytest.raises(ValueError, match=r"cached_attention: k_cache must be 3-D"):
        g.cached_attention(g.input("q", [2, 1, 8]), g.input("kc", [5, 8]), g.input("vc", [5, 8]), g.input_u32("p", [2]), 1, 1, 8)
