"""CUDA kernels with ``check_positions=0`` (what the graphs our Session builds use): no position
read-back, the same outputs as with the read-back, and an invalid position never written out of
bounds: NaN (Rope, CachedAttention, ScatterAdd) or no write (CacheWrite, RopeCacheWrite).

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import pytest
import test_fused_kernels as fused
import test_kernels_cpu as cpu
from test_positions import attention_reference, check_positions_of, feed, prefill_graph

from meganeura_onnx import build_inference_session

pytestmark = kc.CUDA_SKIPS


def _cases() -> list[tuple[str, dict, dict, np.ndarray, float]]:
    """(op, inputs, attrs, numpy reference, tolerance), one call of each case builder."""
    out = []
    for op, make, args, tol in [
        ("Rope", cpu.rope_case, (5, 64, 32, 3, 1000), cpu.RTOL),
        ("Rope", cpu.batch_rope_case, (3, 4, 32, 16, 0, (7, 0, 100)), cpu.RTOL),
        ("CacheWrite", cpu.cache_write_case, (64, 128, 3, 61), 0.0),
        ("CachedAttention", cpu.attn_case, (2, 8, 2, 64, 300, 250), cpu.ATTN_TOL),
        ("ScatterAdd", cpu.scatter_case, (100, 64, 50, np.int64), cpu.RTOL),
    ]:
        inputs, attrs, _, ref = make(*args)
        out.append((op, inputs, attrs, ref, tol))
    inputs, attrs, ref = fused.rope_cache_write_case(32, 64, 16, 5, 27)
    return [*out, ("RopeCacheWrite", inputs, attrs, ref, fused.RTOL)]


CASES = _cases()


def run_on_cuda(op: str, inputs: dict, attrs: dict, check: int) -> np.ndarray:
    model = kc.make_model(op, inputs, {**attrs, "check_positions": check}, with_function=False)
    return kc.cuda_session(model).run(None, inputs)[0]


@pytest.mark.parametrize("i", range(len(CASES)), ids=[c[0] for c in CASES])
def test_cuda_kernels_without_the_position_read_back_give_the_same_outputs(i):
    op, inputs, attrs, ref, tol = CASES[i]
    checked = run_on_cuda(op, inputs, attrs, 1)
    unchecked = run_on_cuda(op, inputs, attrs, 0)
    np.testing.assert_allclose(unchecked, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(unchecked, checked, rtol=tol, atol=tol)


def _invalid(op: str) -> tuple[dict, dict]:
    """A case of ``op`` whose position (or index) is out of range, and its attributes."""
    if op == "Rope":
        inputs, attrs, _, _ = cpu.rope_case(4, 32, 16, 0, 0)
        return {**inputs, "offset_dyn": np.array([(1 << 40) + 1], np.int64)}, attrs
    if op == "CacheWrite":
        inputs, attrs, _, _ = cpu.cache_write_case(16, 64, 3, 0)
        return {**inputs, "kv_pos": np.array([14], np.int64)}, attrs  # rows 14..16 of 16
    if op == "CachedAttention":
        inputs, attrs, _, _ = cpu.attn_case(1, 4, 2, 64, 40, 0)
        return {**inputs, "kv_pos": np.array([40], np.int64)}, attrs
    if op == "ScatterAdd":
        inputs, attrs, _, _ = cpu.scatter_case(10, 8, 5, np.int64)
        inputs["indices"][3] = 5
        return inputs, attrs
    inputs, attrs, _ = fused.rope_cache_write_case(16, 32, 16, 2, 0)
    return {**inputs, "kv_pos": np.array([15], np.int64)}, attrs


@pytest.mark.parametrize("op", ["Rope", "CacheWrite", "CachedAttention", "ScatterAdd", "RopeCacheWrite"])
def test_without_the_read_back_an_invalid_position_gives_nan_or_no_write(op):
    """No error (nothing was read back), never out of bounds (run the suite under compute-sanitizer
    to see that): NaN where the op computes, the cache unchanged where it writes."""
    inputs, attrs = _invalid(op)
    got = run_on_cuda(op, inputs, attrs, 0)
    if op in ("CacheWrite", "RopeCacheWrite"):
        np.testing.assert_array_equal(got, inputs["cache"])
    else:
        assert np.isnan(got).all(), got
    kc.assert_ort_error(lambda: run_on_cuda(op, inputs, attrs, 1), op)  # with the read-back: the kernels' own error


def test_a_cuda_session_without_cuda_graph_runs_prefill_without_read_back_and_checks_positions_itself():
    gpu = build_inference_session(prefill_graph(), "cuda")
    assert set(sum(check_positions_of(gpu.onnx_model()).values(), [])) == {0}
    data = feed(gpu, rows=5, kv_pos=3)
    gpu.step()
    np.testing.assert_allclose(gpu.read_output_by_index(0), attention_reference(data, 3), rtol=cpu.ATTN_TOL, atol=cpu.ATTN_TOL)
    gpu.set_input_u32("kv_pos", [4])  # valid for one row, not for this step's 5
    with pytest.raises(ValueError, match=r"'kv_pos' = 4 .*<= 3"):
        gpu.step()


def test_a_cuda_train_step_with_rope_and_embedding_has_no_read_back_and_no_host_copy():
    """The train step's position ops (Rope's static offset, the embedding gradient's ScatterAdd) are
    told not to read back, and ORT places no Memcpy node in the step (nothing crosses to the host)."""
    from meganeura_onnx import Graph
    from meganeura_onnx.runtime.training import build_session

    g = Graph()
    x = g.embedding(g.input_u32("ids", [8]), g.parameter("emb", [32, 16]))
    x = g.rope(g.matmul(x, g.parameter("w", [16, 16])), 10000.0, 8)
    g.set_outputs([g.sparse_cross_entropy_loss(g.matmul(x, g.parameter("out", [16, 32])), g.input_u32("labels", [8]))])
    s = build_session(g, "cuda", optimizer="adamw")
    found = check_positions_of(s.onnx_model())
    assert set(found) >= {"Rope", "ScatterAdd"} and set(sum(found.values(), [])) == {0}, found
    placement = s.plan().placement
    assert not [p for p in placement if "Memcpy" in p[2]], placement
    s.set_input_u32("ids", np.arange(8))
    s.set_input_u32("labels", np.arange(8)[::-1].copy())
    s.step()
    assert np.isfinite(s.read_loss())
