"""SwiGLU's and RMSNorm's backward as fused ops (``swiglu_grad`` / ``com.meganeura.SwiGLUGrad``,
``rms_norm_grad`` / ``com.meganeura.RMSNormGrad`` with dx and dweight): the table's references against
float64 finite differences, the CPU kernels against numpy and the function bodies (float32 and the half
types), bad input, RMSNormGrad without its optional dweight output and its deterministic dweight, and
both ops in a LLaMA train step."""

from __future__ import annotations

import fused_backward_cases as sg
import kernel_cases as kc
import numpy as np
import onnx
import pytest
from meganeura_onnx.cli.model_file import load_module
from onnx import TensorProto, helper

from meganeura_onnx import Graph
from meganeura_onnx.ops import OPS
from meganeura_onnx.ops.elementwise import swiglu_grad_ref
from meganeura_onnx.ops.norm import rms_norm_grad_ref
from meganeura_onnx.runtime import training

LIB = kc.kernel_library("cpu")
needs_lib = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
SHAPES = [(1, 1536), (7, 33), (2, 3, 40001)]  # one row; odd widths; several chunks of the thread pool


def test_swiglu_grad_reference_matches_float64_finite_differences():
    rng = np.random.default_rng(0)
    gate, up, dy = rng.uniform(-5, 5, (4, 6)), rng.standard_normal((4, 6)), rng.standard_normal((4, 6))

    def loss(g, u):
        return float(np.sum(dy * g / (1.0 + np.exp(-g)) * u))

    h = 1e-6
    fd_gate, fd_up = np.zeros_like(gate), np.zeros_like(up)
    for idx in np.ndindex(gate.shape):
        e = np.zeros_like(gate)
        e[idx] = h
        fd_gate[idx] = (loss(gate + e, up) - loss(gate - e, up)) / (2 * h)
        fd_up[idx] = (loss(gate, up + e) - loss(gate, up - e)) / (2 * h)
    dgate, dup = swiglu_grad_ref(gate, up, dy)
    np.testing.assert_allclose(dgate, fd_gate, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(dup, fd_up, rtol=1e-7, atol=1e-8)


def test_swiglu_vjp_is_one_swiglu_grad_pair_sharing_its_inputs():
    g = Graph()
    gate, up = g.input("gate", [4, 6]), g.input("up", [4, 6])
    dy = g.input("dy", [4, 6])
    node = g.node(g.swiglu(gate, up))
    dgate, dup = OPS["swiglu"].vjp_rule(g, node, dy)
    pair = [g.node(dgate), g.node(dup)]
    assert [(n.op, n.attrs["index"], tuple(n.inputs)) for n in pair] == [("swiglu_grad", k, (gate, up, dy)) for k in (0, 1)]


def test_rms_norm_grad_reference_matches_float64_finite_differences_for_dx_and_dweight():
    rng = np.random.default_rng(1)
    x, w, dy = rng.standard_normal((3, 7)), rng.uniform(0.5, 1.5, 7), rng.standard_normal((3, 7))
    x[0] *= 1e-2  # eps is not negligible in this row
    eps = 1e-3

    def loss(v, wv):
        return float(np.sum(dy * v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * wv))

    h = 1e-6
    fd_x, fd_w = np.zeros_like(x), np.zeros_like(w)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        fd_x[idx] = (loss(x + e, w) - loss(x - e, w)) / (2 * h)
    for j in range(w.size):
        e = np.zeros_like(w)
        e[j] = h
        fd_w[j] = (loss(x, w + e) - loss(x, w - e)) / (2 * h)
    dx, dw = rms_norm_grad_ref(x, w, dy, eps)
    np.testing.assert_allclose(dx, fd_x, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dw, fd_w, rtol=1e-6, atol=1e-7)


def test_rms_norm_vjp_is_one_rms_norm_grad_pair_and_no_recomputed_xhat():
    g = Graph()
    x, w, dy = g.input("x", [4, 6]), g.input("w", [6]), g.input("dy", [4, 6])
    node = g.node(g.rms_norm(x, w, 1e-5))
    before = len(g)
    dx, dw = OPS["rms_norm"].vjp_rule(g, node, dy)
    pair = [g.node(dx), g.node(dw)]
    assert [(n.op, n.attrs["index"], tuple(n.inputs)) for n in pair] == [("rms_norm_grad", k, (x, w, dy)) for k in (0, 1)]
    assert len(g) == before + 2  # nothing else: xhat is not recomputed by other nodes
    assert g.node(dw).ty.shape == (6,)


CASES = [("SwiGLUGrad", s) for s in SHAPES] + [("RMSNormGrad", s) for s in [(1, 1), (7, 33), (64, 576), (3, 5000)]]
CASE_IDS = [f"{op}-{'x'.join(map(str, s))}" for op, s in CASES]


@needs_lib
@pytest.mark.parametrize("op,shape", CASES, ids=CASE_IDS)
def test_fused_backward_kernel_matches_numpy_and_the_function_body(op, shape):
    kernel = sg.check_float32(lambda m: kc.session(m, library=LIB), op, shape)
    body = sg.check_float32(lambda m: kc.session(m, library=None), op, shape)
    for k, b in zip(kernel, body, strict=True):
        np.testing.assert_allclose(k, b, rtol=1e-5, atol=1e-5)


@needs_lib
@pytest.mark.parametrize("op", sorted(sg.OPS))
def test_profile_shows_the_fused_backward_kernel_not_its_function_body(op, tmp_path):
    feeds, _ = sg.case(op, (3, 40))
    sess = kc.session(sg.model(op, feeds), library=LIB, profile_prefix=str(tmp_path / "kernel"))
    sess.run(None, feeds)
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess)] == [(op, "CPUExecutionProvider")]


