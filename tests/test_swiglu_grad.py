"""SwiGLU's backward as one fused op (``swiglu_grad`` / ``com.meganeura.SwiGLUGrad``): the table's
reference against float64 finite differences, the CPU kernel against numpy and the function body
(float32 and the half types), bad input, and the op in a LLaMA train step."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import pytest
import swiglu_grad_cases as sg
from meganeura_onnx.cli.model_file import load_module
from onnx import TensorProto, helper

from meganeura_onnx import Graph
from meganeura_onnx.ops import OPS
from meganeura_onnx.ops.elementwise import swiglu_grad_ref
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


@needs_lib
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_swiglu_grad_kernel_matches_numpy_and_the_function_body(shape):
    feeds = sg.inputs(shape)
    want = sg.reference(feeds["gate"], feeds["up"], feeds["dy"])
    kernel = kc.session(sg.model(shape), library=LIB).run(None, feeds)
    body = kc.session(sg.model(shape), library=None).run(None, feeds)
    for name, k, b, w in zip(sg.OUTPUTS, kernel, body, want, strict=True):
        assert k.dtype == np.float32 and k.shape == shape
        np.testing.assert_allclose(k, w, rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(b, w, rtol=1e-5, atol=1e-5, err_msg=name)


@needs_lib
def test_profile_shows_the_swiglu_grad_kernel_not_its_function_body(tmp_path):
    feeds = sg.inputs((3, 40))
    sess = kc.session(sg.model((3, 40)), library=LIB, profile_prefix=str(tmp_path / "kernel"))
    sess.run(None, feeds)
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess)] == [("SwiGLUGrad", "CPUExecutionProvider")]


@needs_lib
@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES[:2], ids=["x".join(map(str, s)) for s in SHAPES[:2]])
def test_half_precision_swiglu_grad_kernel_matches_the_float32_math(shape, dtype):
    sg.check_half(lambda m: kc.session(m, library=LIB), shape, dtype)


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


def test_swiglu_grad_shape_rule_names_the_mismatched_argument():
    g = Graph()
    a, b = g.input("gate", [2, 4]), g.input("up", [2, 4])
    with pytest.raises(ValueError, match=r"swiglu_grad: gate and dy must have identical shapes, got \[2, 4\] and \[2, 5\]"):
        g.apply("swiglu_grad", a, b, g.input("dy", [2, 5]), index=0)


@needs_lib
def test_tiny_llama_train_step_runs_one_swiglu_grad_kernel_per_layer_and_matches_the_function_bodies():
    llama = load_module(kc.ROOT / "models" / "llama.py")
    cfg, seq = llama.PRESETS["tiny"], 16
    rng = np.random.default_rng(0)
    data = [(rng.integers(0, 256, seq, dtype=np.uint32), rng.integers(0, 256, seq, dtype=np.uint32)) for _ in range(3)]
    runs = {}
    for custom in (True, False):
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
    assert kernel.plan().kernels()["SwiGLUGrad"] == "kernel" and runs[False][0].plan().kernels()["SwiGLUGrad"] == "function"
    np.testing.assert_allclose(runs[True][1], runs[False][1], rtol=1e-5)
