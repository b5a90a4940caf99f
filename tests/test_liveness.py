"""Liveness analysis of ONNX graphs (runtime/liveness.py), the memory-aware node order of train steps
and the ORT options training sessions use to follow it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from meganeura_onnx.runtime import custom_ops
from meganeura_onnx.runtime.custom_ops import custom_op_library
from meganeura_onnx.runtime.liveness import depth_first_order, liveness, memory_order, without_recompute
from meganeura_onnx.runtime.ort_session import apply_session_options
from meganeura_onnx.runtime.training import TRAIN_SESSION_OPTIONS, build_session, compile_program
from meganeura_onnx.transforms.optimizer import OptimizerSpec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
import tiny_llama  # noqa: E402


def _hand_graph() -> onnx.ModelProto:
    """X[10] -> A = Exp(X) [10]; C = Concat(A, A) [20]; V = Reshape(A) (a view of A); F = Neg(C);
    R = ReduceSum(V) (scalar); Y = Mul(F, R) [20] (output). float32: A 40 B, C and F 80 B, R 4 B."""
    nodes = [
        helper.make_node("Exp", ["X"], ["A"], name="n0"),
        helper.make_node("Concat", ["A", "A"], ["C"], name="n1", axis=0),
        helper.make_node("Reshape", ["A", "s"], ["V"], name="n2"),
        helper.make_node("Neg", ["C"], ["F"], name="n3"),
        helper.make_node("ReduceSum", ["V"], ["R"], name="n4", keepdims=0),
        helper.make_node("Mul", ["F", "R"], ["Y"], name="n5"),
    ]
    graph = helper.make_graph(
        nodes,
        "hand",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [10])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [20])],
        [helper.make_tensor("s", TensorProto.INT64, [2], [2, 5])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_liveness_of_a_hand_computed_graph():
    # Live intermediates per node in model order (a view keeps its input alive until its last reader):
    # n0 A=40; n1 A+C=120; n2 A+C=120; n3 A+C+F=200; n4 A+F+R=124; n5 F+R=84.
    live = liveness(_hand_graph())
    assert live.live_bytes == [40, 120, 120, 200, 124, 84]
    assert (live.peak_bytes, live.peak_step) == (200, 3)
    assert sorted(name for name, _, _ in live.peak_tensors) == ["A", "C", "F"]
    assert live.held_bytes == 40 + 80 + 16  # X, Y and the int64[2] shape initializer
    assert live.lower_bound_bytes == 160  # n3 reads C and writes F


def test_liveness_in_another_order_and_memory_order():
    model = _hand_graph()
    # Reduce A early: n0 40; n2 40; n4 A+R=44; n1 A+C+R=124; n3 C+F+R=164; n5 F+R=84.
    assert liveness(model, [0, 2, 4, 1, 3, 5]).live_bytes == [40, 40, 44, 124, 164, 84]
    order = memory_order(model)
    assert order == [0, 2, 1, 4, 3, 5]  # the view and then the reduction run as soon as they free (or cost) nothing
    assert liveness(model, order).peak_bytes == 164
    assert depth_first_order(model) == [0, 1, 3, 2, 4, 5]


def test_liveness_refuses_an_order_that_is_not_topological():
    with pytest.raises(ValueError, match=r"runs node 1 \(Concat\) before node 0"):
        liveness(_hand_graph(), [1, 0, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="each of the 6 node indices once"):
        liveness(_hand_graph(), [0, 1, 2])


def _train_model() -> onnx.ModelProto:
    # batch 4: intermediates past the first arena extension (3 MB), so a second block shows
    g = tiny_llama.build(vocab=2048, hidden=32, heads=4, kv_heads=2, intermediate=64, layers=2, seq=16, batch=4)
    return compile_program(g, OptimizerSpec("adamw", fused=True, device_step=True)).model


def test_train_step_is_exported_in_an_order_whose_peak_does_not_grow():
    model = _train_model()
    exported = liveness(model).peak_bytes
    before = without_recompute(model)  # the graph as autodiff built it, in the exporter's former order
    depth_first = liveness(before, depth_first_order(before)).peak_bytes
    # The depth-first order computes every weight gradient after the whole backward pass.
    assert exported < depth_first
    assert exported >= liveness(model).lower_bound_bytes


def _ort_memory(model: onnx.ModelProto, options: dict, prefix: Path, runs: int = 2) -> list[dict]:
    """ORT's allocator fields from its profiler, per run: arena held and peak bytes in use."""
    opts = ort.SessionOptions()
    apply_session_options(opts, options)
    opts.enable_profiling = True
    opts.profile_file_prefix = str(prefix)
    custom_ops.register(opts, "cpu")  # the AdamUpdate, Rope and attention kernels, as sessions run them
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    types = {v.name: v.type.tensor_type for v in onnx.shape_inference.infer_shapes(model, data_prop=True).graph.input}
    rng = np.random.default_rng(0)
    feeds = {}
    for name, t in types.items():
        shape, dtype = [d.dim_value for d in t.shape.dim], helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[name] = rng.integers(0, 512, shape).astype(dtype) if dtype == np.uint32 else np.full(shape, 0.5, dtype)
    feeds["opt.step"] = np.ones(1, np.float32)  # Adam counts its updates from 1
    for _ in range(runs):
        sess.run(None, feeds)
    events = json.loads(Path(sess.end_profiling()).read_text())
    out = []
    for run in (e for e in events if e.get("name") == "model_run"):
        nodes = [e for e in events if e.get("cat") == "Node" and run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]
        out.append({k: max(int(e["args"][k]) for e in nodes) for k in ("mem_arena_held", "mem_in_use_peak")})
    return out