@needs_lib
@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op,shape", [CASES[0], CASES[1], CASES[4], CASES[5]], ids=[CASE_IDS[k] for k in (0, 1, 4, 5)])
def test_half_precision_fused_backward_kernels_match_the_float32_math(op, shape, dtype):
    sg.check_half(lambda m: kc.session(m, library=LIB), op, shape, dtype)


@needs_lib
def test_swiglu_grad_kernel_names_mismatched_shapes():
    feeds = {"gate": np.zeros((2, 4), np.float32), "up": np.zeros((2, 4), np.float32), "dy": np.zeros((2, 5), np.float32)}
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in feeds]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in sg.OUTPUTS]
    node = helper.make_node("SwiGLUGrad", list(feeds), list(sg.OUTPUTS), domain=kc.DOMAIN)
    m = helper.make_model(
        helper.make_graph([node], "bad", vis, outs), opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)]
    )
    m.ir_version = 10
    kc.assert_ort_error(lambda: kc.session(m.SerializeToString(), library=LIB).run(None, feeds), "SwiGLUGrad", ["[2, 4]", "[2, 5]"])


@needs_lib
def test_rms_norm_grad_kernel_names_a_mismatched_weight():
    feeds = {"x": np.zeros((2, 4), np.float32), "weight": np.ones(5, np.float32), "dy": np.zeros((2, 4), np.float32)}
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in feeds]
    node = helper.make_node("RMSNormGrad", list(feeds), ["dx"], domain=kc.DOMAIN, epsilon=1e-5)
    out = [helper.make_tensor_value_info("dx", TensorProto.FLOAT, None)]
    m = helper.make_model(
        helper.make_graph([node], "bad", vis, out), opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)]
    )
    m.ir_version = 10
    kc.assert_ort_error(lambda: kc.session(m.SerializeToString(), library=LIB).run(None, feeds), "RMSNormGrad", ["[4]", "[2, 4]", "[5]"])


@needs_lib
def test_rms_norm_grad_kernel_without_its_dweight_output_still_writes_dx():
    feeds, (want_dx, _) = sg.case("RMSNormGrad", (7, 33))
    m = onnx.load_from_string(sg.model("RMSNormGrad", feeds))
    del m.graph.node[0].output[1:]
    del m.graph.output[1:]
    (got,) = kc.session(m.SerializeToString(), library=LIB).run(None, feeds)
    np.testing.assert_allclose(got, want_dx, rtol=1e-5, atol=1e-5)


@needs_lib
def test_rms_norm_grad_kernel_dweight_is_the_same_for_every_thread_count():
    feeds, _ = sg.case("RMSNormGrad", (300, 40))  # several chunks of rows
    m = sg.model("RMSNormGrad", feeds)
    runs = [kc.session(m, library=LIB, threads=t).run(None, feeds)[1] for t in (1, 2, 3)]
    assert all(np.array_equal(r.view(np.uint32), runs[0].view(np.uint32)) for r in runs)


def test_swiglu_grad_shape_rule_names_the_mismatched_argument():
    g = Graph()
    a, b = g.input("gate", [2, 4]), g.input("up", [2, 4])
    with pytest.raises(ValueError, match=r"swiglu_grad: gate and dy must have identical shapes, got \[2, 4\] and \[2, 5\]"):
        g.apply("swiglu_grad", a, b, g.input("dy", [2, 5]), index=0)


@needs_lib
def test_tiny_llama_train_step_runs_the_fused_backward_kernels_and_matches_the_function_bodies():
    llama = load_module(kc.ROOT / "models" / "llama.py")
    cfg, seq = llama.PRESETS["tiny"], 16
    rng = np.random.default_rng(0)
    data = [(rng.integers(0, 256, seq, dtype=np.uint32), rng.integers(0, 256, seq, dtype=np.uint32)) for _ in range(3)]
    runs = {}
    for custom in (True, False):  # kernels, function bodies
        s = training.build_session(llama.build_graph(cfg, "train", seq), optimizer="adam", seed=0, use_custom_ops=custom)
        s.set_adam(3e-3)
        losses = []
        for x, y in data:
            s.set_input_u32("input_ids", x)
            s.set_input_u32("labels", y)
            s.step()
            losses.append(s.read_loss())
        runs[custom] = (s, losses)
    kernel = runs[True][0]
    nodes = [n for n in kernel.onnx_model().graph.node if n.op_type == "SwiGLUGrad"]
    assert len(nodes) == cfg.num_hidden_layers and all(len(n.output) == 2 for n in nodes)
    norms = [n for n in kernel.onnx_model().graph.node if n.op_type == "RMSNormGrad"]
    assert len(norms) == 2 * cfg.num_hidden_layers + 1  # two per layer and the final norm
    assert all(len(n.output) == 2 for n in norms)  # dx and dweight from the one kernel
    types = [n.op_type for n in kernel.onnx_model().graph.node]
    assert types.count("Reciprocal") == 0 and types.count("Sqrt") == len(norms)  # the forward norms' only: no xhat recomputed
    for op in ("SwiGLUGrad", "RMSNormGrad"):
        assert kernel.plan().kernels()[op] == "kernel" and runs[False][0].plan().kernels()[op] == "function"
    np.testing.assert_allclose(runs[True][1], runs[False][1], rtol=1e-5)
