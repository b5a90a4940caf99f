"""The fused multi-tensor optimizer (``com.meganeura.AdamUpdate``) equals the decomposed update.

Three ways to run the same Adam/AdamW steps of the MNIST MLP, from the same parameters and data:
the decomposed ONNX update (~13 nodes per parameter), the AdamUpdate node run by our CPU kernel,
and the AdamUpdate node run by its function body (no kernel library). Losses and parameters must
agree to float32 rounding (rtol 1e-6): the kernel does the same float32 operations in the same order.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from conftest import build_example

import meganeura_onnx
from meganeura_onnx.export import to_model
from meganeura_onnx.init import default_parameters
from meganeura_onnx.ops import OPS
from meganeura_onnx.runtime.training import build_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import mnist_mlp  # noqa: E402

LIB = meganeura_onnx.custom_op_library("cpu")
needs_kernels = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops)")


def _run(optimizer: str, steps: int = 8, clip: bool = False, **kw):
    g = mnist_mlp.build(batch=8)
    params = default_parameters(g, 0)
    rng = np.random.default_rng(1)
    s = build_session(g, optimizer=optimizer, parameters=params, clip=clip, **kw)
    if optimizer == "adamw":
        s.set_adamw(3e-3, 0.85, 0.99, 1e-7, weight_decay=0.1)
    else:
        s.set_adam(3e-3)
    if clip:
        s.set_grad_clip(0.5)
    losses = []
    for _ in range(steps):
        s.set_input("x", rng.normal(size=(8, 784)).astype(np.float32))
        s.set_input("labels", np.eye(10, dtype=np.float32)[rng.integers(0, 10, 8)])
        s.step()
        losses.append(s.read_loss())
    return s, np.array(losses)


@needs_kernels
@pytest.mark.parametrize("optimizer,clip", [("adam", False), ("adamw", True)])
def test_fused_adam_kernel_and_function_body_equal_the_decomposed_update(optimizer, clip):
    ref, ref_losses = _run(optimizer, clip=clip, fused_optimizer=False)
    kernel, kernel_losses = _run(optimizer, clip=clip, fused_optimizer=True)
    body, body_losses = _run(optimizer, clip=clip, fused_optimizer=True, use_custom_ops=False)
    assert kernel.plan().kernels() == {"AdamUpdate": "kernel"}
    assert body.plan().kernels() == {"AdamUpdate": "function"}
    assert ref.plan().kernels() == {}
    adam_nodes = [n for n in kernel.onnx_model().graph.node if n.op_type == "AdamUpdate"]
    assert len(adam_nodes) == 1 and len(adam_nodes[0].output) == 3 * 4  # every parameter in one node
    for other, losses in ((kernel, kernel_losses), (body, body_losses)):
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
        for name in ref.parameter_names():
            np.testing.assert_allclose(other.read_param(name), ref.read_param(name), rtol=1e-6, atol=1e-8, err_msg=name)
    for m in kernel._prog.moments:  # moments near 0 carry float32 rounding of the clip coefficient: 1e-6 of the scale
        want = ref._values[m].numpy()
        np.testing.assert_allclose(kernel._values[m].numpy(), want, rtol=1e-5, atol=1e-6 * np.abs(want).max(), err_msg=m)


def test_fused_adam_is_the_default():
    s, _ = _run("adam", steps=1)
    assert any(n.op_type == "AdamUpdate" for n in s.onnx_model().graph.node)
    s, _ = _run("adam", steps=1, fused_optimizer=False)
    assert not any(n.op_type == "AdamUpdate" for n in s.onnx_model().graph.node)


@needs_kernels
def test_adam_update_kernel_rejects_a_beta_outside_zero_one_naming_the_op():
    g, f = build_example(OPS["adam_update"].examples[0])
    model, _ = to_model(g, parameters=f.params)
    opts = ort.SessionOptions()
    opts.register_custom_ops_library(LIB)
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match=r"AdamUpdate: beta1 and beta2 must be in \[0, 1\), got 1.5"):
        sess.run(None, {**f.inputs, "beta1": np.array([1.5], np.float32)})


def _cuda() -> bool:
    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs onnxruntime-gpu with CUDAExecutionProvider")
def test_fused_adam_on_cuda_runs_our_cuda_kernel_and_equals_the_decomposed_update():
    ref, ref_losses = _run("adamw", clip=True, fused_optimizer=False, device="cuda")
    fused, losses = _run("adamw", clip=True, fused_optimizer=True, device="cuda")
    assert fused.plan().providers_of("AdamUpdate", "com.meganeura") == {"CUDAExecutionProvider"}
    assert fused.plan().kernels() == {"AdamUpdate": "kernel"}
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    for name in ref.parameter_names():
        np.testing.assert_allclose(fused.read_param(name), ref.read_param(name), rtol=1e-6, atol=1e-8, err_msg=name)


def _tensors_bytes(s, names):
    return sum(s._types[n].size_bytes() for n in names)


@needs_kernels
def test_adam_kernel_updates_in_place_with_one_buffer_per_tensor_and_the_same_numbers():
    """Where nothing needs the old values after the step, the AdamUpdate kernel writes p', m', v'
    over p, m, v: no second buffer per tensor, the same results as two swapped buffers
    (``check_finite=True`` keeps those)."""
    inplace, losses = _run("adam")
    swapped, swapped_losses = _run("adam", check_finite=True)
    updated = set(inplace._prog.trainable) | set(inplace._prog.moments)
    assert inplace.inplace_state == updated and swapped.inplace_state == set()
    saved = swapped.memory_summary().total_buffer_bytes - inplace.memory_summary().total_buffer_bytes
    assert saved == _tensors_bytes(inplace, updated)
    np.testing.assert_array_equal(losses, swapped_losses)
    for name in swapped.parameter_names():
        np.testing.assert_array_equal(inplace.read_param(name), swapped.read_param(name), err_msg=name)


def test_no_in_place_update_when_a_parameter_is_read_outside_the_gradient():
    """A graph output that reads a parameter without feeding the loss may run after the update:
    the session keeps two buffers. Gradient accumulation (old values gated back) does too."""
    g = meganeura_onnx.Graph()
    w = g.parameter("w", [3, 2])
    loss = g.mean_all(g.matmul(g.input("x", [4, 3]), w))
    g.set_outputs({"loss": loss, "w_sum": g.sum_all(w)})
    s = build_session(g, optimizer="adam")
    assert s.inplace_state == set()
    s, _ = _run("adam", steps=1)
    s.set_grad_accumulation(2)
    s.step()
    assert s.inplace_state == set()
