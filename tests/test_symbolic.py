"""Symbolic dimensions: the dim algebra, leaf validation, export with dim_param, sessions that
bind sizes at set_input, and a file that plain onnxruntime runs at any batch size."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from meganeura_onnx.cli.model_file import load_module

from meganeura_onnx import Graph, build_inference_session, build_session, export_onnx
from meganeura_onnx.init import default_parameters
from meganeura_onnx.ir import TensorType, dim, dim_add, dim_div, dim_mul
from meganeura_onnx.reference import evaluate


def mlp(batch="batch") -> Graph:
    g = Graph()
    x = g.input("x", [batch, 6])
    h = g.relu(g.bias_add(g.matmul(x, g.parameter("fc1.weight", [6, 8])), g.parameter("fc1.bias", [8])))
    g.set_outputs([g.bias_add(g.matmul(h, g.parameter("fc2.weight", [8, 3])), g.parameter("fc2.bias", [3]))])
    return g


def mlp_numpy(x, p):
    h = np.maximum(x.astype(np.float64) @ p["fc1.weight"] + p["fc1.bias"], 0)
    return h @ p["fc2.weight"] + p["fc2.bias"]


def random_params(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-1, 1, ty.shape).astype(np.float32) for k, ty in g.parameters().items()}


# -- the dim algebra ------------------------------------------------------------------------------
def test_derived_dims_are_canonical_polynomials_so_equal_expressions_compare_equal():
    assert dim("seq * batch") == dim_mul("batch", "seq") == "batch*seq"
    assert dim_mul(2, dim_mul("b", 3)) == "6*b"
    assert dim_add("past", "seq") == dim_add("seq", "past") == "past+seq"
    assert dim_div("batch*seq", "batch") == "seq"
    assert dim_div("6*b", 3) == "2*b"
    assert dim_div("b", 2) is None and dim_div("seq", "batch") is None
    assert TensorType(("batch", 4)).elements() == "4*batch"


def test_symbolic_sizes_say_so_instead_of_returning_a_number():
    ty = TensorType(("batch", 784))
    assert not ty.is_static() and ty.symbols() == {"batch"}
    with pytest.raises(ValueError, match=r"element count 784\*batch is symbolic"):
        ty.num_elements()
    with pytest.raises(ValueError, match="symbolic"):
        ty.size_bytes()
    assert ty.resolve({"batch": 5}).size_bytes() == 5 * 784 * 4


# -- leaves and shape rules -----------------------------------------------------------------------
@pytest.mark.parametrize("shape", [["3"], ["1batch"], ["a-b"], [True, 4], [2.0, 4], ["batch*seq"], [0, "n"], []])
def test_input_shape_takes_positive_ints_and_identifier_names_only(shape):
    with pytest.raises(ValueError, match="^input: "):
        Graph().input("x", shape)


def test_parameter_and_constant_shapes_stay_static():
    with pytest.raises(ValueError, match=r"^parameter: shape must be a non-empty list of positive ints \(its shape is static\)"):
        Graph().parameter("w", ["n", 4])


def test_a_static_size_is_never_equated_with_a_name():
    g = Graph()
    a, b = g.input("a", ["n", 4]), g.input("b", [3, 4])
    with pytest.raises(
        ValueError, match=r"^add: a and b must have identical shapes, got \['n', 4\] and \[3, 4\] \(a static size and a symbolic one"
    ):
        g.add(a, b)
    with pytest.raises(ValueError, match="^add: "):
        g.add(a, g.input("c", ["m", 4]))  # distinct names are distinct sizes


def test_op_that_needs_a_static_size_names_the_argument_and_dimension():
    g = Graph()
    x = g.input("x", [4, "width"])
    with pytest.raises(ValueError, match=r"^rope: x needs a static size in dimension 1, got 'width'"):
        g.rope(x, 10000.0, 2)


def test_batched_llama_style_prefill_with_symbolic_batch_and_seq_matches_numpy_at_two_sizes():
    """ids [batch, seq] -> rows batch*seq -> embedding, rope per sequence, causal GQA attention per sequence."""
    g = Graph()
    ids = g.input_u32("ids", ["batch", "seq"])
    x = g.embedding(ids, g.parameter("emb", [11, 16]))  # [batch*seq, 16]
    q = g.apply("rope", g.matmul(x, g.parameter("wq", [16, 16])), theta=10000.0, head_dim=4, offset_static=0, period="seq")
    k = g.apply("rope", g.matmul(x, g.parameter("wk", [16, 8])), theta=10000.0, head_dim=4, offset_static=0, period="seq")
    v = g.matmul(x, g.parameter("wv", [16, 8]))
    out = g.apply("causal_attention", q, k, v, num_heads=4, num_kv_heads=2, head_dim=4, batch="batch")
    g.set_outputs([g.reshape(out, ["batch", "16*seq"])])
    assert g.node(g.outputs()[0]).ty.shape == ("batch", "16*seq")
    params = random_params(g)
    s = build_inference_session(g, parameters=params)
    for batch, seq in ((1, 3), (3, 5), (2, 1)):
        feeds = {"ids": np.random.default_rng(batch).integers(0, 11, (batch, seq)).astype(np.uint32)}
        s.set_input_u32("ids", feeds["ids"])
        s.step()
        want = evaluate(g, {**feeds, **params}, np.float64)[0]
        np.testing.assert_allclose(s.read_output_by_index(0), want, rtol=1e-5, atol=1e-5)


# -- sessions ---------------------------------------------------------------------------------------
def test_session_runs_any_batch_the_symbol_allows_and_rebinds_outputs_on_a_change():
    g = mlp()
    params = random_params(g)
    s = build_inference_session(g, parameters=params)
    with pytest.raises(RuntimeError, match="symbolic shape"):
        s.read_output_by_index(0)
    for batch in (1, 5, 64, 5):
        x = np.random.default_rng(batch).uniform(-1, 1, (batch, 6)).astype(np.float32)
        s.set_input("x", x)
        s.step()
        np.testing.assert_allclose(s.read_output_by_index(0), mlp_numpy(x, params), rtol=1e-5, atol=1e-5)
    assert {b.name: b.ty.shape for b in s.buffers()}["output_0"] == (5, 3)
    s.set_input("x", np.ones(6 * 7, np.float32))  # flat: the one unknown size is inferred
    s.step()
    assert s.read_output_by_index(0).shape == (7, 3)


def test_conflicting_sizes_in_one_step_raise_naming_both_inputs():
    g = Graph()
    x, labels = g.input("x", ["batch", 4]), g.input("labels", ["batch", 4])
    g.set_outputs([g.mse_loss(x, labels)])
    s = build_inference_session(g)
    with pytest.raises(ValueError, match="set it before the first step"):
        s.step()
    with pytest.raises(TypeError, match="takes numbers"):
        s.set_input("x", np.full((2, 4), "a"))  # refused data fixes no size
    s.set_input("x", np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"'labels' gives dimension 'batch' size 2, but 'x' fixed it to 3 in this step"):
        s.set_input("labels", np.ones((2, 4)))
    s.set_input("labels", np.zeros((3, 4)))
    s.step()
    assert s.read_loss() == pytest.approx(1.0)
    s.set_input("x", np.ones((5, 4)))  # labels still holds batch 3
    with pytest.raises(ValueError, match=r"'labels' still holds dimension 'batch' = 3 from an earlier step, but 'x' set it to 5"):
        s.step()


def mlp_loss(batch) -> Graph:
    g = Graph()
    x, labels = g.input("x", [batch, 6]), g.input("labels", [batch, 3])
    h = g.relu(g.bias_add(g.matmul(x, g.parameter("fc1.weight", [6, 8])), g.parameter("fc1.bias", [8])))
    logits = g.matmul(h, g.parameter("fc2.weight", [8, 3]))
    g.set_outputs([g.add(g.cross_entropy_loss(logits, labels), g.mse_loss(logits, labels))])
    return g


def sgd_step(g: Graph, params: dict, feeds: dict, session=None):
    s = session or build_session(g, optimizer="sgd", parameters=params)
    s.set_learning_rate(0.5)
    for k, v in feeds.items():
        s.set_input(k, v)
    s.step()
    return s, s.read_loss(), {k: s.read_param(k) for k in params}


def test_training_with_a_symbolic_batch_equals_training_at_each_static_batch():
    params = random_params(mlp_loss(4))
    sym = None
    for batch in (4, 7):  # one symbolic session; a static session per batch size from the same weights
        rng = np.random.default_rng(batch)
        feeds = {"x": rng.uniform(-1, 1, (batch, 6)), "labels": np.eye(3)[rng.integers(0, 3, batch)]}
        _, want_loss, want = sgd_step(mlp_loss(batch), params, feeds)
        sym, loss, got = sgd_step(mlp_loss("batch"), params, feeds, sym)
        assert loss == pytest.approx(want_loss, rel=1e-6)
        for k in params:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-7)
        params = want


def test_llama_training_with_a_symbolic_sequence_length_equals_static_training():
    llama = load_module(Path(__file__).resolve().parent.parent / "models" / "llama.py")
    cfg = llama.load_config(preset="tiny")
    sym_graph = llama.build_graph(cfg, "train", seq="seq")
    params = default_parameters(sym_graph, seed=2)
    sym = build_session(sym_graph, optimizer="sgd", parameters=params)
    for seq in (5, 3):
        rng = np.random.default_rng(seq)
        feeds = {k: rng.integers(0, cfg.vocab_size, seq).astype(np.uint32) for k in ("input_ids", "labels")}
        static = build_session(llama.build_graph(cfg, "train", seq=seq), optimizer="sgd", parameters=params)
        for s in (static, sym):
            s.set_learning_rate(0.1)
            for k, v in feeds.items():
                s.set_input_u32(k, v)
            s.step()
        assert sym.read_loss() == pytest.approx(static.read_loss(), rel=1e-5)
        params = {k: static.read_param(k) for k in params}
        for k in ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight"):
            np.testing.assert_allclose(sym.read_param(k), params[k], rtol=1e-5, atol=1e-6)


# -- the file on its own ----------------------------------------------------------------------------
PLAIN_ORT = """
import json, sys
import numpy as np
import onnxruntime as ort
path, params = sys.argv[1], {k: np.array(v, np.float32) for k, v in json.loads(sys.argv[2]).items()}
sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
for batch in (1, 5, 64):
    x = np.random.default_rng(batch).uniform(-1, 1, (batch, 6)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    h = np.maximum(x.astype(np.float64) @ params["fc1.weight"] + params["fc1.bias"], 0)
    want = h @ params["fc2.weight"] + params["fc2.bias"]
    assert y.shape == (batch, 3), y.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
assert "meganeura_onnx" not in sys.modules
print("ok", sess.get_inputs()[0].shape)
"""


def test_mlp_with_symbolic_batch_exported_once_runs_in_plain_onnxruntime_at_batch_1_5_64(tmp_path):
    g = mlp()
    params = random_params(g)
    path = tmp_path / "mlp.onnx"
    export_onnx(g, path, parameters=params)
    arg = json.dumps({k: v.tolist() for k, v in params.items()})
    # -I: isolated mode, so neither this checkout nor PYTHONPATH can put meganeura_onnx on the path
    run = subprocess.run([sys.executable, "-I", "-c", textwrap.dedent(PLAIN_ORT), str(path), arg], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok ['batch', 6]"
