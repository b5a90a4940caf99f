"""The train step replayed as CUDA graphs (``build_session(..., cuda_graph=True)``).

CPU: the option is refused off CUDA, and the capture check names nodes a graph cannot replay.
GPU (skipped without CUDA): N steps replayed from the captured graphs equal N steps run node by
node, with every node on CUDA, no host copy and our kernels (AdamUpdate, ScatterAdd, Rope) in it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

import meganeura_onnx
from meganeura_onnx.init import default_parameters
from meganeura_onnx.runtime.ort_session import check_capturable
from meganeura_onnx.runtime.training import build_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import mnist_mlp  # noqa: E402
import tiny_llama  # noqa: E402

LLAMA = {"vocab": 32, "hidden": 32, "heads": 4, "kv_heads": 2, "intermediate": 64, "layers": 1}
SEQ, BATCH, STEPS = 8, 2, 6


def test_cuda_graph_training_is_refused_off_cuda():
    with pytest.raises(ValueError, match="cuda_graph=True needs device='cuda', got device='cpu'"):
        build_session(mnist_mlp.build(batch=4), "cpu", optimizer="adam", cuda_graph=True)


def test_adam_step_counter_is_device_state_the_model_advances():
    """``opt.step`` (Adam's t) is no host-written hyper-parameter: the model outputs
    ``opt.step.next`` and the session swaps it in, so steps with unchanged hyper-parameters write
    nothing to the device; a checkpoint load writes the restored count."""
    g = mnist_mlp.build(batch=4)
    s = build_session(g, optimizer="adam")
    s.set_adam(1e-3)
    rng = np.random.default_rng(0)
    for _ in range(3):
        s.set_input("x", rng.normal(size=(4, 784)).astype(np.float32))
        s.step()
    assert "opt.step" not in s._prog.hyper and s._prog.counters == ["opt.step"]
    assert "opt.step.next" in [o.name for o in s.onnx_model().graph.output]
    assert s._values["opt.step"].numpy().tolist() == [4.0] and s.optimizer_step == 3
    written = dict(s._written)
    s.step()  # nothing changed: no hyper-parameter is written again
    assert s._written == written and s._values["opt.step"].numpy().tolist() == [5.0]


def test_restored_step_count_reaches_the_device_counter(tmp_path):
    g = mnist_mlp.build(batch=4)
    s = build_session(g, optimizer="adam")
    s.set_adam(1e-3)
    for _ in range(2):
        s.step()
    s.save_checkpoint(tmp_path / "c.safetensors")
    t = build_session(g, optimizer="adam")
    t.set_adam(1e-3)
    t.step()
    t.load_checkpoint(tmp_path / "c.safetensors")
    assert t.optimizer_step == 2 and t._values["opt.step"].numpy().tolist() == [3.0]
    s.step()
    t.step()  # the same update from the same state: equal parameters
    for name in s.parameter_names():
        np.testing.assert_array_equal(t.read_param(name), s.read_param(name), err_msg=name)


def _fake_session(placement):
    subs = {}
    for name, op, ep in placement:
        subs.setdefault(ep, []).append(SimpleNamespace(name=name, op_type=op))
    return SimpleNamespace(
        get_provider_graph_assignment_info=lambda: [SimpleNamespace(ep_name=ep, get_nodes=lambda n=n: n) for ep, n in subs.items()]
    )


def test_capture_check_names_compute_nodes_on_the_cpu_and_host_copies():
    ok = _fake_session([("mm", "MatMul", "CUDAExecutionProvider"), ("shape", "Shape", "CPUExecutionProvider")])
    check_capturable(ok)  # shape computations on the CPU run once, outside the graph
    bad = _fake_session(
        [
            ("mm", "MatMul", "CUDAExecutionProvider"),
            ("sm", "Softmax", "CPUExecutionProvider"),
            ("copy", "MemcpyToHost", "CUDAExecutionProvider"),
        ]
    )
    with pytest.raises(ValueError, match=r"on the CPU: \['Softmax sm'\], host copies: \['MemcpyToHost copy'\]"):
        check_capturable(bad)


@pytest.mark.skipif(meganeura_onnx.custom_op_library("cpu") is None, reason="custom-op library not built (make -C custom_ops cpu)")
def test_in_place_updates_apply_once_although_the_first_graph_run_executes_the_model_three_times():
    """The first ``run`` of each CUDA graph makes ORT execute the model several times in one call
    (regular runs, capture, replay): simulated here on the CPU, where the in-place AdamUpdate would
    apply its update three times unless the session restores the state and replays once."""
    g, batches, feed = _mlp()
    plain, want = _train(g, batches, feed, "cpu")
    s = build_session(g, optimizer="adamw", parameters=default_parameters(g, 0))
    assert s.inplace_state, "the fused Adam kernel updates parameters and moments in place"
    s._cuda_graph = True  # the session's graph path, without a GPU
    real, calls = s._ort.run_with_iobinding, {}

    def like_graph_capture(binding, options=None):
        calls[id(binding)] = calls.get(id(binding), 0) + 1
        for _ in range(3 if calls[id(binding)] == 1 else 1):
            real(binding, options)

    s._ort.run_with_iobinding = like_graph_capture
    np.testing.assert_array_equal(_run_steps(s, batches, feed), want)
    for name in plain.parameter_names():
        np.testing.assert_array_equal(s.read_param(name), plain.read_param(name), err_msg=name)
    for m in plain._prog.moments:
        np.testing.assert_array_equal(s._values[m].numpy(), plain._values[m].numpy(), err_msg=m)


def _run_steps(s, batches, feed) -> np.ndarray:
    """AdamW steps of ``s`` over ``batches`` (``feed`` sets a batch's inputs); the losses."""
    s.set_adamw(3e-3, weight_decay=0.05)
    losses = []
    for b in batches:
        feed(s, b)
        s.step()
        losses.append(s.read_loss())
    return np.array(losses)


def _train(g, batches, feed, device="cuda", **kw):
    s = build_session(g, device, optimizer="adamw", parameters=default_parameters(g, 0), **kw)
    return s, _run_steps(s, batches, feed)


def _cuda() -> bool:
    return "CUDAExecutionProvider" in ort.get_available_providers()


def _mlp():
    g = mnist_mlp.build(batch=8)
    rng = np.random.default_rng(0)
    batches = [
        {"x": rng.normal(size=(8, 784)).astype(np.float32), "labels": np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)]}
        for _ in range(STEPS)
    ]
    return g, batches, lambda s, b: (s.set_input("x", b["x"]), s.set_input("labels", b["labels"]))


