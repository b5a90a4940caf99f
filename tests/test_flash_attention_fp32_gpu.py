"""float32 FlashAttention / FlashAttentionGrad on CUDA: the 3xTF32 tensor-core kernels and the SIMT
kernels (``MEGANEURA_FLASH_FP32=simt``, read by the library at each launch), both against float64 numpy.

References: the op table's float64 functions (``flash_reference``; ``flash_backward_reference`` fed
with the float64 forward's output and log-sum-exp), computed from the same float32 inputs. Errors are
measured as max |got - want| / max |want| per output (elementwise ratios blow up near zero).

Expected: both paths at float32's order, about 1e-7 to 1e-6 (the products of 3xTF32 keep ~2^-22 of
their value, float32's own rounding is 2^-24, and both accumulate in float32). Bound: 2e-5, the same
as the other float32 flash tests and ``flash_check``; and the tensor-core error within 10x the SIMT
error (or 2e-6, whichever is larger). Plain TF32 (one product of 10-bit mantissas) gives ~1e-4 to
1e-3 here and fails both.
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
import pytest

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.ops.flash_attention import flash_backward_reference, flash_reference

CUDA_LIB = kc.kernel_library("cuda")
HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers() and CUDA_LIB is not None
PROVIDERS = (("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider")
OUTPUTS = ("out", "lse", "dq", "dk", "dv")
TOL = 2e-5  # max |err| / max |want| for either path
SAME_ORDER = 10.0  # tensor-core error at most this many times the SIMT error ...
FLOOR = 2e-6  # ... or this, when the SIMT error happens to be tiny

CASES = [  # (batch, seq, kv_seq, heads, kv_heads, head_dim, causal): every padded width D of the tensor-core kernels
    (2, 70, 70, 9, 3, 64, True),  # GQA 3:1 (the SmolLM2 head layout), more than one key tile, rows past a tile
    (1, 37, 37, 4, 2, 20, True),  # head_dim 20: D = 32, zero-padded columns
    (2, 33, 50, 4, 1, 128, False),  # cross attention (T != S), D = 128
    (1, 45, 45, 2, 2, 100, True),  # head_dim 100: D = 128, padded
]
IDS = ["b{}-t{}-s{}-h{}-kv{}-hd{}-{}".format(*c[:6], "causal" if c[6] else "full") for c in CASES]


def _session(case):
    b, t, s, h, kvh, hd, causal = case
    g = Graph()
    q, dy = g.input("q", [b * t, h * hd]), g.input("dy", [b * t, h * hd])
    k, v = g.input("k", [b * s, kvh * hd]), g.input("v", [b * s, kvh * hd])
    a = {"num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "causal": causal, "batch": b}
    out, lse = (g.apply("flash_attention", q, k, v, **a, part=p) for p in (0, 1))
    dq, dk, dv = (g.apply("flash_attention_backward", q, k, v, out, dy, lse, **a, part=p) for p in range(3))
    g.set_outputs({"out": out, "lse": lse, "dq": dq, "dk": dk, "dv": dv})
    model, _ = to_model(g)
    return kc.session(model.SerializeToString(), library=CUDA_LIB, providers=PROVIDERS)


def _feeds(case):
    b, t, s, h, kvh, hd, _ = case
    rng = np.random.default_rng(3)
    shapes = {"q": (b * t, h * hd), "k": (b * s, kvh * hd), "v": (b * s, kvh * hd), "dy": (b * t, h * hd)}
    return {n: rng.standard_normal(sh).astype(np.float32) for n, sh in shapes.items()}


def _float64_reference(case, f):
    b, t, s, h, kvh, hd, causal = case
    heads = (h, kvh, hd, causal, b)
    q, k, v, dy = (f[n].astype(np.float64) for n in ("q", "k", "v", "dy"))
    out, lse = flash_reference(q, k, v, *heads)
    dq, dk, dv = flash_backward_reference(q, k, v, out, dy, lse.reshape(-1), *heads)
    return {"out": out, "lse": lse.reshape(-1), "dq": dq, "dk": dk, "dv": dv}


def _errors(got, want) -> dict[str, tuple[float, float]]:
    """(max abs error, max abs error / max |want|) per output."""
    errs = {}
    for name in OUTPUTS:
        ref = want[name].reshape(-1)
        err = float(np.abs(got[name].reshape(-1).astype(np.float64) - ref).max())
        errs[name] = (err, err / float(np.abs(ref).max()))
    return errs


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDAExecutionProvider with the CUDA custom-op library here")
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cuda_float32_tensor_core_kernels_stay_at_the_simt_kernels_float32_error(case, monkeypatch):
    sess, feeds = _session(case), _feeds(case)
    want = _float64_reference(case, feeds)
    got = {}
    for path in ("simt", "3xtf32"):
        if path == "simt":
            monkeypatch.setenv("MEGANEURA_FLASH_FP32", "simt")
        else:
            monkeypatch.delenv("MEGANEURA_FLASH_FP32", raising=False)
        got[path] = dict(zip(OUTPUTS, sess.run(None, feeds), strict=True))
    simt, tc = _errors(got["simt"], want), _errors(got["3xtf32"], want)
    for name in OUTPUTS:  # shown with pytest -s: the measured errors of both paths
        print(f"{name}: SIMT abs {simt[name][0]:.2e} rel {simt[name][1]:.2e}; 3xTF32 abs {tc[name][0]:.2e} rel {tc[name][1]:.2e}")
    # the switch took effect: two different kernels round differently somewhere
    assert any(not np.array_equal(got["simt"][n], got["3xtf32"][n]) for n in OUTPUTS), "MEGANEURA_FLASH_FP32=simt changed nothing"
    for name in OUTPUTS:
        assert simt[name][1] <= TOL, f"SIMT {name}: rel error {simt[name][1]:.2e} > {TOL}"
        assert tc[name][1] <= TOL, f"3xTF32 {name}: rel error {tc[name][1]:.2e} > {TOL}"
        bound = max(SAME_ORDER * simt[name][1], FLOOR)
        assert tc[name][1] <= bound, f"3xTF32 {name}: rel error {tc[name][1]:.2e} > {bound:.2e} (SIMT {simt[name][1]:.2e})"
