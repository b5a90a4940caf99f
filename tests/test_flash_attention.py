"""Fused training attention (``flash_attention`` -> ``com.meganeura.FlashAttention`` / ``FlashAttentionGrad``).

References: the unfused attention's numpy functions (``attention_ref``, ``_attention_backward_ref``)
and central finite differences of a float64 numpy attention. Each graph runs three ways: the CPU
kernels, the ONNX function bodies (no library) and, where there is a GPU, the CUDA kernels.
"""

from __future__ import annotations

import sys
from pathlib import Path

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
import pytest

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.ops.attention import _attention_backward_ref, attention_ref
from meganeura_onnx.ops.flash_attention import flash_reference
from meganeura_onnx.runtime.training import build_session

CPU_LIB = kc.kernel_library("cpu")
CUDA_LIB = kc.kernel_library("cuda")
HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers() and CUDA_LIB is not None
needs_cpu_lib = pytest.mark.skipif(CPU_LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
TOL = 2e-5

CASES = [  # (batch, seq, kv_seq, heads, kv_heads, head_dim, causal)
    (1, 7, 7, 2, 2, 8, True),
    (2, 9, 9, 4, 2, 16, True),  # GQA, two sequences
    (3, 5, 5, 6, 2, 4, True),
    (2, 6, 11, 3, 1, 8, False),  # cross attention, GQA
    (1, 70, 70, 2, 1, 64, True),  # more than one key tile
    (2, 33, 33, 3, 3, 12, False),
]
IDS = ["b{}-t{}-s{}-h{}-kv{}-hd{}-{}".format(*c[:6], "causal" if c[6] else "full") for c in CASES]


def _graph(b, t, s, h, kvh, hd, causal):
    g = Graph()
    q = g.input("q", [b * t, h * hd])
    k, v = g.input("k", [b * s, kvh * hd]), g.input("v", [b * s, kvh * hd])
    dy = g.input("dy", [b * t, h * hd])
    a = {"num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "causal": causal, "batch": b}
    out, lse = (g.apply("flash_attention", q, k, v, **a, part=p) for p in (0, 1))
    grads = [g.apply("flash_attention_backward", q, k, v, out, dy, lse, **a, part=p) for p in range(3)]
    g.set_outputs({"out": out, "lse": lse, "dq": grads[0], "dk": grads[1], "dv": grads[2]})
    return g


def _feeds(b, t, s, h, kvh, hd, seed=0):
    rng = np.random.default_rng(seed)
    shapes = {"q": (b * t, h * hd), "k": (b * s, kvh * hd), "v": (b * s, kvh * hd), "dy": (b * t, h * hd)}
    return {n: rng.standard_normal(sh).astype(np.float32) for n, sh in shapes.items()}


def _run(case, library, providers=("CPUExecutionProvider",)):
    model, _ = to_model(_graph(*case))
    sess = kc.session(model.SerializeToString(), library=library, providers=providers)
    feeds = _feeds(*case[:6])
    return feeds, dict(zip(["out", "lse", "dq", "dk", "dv"], sess.run(None, feeds), strict=True))


def _unfused_reference(case, f):
    """Output and gradients from the unfused attention's numpy functions, sequence by sequence."""
    b, t, s, h, kvh, hd, causal = case
    blocks = list(zip(*(np.split(f[n], b) for n in ("q", "k", "v", "dy")), strict=True))
    pos = np.arange(t) if causal else None
    out = np.concatenate([attention_ref(q, k, v, h, kvh, hd, pos) for q, k, v, _ in blocks])
    grads = [_attention_backward_ref(*blk, h, kvh, hd, causal) for blk in blocks]
    dq, dk, dv = (np.concatenate([gr[i].reshape(-1, w) for gr in grads]) for i, w in enumerate((h * hd, kvh * hd, kvh * hd)))
    return {"out": out, "dq": dq, "dk": dk, "dv": dv}


def _assert_matches_references(case, feeds, got):
    want = _unfused_reference(case, feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=TOL, atol=TOL, err_msg=name)
    _, lse = flash_reference(*(feeds[n] for n in "qkv"), *case[3:6], case[6], case[0])
    np.testing.assert_allclose(got["lse"], lse.reshape(-1), rtol=TOL, atol=TOL, err_msg="lse")


@needs_cpu_lib
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cpu_kernels_match_the_unfused_numpy_attention_and_its_gradient(case):
    feeds, got = _run(case, CPU_LIB)
    _assert_matches_references(case, feeds, got)


@pytest.mark.parametrize("case", CASES[:4], ids=IDS[:4])
def test_function_bodies_match_the_unfused_numpy_attention_and_its_gradient(case):
    feeds, got = _run(case, None)
    _assert_matches_references(case, feeds, got)


@needs_cpu_lib
@pytest.mark.parametrize("case", CASES[1:4], ids=IDS[1:4])
def test_cpu_kernels_equal_the_function_bodies(case):
    _, kernel = _run(case, CPU_LIB)
    _, body = _run(case, None)
    for name in kernel:
        np.testing.assert_allclose(kernel[name], body[name], rtol=TOL, atol=TOL, err_msg=name)


def _loss64(q, k, v, w, case):
    """sum(attention(q, k, v) * w) in float64 (a scalar whose gradient wrt q, k, v the backward gives with dy = w)."""
    b, t, s, h, kvh, hd, causal = case
    rep, total = h // kvh, 0.0
    for bi in range(b):
        qs, ks, vs, ws = (x[bi * n : (bi + 1) * n] for x, n in ((q, t), (k, s), (v, s), (w, t)))
        qh = qs.reshape(t, h, hd).transpose(1, 0, 2)
        kh = np.repeat(ks.reshape(s, kvh, hd).transpose(1, 0, 2), rep, axis=0)
        vh = np.repeat(vs.reshape(s, kvh, hd).transpose(1, 0, 2), rep, axis=0)
        sc = qh @ kh.transpose(0, 2, 1) / np.sqrt(hd)
        if causal:
            sc = np.where(np.arange(s)[None, :] > np.arange(t)[:, None], -np.inf, sc)
        p = np.exp(sc - sc.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        total += float(((p @ vh).transpose(1, 0, 2).reshape(t, h * hd) * ws).sum())
    return total


@needs_cpu_lib
@pytest.mark.parametrize("case", [(2, 4, 4, 4, 2, 4, True), (1, 3, 5, 2, 1, 4, False)], ids=["causal-gqa-b2", "cross-gqa"])
def test_cpu_backward_kernel_matches_finite_differences(case):
    feeds, got = _run(case, CPU_LIB)
    x64 = {n: a.astype(np.float64) for n, a in feeds.items()}
    eps = 1e-6
    rng = np.random.default_rng(1)
    for name, grad in (("q", "dq"), ("k", "dk"), ("v", "dv")):
        for idx in map(tuple, rng.integers(0, x64[name].shape, size=(6, 2))):
            plus, minus = dict(x64), dict(x64)
            plus[name], minus[name] = x64[name].copy(), x64[name].copy()
            plus[name][idx] += eps
            minus[name][idx] -= eps
            fd = (
                _loss64(plus["q"], plus["k"], plus["v"], x64["dy"], case) - _loss64(minus["q"], minus["k"], minus["v"], x64["dy"], case)
            ) / (2 * eps)
            assert abs(got[grad][idx] - fd) <= 1e-4 * max(1.0, abs(fd)), (name, idx, got[grad][idx], fd)


def test_the_fused_builder_builds_flash_attention_with_a_public_batch_argument():
    g = Graph()
    q, k, v = g.input("q", [8, 16]), g.input("k", [8, 8]), g.input("v", [8, 8])
    fused = g.causal_attention(q, k, v, 4, 2, 4, batch=2, fused=True)
    plain = g.causal_attention(q, k, v, 4, 2, 4, batch=2)
    assert g.node(fused).op == "flash_attention" and g.node(fused).attrs["batch"] == 2 and g.node(fused).attrs["causal"]
    assert g.node(plain).op == "causal_attention" and g.node(plain).attrs["batch"] == 2
    with pytest.raises(ValueError, match="batch=3 must divide the rows"):
        g.causal_attention(q, k, v, 4, 2, 4, batch=3, fused=True)


def test_the_log_sum_exp_output_refuses_to_be_differentiated():
    from meganeura_onnx.ops import OPS

    g = Graph()
    q, k, v = g.parameter("q", [4, 8]), g.parameter("k", [4, 4]), g.parameter("v", [4, 4])
    lse = g.apply("flash_attention", q, k, v, num_heads=2, num_kv_heads=1, head_dim=4, causal=True, part=1)
    with pytest.raises(ValueError, match="log-sum-exp"):
        OPS["flash_attention"].vjp_rule(g, g.node(lse), lse)


def _tiny_llama():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
    import tiny_llama

    return tiny_llama


def _fused_and_unfused_steps(device: str) -> dict:
    """Three SGD steps of a tiny LLaMA (2 layers, GQA, 3 sequences) with and without fused attention
    (SGD: the parameters move by the gradients themselves; Adam's m / sqrt(v) would magnify float32
    rounding in near-zero gradients into visible parameter differences)."""
    tiny_llama = _tiny_llama()
    cfg = {"vocab": 32, "hidden": 32, "heads": 4, "kv_heads": 2, "intermediate": 48, "layers": 2, "seq": 8, "batch": 3}
    rng = np.random.default_rng(0)
    ids, labels = (rng.integers(0, 32, size=24).astype(np.uint32) for _ in range(2))
    results = {}
    for fused in (False, True):
        graph = tiny_llama.build(**cfg, fused_attention=fused)
        assert any(n.op == "flash_attention" for n in graph.nodes()) == fused
        s = build_session(graph, device, optimizer="sgd", seed=0)
        s.set_learning_rate(0.5)
        losses = []
        for _ in range(3):
            s.set_input_u32("input_ids", ids)
            s.set_input_u32("labels", labels)
            s.step()
            losses.append(s.read_loss())
        results[fused] = (np.array(losses), {n: s.read_param(n) for n in s.parameter_names()})
    return results


@needs_cpu_lib
def test_a_tiny_llama_training_step_with_fused_attention_equals_the_unfused_one():
    results = _fused_and_unfused_steps("cpu")
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-5)
    for name, p in results[False][1].items():
        np.testing.assert_allclose(results[True][1][name], p, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDAExecutionProvider with the CUDA custom-op library here")
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cuda_kernels_match_the_unfused_numpy_attention_and_its_gradient(case):
    providers = (("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider")
    feeds, got = _run(case, CUDA_LIB, providers)
    _assert_matches_references(case, feeds, got)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDAExecutionProvider with the CUDA custom-op library here")
def test_cuda_training_steps_with_fused_attention_equal_the_unfused_ones():
    results = _fused_and_unfused_steps("cuda")
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-5)
    for name, p in results[False][1].items():
        np.testing.assert_allclose(results[True][1][name], p, rtol=1e-5, atol=1e-6, err_msg=name)