def _llama():
    g = tiny_llama.build(**LLAMA, seq=SEQ, batch=BATCH)
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(STEPS):
        ids = rng.integers(0, LLAMA["vocab"], (BATCH, SEQ + 1))
        batches.append({"ids": ids[:, :-1].reshape(-1).astype(np.uint32), "labels": ids[:, 1:].reshape(-1).astype(np.uint32)})
    return g, batches, lambda s, b: (s.set_input_u32("input_ids", b["ids"]), s.set_input_u32("labels", b["labels"]))


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs onnxruntime-gpu with CUDAExecutionProvider")
@pytest.mark.parametrize("case", [_mlp, _llama], ids=["mlp", "llama_block"])
def test_train_steps_replayed_as_cuda_graphs_equal_the_steps_run_node_by_node(case):
    g, batches, feed = case()
    plain, want = _train(g, batches, feed)
    graphed, got = _train(g, batches, feed, cuda_graph=True)
    plan = graphed.plan()
    # Parameters and moments are updated in place by our AdamUpdate kernel (one buffer each, as
    # without graphs), although ORT executes the model more than once inside a graph's first run.
    assert bool(graphed.inplace_state) == (meganeura_onnx.custom_op_library("cuda") is not None)
    assert graphed.inplace_state == plain.inplace_state
    assert {ep for *_, ep in plan.placement} == {"CUDAExecutionProvider"}, plan.placement
    assert not [p for p in plan.placement if p[2].startswith("Memcpy")], plan.placement
    if meganeura_onnx.custom_op_library("cuda") is not None:
        assert set(plan.kernels().values()) == {"kernel"}, plan.kernels()  # AdamUpdate (+ ScatterAdd, Rope)
    # The same kernels in the same order; only ScatterAdd's float atomics (the embedding gradient
    # of repeated token ids) may sum in another order, hence rtol 1e-5 rather than bit equality.
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for name in plain.parameter_names():
        np.testing.assert_allclose(graphed.read_param(name), plain.read_param(name), rtol=1e-5, atol=1e-7, err_msg=name)
    assert graphed.optimizer_step == STEPS
