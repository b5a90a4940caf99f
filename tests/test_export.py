"""ONNX export: file layout, versions, names that lead back to the Graph, opset choice, external data."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import run_model

from meganeura_onnx import Graph, export_onnx
from meganeura_onnx.export import onnx_export
from meganeura_onnx.init import default_parameters


def llama_like_block() -> Graph:
    g = Graph()
    tok = g.input_u32("tokens", [6])
    x = g.embedding(tok, g.parameter("embed.weight", [32, 16]))
    h = g.rms_norm(x, g.parameter("norm.weight", [16]), 1e-5)
    q = g.rope(g.matmul_bt(h, g.parameter("q.weight", [16, 16])), 10000.0, 8)
    k = g.rope(g.matmul_bt(h, g.parameter("k.weight", [8, 16])), 10000.0, 8)
    v = g.matmul_bt(h, g.parameter("v.weight", [8, 16]))
    a = g.causal_attention(q, k, v, 2, 1, 8)
    g.set_outputs([g.add(x, a)])
    return g


def test_export_writes_a_checked_portable_model(tmp_path):
    path = tmp_path / "block.onnx"
    model = export_onnx(llama_like_block(), path)
    loaded = onnx.load(path)
    onnx.checker.check_model(loaded, full_check=True)
    assert loaded.ir_version == 10
    assert {o.domain: o.version for o in loaded.opset_import} == {"": 21, "com.meganeura": 1}
    assert [i.name for i in loaded.graph.input] == ["tokens"]
    assert {t.name for t in loaded.graph.initializer} >= {"embed.weight", "norm.weight", "q.weight", "k.weight", "v.weight"}
    assert model.graph.node[0].name.startswith("n")


def test_onnx_node_names_and_doc_strings_lead_back_to_graph_nodes():
    g = llama_like_block()
    model = export_onnx(g)
    rope_nodes = [n for n in model.graph.node if n.op_type == "Rope"]
    assert len(rope_nodes) == 2
    for n in rope_nodes:
        nid = int(n.name.split("_")[0][1:])
        assert g.node(nid).op == "rope"
        assert f"Graph node {nid}: rope" in n.doc_string


def test_exported_parameters_are_the_default_init_unless_given():
    g = llama_like_block()
    model = export_onnx(g, parameters={"norm.weight": np.full(16, 2.0, np.float32)})
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(inits["norm.weight"], np.full(16, 2.0))
    np.testing.assert_array_equal(inits["q.weight"], default_parameters(g)["q.weight"])
    with pytest.raises(ValueError, match="not in the graph"):
        export_onnx(g, parameters={"nope": np.zeros(3)})


def test_newer_opset_uses_rms_normalization_and_computes_the_same():
    g = llama_like_block()
    feeds = {"tokens": np.array([1, 5, 2, 31, 0, 7], np.uint32)}
    old = export_onnx(g)
    new = export_onnx(g, opset=23)
    onnx.checker.check_model(new, full_check=True)
    assert "RMSNormalization" in {n.op_type for n in new.graph.node}
    np.testing.assert_allclose(run_model(new, feeds)[0], run_model(old, feeds)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="opset"):
        export_onnx(g, opset=17)


def test_large_models_stream_weights_to_external_data(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_BYTES", 1000)
    path = tmp_path / "new" / "folder" / "big.onnx"  # missing folders are created
    g = llama_like_block()
    export_onnx(g, path)
    assert (path.parent / "big.onnx.data").stat().st_size >= sum(v.nbytes for v in default_parameters(g).values())
    assert path.stat().st_size < 20_000  # the weights are not in the protobuf
    onnx.checker.check_model(str(path), full_check=True)
    feeds = {"tokens": np.array([1, 5, 2, 31, 0, 7], np.uint32)}
    np.testing.assert_allclose(run_model(onnx.load(path), feeds)[0], run_model(export_onnx(g), feeds)[0], rtol=1e-6)
    assert sorted(p.name for p in path.parent.iterdir()) == ["big.onnx", "big.onnx.data"]  # no temporary file left


def test_a_failed_write_leaves_no_file_behind(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(onnx_export, "_stream_weights", broken)
    with pytest.raises(OSError, match="disk full"):
        export_onnx(llama_like_block(), tmp_path / "m.onnx", external_data=True)
    assert list(tmp_path.iterdir()) == []


def test_given_parameters_are_not_drawn_from_the_default_init(monkeypatch):
    from meganeura_onnx import init

    g = llama_like_block()
    given = default_parameters(g, seed=3)
    drawn = []
    real = init.default_parameters
    monkeypatch.setattr(init, "default_parameters", lambda graph, seed=0, skip=(): drawn.append(set(skip)) or real(graph, seed, skip))
    model = export_onnx(g, parameters=given)
    assert drawn == [set(given)]
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(inits["q.weight"], given["q.weight"])


def test_exported_kv_cache_graph_outputs_every_cache_it_updates():
    g = Graph()
    pos = g.input_u32("kv_pos", [1])
    cache = g.input("cache", [4, 2])
    g.set_outputs({"y": g.relu(g.cache_write(g.input("new", [1, 2]), cache, pos))})
    model = export_onnx(g)
    assert [o.name for o in model.graph.output] == ["y", "cache.next"]
    new = np.array([[1.0, -2.0]], np.float32)
    y, nxt = run_model(model, {"kv_pos": np.array([2], np.uint32), "cache": np.zeros((4, 2), np.float32), "new": new})
    want = np.zeros((4, 2), np.float32)
    want[2] = new
    np.testing.assert_array_equal(nxt, want)
    np.testing.assert_array_equal(y, np.maximum(want, 0))


def test_graph_without_outputs_is_rejected():
    g = Graph()
    g.relu(g.input("x", [2]))
    with pytest.raises(ValueError, match="set_outputs"):
        export_onnx(g)


def test_rms_norm_lowering_is_fused_by_onnx_runtime_into_one_kernel(tmp_path):
    import onnxruntime as ort

    g = Graph()
    g.set_outputs([g.rms_norm(g.input("x", [4, 16]), g.parameter("w", [16]), 1e-5)])
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(export_onnx(g).SerializeToString(), opts, providers=["CPUExecutionProvider"])
    assert [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node] == ["SimplifiedLayerNormalization"]


def test_named_outputs_reach_the_onnx_file_and_the_session():
    from meganeura_onnx import build_inference_session

    g = Graph()
    x = g.input("x", [2, 3])
    logits = g.matmul(x, g.parameter("w", [3, 4]))
    g.set_outputs({"logits": logits, "probs": g.softmax(logits)})
    model = export_onnx(g)
    assert [o.name for o in model.graph.output] == ["logits", "probs"]
    s = build_inference_session(g)
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    s.set_input("x", xv)
    s.step()
    want = xv @ default_parameters(g)["w"]
    np.testing.assert_allclose(s.read_output("logits"), want, rtol=1e-6)
    np.testing.assert_allclose(s.read_output("probs").sum(axis=1), [1.0, 1.0], rtol=1e-6)
    assert s.output_names() == ["logits", "probs"]
    with pytest.raises(KeyError, match="no output named 'loss'"):
        s.read_output("loss")


def test_list_outputs_keep_their_positional_names_and_clashing_names_are_rejected():
    g = Graph()
    x = g.input("x", [2])
    g.set_outputs([g.relu(x), g.neg(x)])
    assert [o.name for o in export_onnx(g).graph.output] == ["output_0", "output_1"]
    g.set_outputs({"x": g.relu(x)})
    with pytest.raises(ValueError, match="output name 'x' is also the name of an input"):
        export_onnx(g)
    with pytest.raises(ValueError, match="non-empty strings"):
        g.set_outputs({"": x})


def test_training_session_keeps_output_names():
    from meganeura_onnx import build_session

    g = Graph()
    x = g.input("x", [4, 3])
    logits = g.matmul(x, g.parameter("w", [3, 2]))
    g.set_outputs({"loss": g.mse_loss(logits, g.input("y", [4, 2])), "logits": logits})
    s = build_session(g, optimizer=None)
    xv = np.ones((4, 3), np.float32)
    s.set_input("x", xv)
    s.step()
    assert s.output_names()[:2] == ["loss", "logits"]  # then the gradients, grad.<name>
    np.testing.assert_allclose(s.read_output("logits"), xv @ s.read_param("w"), rtol=1e-6)


def test_weights_mapped_from_a_safetensors_file_are_copied_file_to_file_exactly(tmp_path):
    from safetensors.numpy import save_file

    from meganeura_onnx.io import read_safetensors

    g = llama_like_block()
    values = default_parameters(g, seed=5)
    save_file(values, str(tmp_path / "w.safetensors"))
    mapped = read_safetensors(tmp_path / "w.safetensors", mapped=True)
    assert all(isinstance(v, np.memmap) for v in mapped.values())
    export_onnx(g, tmp_path / "m.onnx", parameters=mapped, external_data=True)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(tmp_path / "m.onnx").graph.initializer}
    for name, value in values.items():
        np.testing.assert_array_equal(inits[name], value)


def test_broadcast_to_feeding_an_elementwise_op_is_left_to_onnx_broadcasting():
    """``mul(x, broadcast_to(w))`` and ``sub(broadcast_to(r), x)`` export without the Expand copy
    (ONNX Mul/Sub broadcast); a broadcast_to that is also an output keeps its Expand. Values equal
    numpy's."""
    g = Graph()
    x = g.input("x", [4, 3])
    w = g.input("w", [3])
    r = g.input("r", [4, 1])
    y = g.sub(g.broadcast_to(r, [4, 3]), g.mul(x, g.broadcast_to(w, [4, 3])))
    g.set_outputs([y])
    model, _ = onnx_export.to_model(g)
    assert "Expand" not in {n.op_type for n in model.graph.node}
    used = {i for n in model.graph.node for i in n.input}
    assert all(t.name in used for t in model.graph.initializer)  # its shape constant went too
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(size=(4, 3)).astype(np.float32), "w": rng.normal(size=3).astype(np.float32)}
    feeds["r"] = rng.normal(size=(4, 1)).astype(np.float32)
    np.testing.assert_allclose(run_model(model, feeds)[0], feeds["r"] - feeds["x"] * feeds["w"], rtol=1e-6)
    shown = g.broadcast_to(w, [4, 3])
    g.set_outputs([g.mul(x, shown), shown])
    model, _ = onnx_export.to_model(g)
    assert [n.op_type for n in model.graph.node].count("Expand") == 1
    out, rep = run_model(model, feeds)
    np.testing.assert_allclose(out, feeds["x"] * feeds["w"], rtol=1e-6)
    np.testing.assert_array_equal(rep, np.broadcast_to(feeds["w"], (4, 3)))
