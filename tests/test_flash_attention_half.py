"""FlashAttention / FlashAttentionGrad in float16 and bfloat16: every tensor in the half type but the
log-sum-exp (float32), float32 arithmetic inside.

References: the op table's float64 numpy functions (``flash_reference``, ``flash_backward_reference``)
of the inputs rounded to the half type (ml_dtypes), their outputs rounded to it too. The CPU kernels
compute in float32 and round each output once, so they stay within one unit in the last place; the
CUDA kernels also round the probabilities and dS to the half type for their tensor-core GEMMs
(a looser bound, checked on the GPU). The precision pass keeps the ops in half with a float32
log-sum-exp; ``plan()`` reports it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import kernel_cases as kc
import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.export.precision import lower_precision
from meganeura_onnx.ops.flash_attention import flash_backward_reference, flash_reference
from meganeura_onnx.runtime.training import build_session

CPU_LIB = kc.kernel_library("cpu")
CUDA_LIB = kc.kernel_library("cuda")
HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers() and CUDA_LIB is not None
needs_cpu_lib = pytest.mark.skipif(CPU_LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
HALF = {"float16": (np.float16, TensorProto.FLOAT16), "bfloat16": (ml_dtypes.bfloat16, TensorProto.BFLOAT16)}
ULP = {"float16": 2.0**-10, "bfloat16": 2.0**-7}  # one unit in the last place, relative

CASES = [  # (batch, seq, kv_seq, heads, kv_heads, head_dim, causal)
    (2, 9, 9, 4, 2, 16, True),  # GQA, two sequences
    (1, 6, 11, 3, 1, 8, False),  # cross attention
    (1, 70, 70, 2, 1, 64, True),  # more than one key tile (and the CUDA tensor-core path)
]
IDS = ["b{}-t{}-s{}-h{}-kv{}-hd{}-{}".format(*c[:6], "causal" if c[6] else "full") for c in CASES]


def _half_model(case, dtype: str) -> bytes:
    """float32 inputs cast to the half type, FlashAttention then FlashAttentionGrad in it (LSE float32
    between them, no cast), every half output cast back to float32 for numpy."""
    b, t, s, h, kvh, hd, causal = case
    half = HALF[dtype][1]
    attrs = {"num_heads": h, "num_kv_heads": kvh, "head_dim": hd, "causal": int(causal)}
    shapes = {"q": [b, t, h * hd], "k": [b, s, kvh * hd], "v": [b, s, kvh * hd], "dy": [b, t, h * hd]}
    nodes = [helper.make_node("Cast", [n], [f"{n}_h"], to=half) for n in shapes]
    nodes.append(helper.make_node("FlashAttention", ["q_h", "k_h", "v_h"], ["y_h", "lse"], domain=kc.DOMAIN, **attrs))
    grad_in = ["q_h", "k_h", "v_h", "y_h", "dy_h", "lse"]
    nodes.append(helper.make_node("FlashAttentionGrad", grad_in, ["dq_h", "dk_h", "dv_h"], domain=kc.DOMAIN, **attrs))
    nodes += [helper.make_node("Cast", [f"{n}_h"], [n], to=TensorProto.FLOAT) for n in ("y", "dq", "dk", "dv")]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, sh) for n, sh in shapes.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "lse", "dq", "dk", "dv")]
    model = helper.make_model(
        helper.make_graph(nodes, "flash_half", ins, outs),
        opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)],
    )
    model.ir_version = 10
    return model.SerializeToString()


def _run(case, dtype: str, library: str, providers=("CPUExecutionProvider",)):
    b, t, s, h, kvh, hd, _ = case
    rng = np.random.default_rng(1)
    shapes = {"q": (b, t, h * hd), "k": (b, s, kvh * hd), "v": (b, s, kvh * hd), "dy": (b, t, h * hd)}
    np_half = HALF[dtype][0]
    feeds = {n: rng.standard_normal(sh).astype(np_half).astype(np.float32) for n, sh in shapes.items()}  # exact in half
    sess = kc.session(_half_model(case, dtype), library=library, providers=providers)
    return feeds, dict(zip(["y", "lse", "dq", "dk", "dv"], sess.run(None, feeds), strict=True))


def _references(case, dtype: str, feeds, got):
    """float64 references rounded to the half type: the forward of the inputs; the backward of the
    inputs with the kernel's own (half) output and (float32) log-sum-exp, which are its inputs."""
    b, t, s, h, kvh, hd, causal = case
    flat = {n: a.reshape(-1, a.shape[-1]).astype(np.float64) for n, a in feeds.items()}
    heads = (h, kvh, hd, causal, b)
    y, lse = flash_reference(flat["q"], flat["k"], flat["v"], *heads)
    y_got = got["y"].reshape(-1, h * hd).astype(np.float64)
    dq, dk, dv = flash_backward_reference(flat["q"], flat["k"], flat["v"], y_got, flat["dy"], got["lse"].astype(np.float64), *heads)
    rounded = {n: x.astype(HALF[dtype][0]).astype(np.float64) for n, x in {"y": y, "dq": dq, "dk": dk, "dv": dv}.items()}
    return {**rounded, "lse": lse.reshape(-1)}


