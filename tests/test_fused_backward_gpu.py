"""The CUDA kernels of the fused backward ops (SwiGLUGrad: SwiGLU's backward, two outputs; RMSNormGrad:
RMSNorm's dx and dweight, dweight in two fixed-order stages): placement on CUDAExecutionProvider, float32 against the float64
reference and the CPU kernel, float16 / bfloat16 against the float32 math of the rounded inputs,
sizes that leave a tail after the 16-byte chunks or a partial last pass over a row.

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import fused_backward_cases as sg
import kernel_cases as kc
import numpy as np
import pytest

pytestmark = kc.CUDA_SKIPS
# One element; widths that are not a multiple of 4 or 8 or of the block; SmolLM2's MLP (1536) and
# hidden (576) widths for 8 x 256 tokens.
CASES = [("SwiGLUGrad", s) for s in [(1, 1), (7, 33), (3, 5, 1001), (2048, 1536)]]
# RMSNormGrad: 1025 rows leave a short last block of rows for dweight's partial sums (3 rows per block);
# 12289 columns do not fit shared memory (the partial sums stay in global memory).
CASES += [("RMSNormGrad", s) for s in [(1, 1), (7, 33), (5, 1001), (2048, 576), (1025, 40), (3, 12289)]]
IDS = [f"{op}-{'x'.join(map(str, s))}" for op, s in CASES]


@pytest.mark.parametrize("op,shape", CASES, ids=IDS)
def test_cuda_fused_backward_matches_numpy_and_the_cpu_kernel_and_runs_on_cuda(op, shape, tmp_path):
    sessions = []

    def on_cuda(m):
        sessions.append(kc.cuda_session(m, profile_prefix=str(tmp_path / "cuda")))
        return sessions[-1]

    got = sg.check_float32(on_cuda, op, shape)
    placed = [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sessions[0]) if n["op_name"] == op]
    assert placed == [(op, "CUDAExecutionProvider")]
    on_cpu = sg.check_float32(lambda m: kc.session(m, library=kc.CUDA_LIB), op, shape)  # the CUDA library serves CPU sessions too
    feeds, _ = sg.case(op, shape)
    for name, g, c in zip(sg.OPS[op][2], got, on_cpu, strict=True):
        # dweight sums the rows in another order on each device: each is within 1e-6 of its terms'
        # magnitudes of the float64 value (check_float32), so the two are within twice that.
        atol = np.maximum(1e-5, 2e-6 * sg.dweight_terms(feeds)) if name == "dweight" else 1e-5
        excess = np.abs(g.astype(np.float64) - c) - (atol + 1e-5 * np.abs(c))
        worst = np.unravel_index(np.argmax(excess), excess.shape)
        assert excess[worst] <= 0, f"{op}.{name} at {worst}: CUDA {g[worst]}, CPU {c[worst]}"


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op,shape", CASES, ids=IDS)
def test_half_precision_cuda_fused_backward_matches_the_float32_math(op, shape, dtype):
    sg.check_half(kc.cuda_session, op, shape, dtype)


def test_cuda_rms_norm_grad_without_dweight_writes_dx_and_dweight_is_deterministic():
    import onnx

    feeds, (want_dx, _) = sg.case("RMSNormGrad", (2048, 576))
    full = kc.cuda_session(sg.model("RMSNormGrad", feeds))
    runs = [full.run(None, feeds)[1] for _ in range(3)]
    assert all(np.array_equal(r.view(np.uint32), runs[0].view(np.uint32)) for r in runs)
    m = onnx.load_from_string(sg.model("RMSNormGrad", feeds))
    del m.graph.node[0].output[1:]
    del m.graph.output[1:]
    (dx,) = kc.cuda_session(m.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=1e-5)