@pytest.mark.skipif(custom_op_library("cpu") is None, reason="custom-op library not built (make -C custom_ops cpu)")
def test_training_session_options_keep_ort_arena_from_doubling_on_the_second_run(tmp_path):
    model = _train_model()
    default = _ort_memory(model, {}, tmp_path / "default_")
    ours = _ort_memory(model, TRAIN_SESSION_OPTIONS, tmp_path / "ours_")
    # ORT's memory pattern: the second run allocates one block for every intermediate beside the
    # arena the first run grew, so the arena grows; with it off, the second run reuses the first's.
    assert default[1]["mem_arena_held"] > default[0]["mem_arena_held"]
    assert ours[1]["mem_arena_held"] == ours[0]["mem_arena_held"]
    assert ours[1]["mem_arena_held"] < default[1]["mem_arena_held"]
    # In the exported order ORT's peak is no higher than in its own default order.
    assert ours[0]["mem_in_use_peak"] <= default[0]["mem_in_use_peak"]


def test_training_session_runs_with_the_memory_options():
    g = tiny_llama.build(vocab=32, hidden=16, heads=2, kv_heads=1, intermediate=32, layers=1, seq=4, batch=1)
    s = build_session(g, optimizer="adamw")
    opts = s._ort.get_session_options()
    assert opts.execution_order == ort.ExecutionOrder.PRIORITY_BASED
    assert opts.enable_mem_pattern is False


def test_apply_session_options_refuses_unknown_names():
    with pytest.raises(ValueError, match="no attribute 'enable_mem_patern'"):
        apply_session_options(ort.SessionOptions(), {"enable_mem_patern": False})
    with pytest.raises(ValueError, match="execution_order must be one of"):
        apply_session_options(ort.SessionOptions(), {"execution_order": "FASTEST"})


def test_inspect_memory_prints_the_liveness_peak_of_a_model_file(tmp_path):
    from cli_launch import meganeura

    path = tmp_path / "hand.onnx"
    onnx.save(_hand_graph(), str(path))
    d = json.loads(meganeura("inspect", str(path), "--memory", "--json").stdout)["memory"]
    assert d["model_order"]["peak_bytes"] == 200 and d["model_order"]["peak_at"] == "Neg n3"
    assert d["memory_order"]["peak_bytes"] == 164
    assert (d["held_bytes"], d["lower_bound_bytes"]) == (136, 160)
    human = meganeura("inspect", str(path), "--memory").stdout
    assert "model order: peak 0.0 MB at Neg n3" in human


def test_inspect_memory_refuses_symbolic_sizes_without_a_traceback(tmp_path):
    from cli_launch import meganeura

    model = _hand_graph()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    path = tmp_path / "symbolic.onnx"
    onnx.save(model, str(path))
    r = meganeura("inspect", str(path), "--memory", check=False)
    assert r.returncode != 0 and "--memory: liveness: the sizes of" in r.stderr and "Traceback" not in r.stderr


def test_recomputing_swiglu_for_the_backward_lowers_the_peak_and_keeps_the_values():
    g = tiny_llama.build(vocab=64, hidden=32, heads=4, kv_heads=2, intermediate=256, layers=2, seq=16, batch=2)
    exported = compile_program(g, OptimizerSpec("adamw", fused=True, device_step=True)).model
    swiglu = [n for n in exported.graph.node if n.op_type == "SwiGLU"]
    copies = [n for n in swiglu if n.name.endswith("/recomputed")]
    assert len(copies) == 2  # one per layer: the down projection's weight gradient reads the copy
    plain = without_recompute(exported)
    assert [n.op_type for n in plain.graph.node].count("SwiGLU") == len(swiglu) - 2
    order = memory_order(plain)
    assert liveness(exported).peak_bytes < liveness(plain, order).peak_bytes
    feeds = _feeds(exported)
    want = ort.InferenceSession(plain.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, o in zip(want, got, strict=True):
        assert np.isfinite(w).all()
        np.testing.assert_array_equal(o, w)


def _feeds(model: onnx.ModelProto) -> dict:
    types = {v.name: v.type.tensor_type for v in onnx.shape_inference.infer_shapes(model, data_prop=True).graph.input}
    rng = np.random.default_rng(0)
    feeds = {}
    for name, t in types.items():
        shape, dtype = [d.dim_value for d in t.shape.dim], helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[name] = rng.integers(0, 64, shape).astype(dtype) if dtype == np.uint32 else (rng.standard_normal(shape) * 0.1).astype(dtype)
    feeds.update({"opt.step": np.ones(1, np.float32), "opt.lr": np.full(1, 1e-3, np.float32)})
    feeds.update({k: np.full(1, 0.9, np.float32) for k in ("opt.beta1", "opt.beta2")})
    feeds.update({"opt.eps": np.full(1, 1e-8, np.float32), "opt.weight_decay": np.full(1, 0.01, np.float32)})
    feeds.update({k: np.abs(v) for k, v in feeds.items() if k.startswith("adam_v.")})  # second moments are >= 0
    return feeds


def test_memory_order_takes_symbolic_sizes_and_liveness_refuses_them():
    model = _hand_graph()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "m"
    assert memory_order(model) == [0, 2, 1, 4, 3, 5]  # the relative sizes along the known dims decide
    with pytest.raises(ValueError, match="sizes of .* tensors are unknown"):
        liveness(model)
