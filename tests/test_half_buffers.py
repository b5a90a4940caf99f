"""Half-precision device buffers: every write lands in its own buffer, also when the session that
owns them replays CUDA graphs (the cast sessions must not capture: a graph replays the addresses
of its first run)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from meganeura_onnx.runtime.half import HalfBuffers, _without_cuda_graph


def test_cast_sessions_drop_only_the_cuda_graph_option():
    given = [("CUDAExecutionProvider", {"enable_cuda_graph": "1", "use_tf32": "0"}), "CPUExecutionProvider"]
    assert _without_cuda_graph(given) == [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
    assert given[0][1]["enable_cuda_graph"] == "1"  # the caller's list is not modified


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_many_half_buffers_each_keep_their_own_values_on_cpu(dtype):
    _check_many_buffers(HalfBuffers(dtype, "cpu", ["CPUExecutionProvider"]))


@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(), reason="no CUDAExecutionProvider here")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_many_half_buffers_each_keep_their_own_values_with_cuda_graph_providers(dtype):
    providers = [("CUDAExecutionProvider", {"enable_cuda_graph": "1"}), "CPUExecutionProvider"]
    _check_many_buffers(HalfBuffers(dtype, "cuda", providers))


def _check_many_buffers(buffers: HalfBuffers) -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in [(16, 8), (8,), (16, 8), (3, 5, 2)]]
    values = [buffers.new(np.zeros(a.shape, np.float32)) for a in arrays]
    for value, a in zip(values, arrays, strict=True):
        buffers.write(value, a)
    rel = 2.0**-11 if buffers.dtype == "float16" else 2.0**-8  # rounding to nearest: half an ulp
    for value, a in zip(values, arrays, strict=True):
        np.testing.assert_allclose(buffers.read(value), a, rtol=rel, atol=1e-7)