def _assert_close(case, dtype, feeds, got, tol: float):
    want = _references(case, dtype, feeds, got)
    assert got["lse"].dtype == np.float32 and got["lse"].shape == (case[0], case[3], case[1])
    np.testing.assert_allclose(got["lse"].reshape(-1), want["lse"], rtol=1e-5, atol=1e-5, err_msg="lse (float32)")
    for name in ("y", "dq", "dk", "dv"):
        ref = want[name]
        scale = np.abs(ref).max()
        np.testing.assert_allclose(got[name].reshape(ref.shape), ref, rtol=tol, atol=tol * scale, err_msg=f"{dtype} {name}")


@needs_cpu_lib
@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cpu_half_kernels_match_numpy_on_half_rounded_inputs_within_one_ulp(case, dtype):
    feeds, got = _run(case, dtype, CPU_LIB)
    _assert_close(case, dtype, feeds, got, ULP[dtype])


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDAExecutionProvider with the CUDA custom-op library here")
@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cuda_half_kernels_match_numpy_on_half_rounded_inputs(case, dtype):
    providers = (("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider")
    feeds, got = _run(case, dtype, CUDA_LIB, providers)
    # P and dS rounded to the half type for the tensor-core GEMMs: a few units in the last place.
    _assert_close(case, dtype, feeds, got, 4 * ULP[dtype])


def _tiny_llama_graph():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
    import tiny_llama

    cfg = {"vocab": 32, "hidden": 32, "heads": 4, "kv_heads": 2, "intermediate": 48, "layers": 1, "seq": 8, "batch": 2}
    return tiny_llama.build(**cfg, fused_attention=True)


def _forward_and_backward_graph() -> Graph:
    g = Graph()
    q, k, v, dy = (g.input(n, [2 * 5, 4 * 8]) for n in ("q", "k", "v", "dy"))
    a = {"num_heads": 4, "num_kv_heads": 4, "head_dim": 8, "causal": True, "batch": 2}
    out, lse = (g.apply("flash_attention", q, k, v, **a, part=p) for p in (0, 1))
    dq, dk, dv = (g.apply("flash_attention_backward", q, k, v, out, dy, lse, **a, part=p) for p in range(3))
    g.set_outputs({"out": out, "dq": dq, "dk": dk, "dv": dv})
    return g


@needs_cpu_lib
def test_the_precision_pass_keeps_flash_attention_in_half_with_a_float32_log_sum_exp():
    model, _ = to_model(_forward_and_backward_graph())
    lowered, report = lower_precision(model, "bf16", device="cuda")
    by_prec = report.by_precision()["bfloat16"]
    assert by_prec.get("com.meganeura.FlashAttention") == 1 and by_prec.get("com.meganeura.FlashAttentionGrad") == 1
    producer = {o: n for n in lowered.graph.node for o in n.output}
    flash = next(n for n in lowered.graph.node if n.op_type == "FlashAttention")
    grad = next(n for n in lowered.graph.node if n.op_type == "FlashAttentionGrad")

    def origin(name: str) -> onnx.NodeProto:  # the node that made a tensor, seen through reshapes (exact in any type)
        while producer[name].op_type == "Reshape":
            name = producer[name].input[0]
        return producer[name]

    for name in (*flash.input, *grad.input[:5]):  # q, k, v, dy cast to bfloat16 once; out read as flash made it
        node = origin(name)
        assert node is flash or (node.op_type == "Cast" and node.attribute[0].i == TensorProto.BFLOAT16), node
    assert origin(grad.input[5]) is flash  # the float32 log-sum-exp, never cast on its way
    # ORT accepts the typed nodes (kernels registered for bfloat16 with a float32 LSE) and they compute attention
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32) for i in model.graph.input}
    got = dict(
        zip([o.name for o in lowered.graph.output], kc.session(lowered.SerializeToString(), library=CPU_LIB).run(None, feeds), strict=True)
    )
    want = dict(
        zip([o.name for o in model.graph.output], kc.session(model.SerializeToString(), library=CPU_LIB).run(None, feeds), strict=True)
    )
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=4 * ULP["bfloat16"] * np.abs(ref).max(), err_msg=name)


@needs_cpu_lib
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_half_training_session_runs_flash_attention_kernels_in_half_and_plan_says_so(precision):
    s = build_session(_tiny_llama_graph(), "cpu", optimizer="sgd", seed=0, precision=precision)
    plan = s.plan()
    half = {"bf16": "bfloat16", "fp16": "float16"}[precision]
    for op in ("FlashAttention", "FlashAttentionGrad"):
        assert plan.precision_of(op, "com.meganeura") == {half}, op
        assert plan.kernels()[op] == "kernel", op
    rng = np.random.default_rng(0)
    ids, labels = (rng.integers(0, 32, size=16).astype(np.uint32) for _ in range(2))
    s.set_learning_rate(0.5)
    losses = []
    for _ in range(3):
        s.set_input_u32("input_ids", ids)
        s.set_input_u32("labels", labels)
        s.step()
        losses.append(s.read_loss())
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
