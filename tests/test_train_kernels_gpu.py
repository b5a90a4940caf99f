"""CUDA kernels of the train step: the fused sparse cross entropy (forward and backward, float32 /
float16 / bfloat16 logits) against float64 numpy and the CPU kernels, its device-side label guard,
and the multi-tensor AdamUpdate bit for bit against the CPU kernel over many odd-sized tensors
(more tensors and more chunks than one launch takes).

Skips unless onnxruntime-gpu with a working CUDAExecutionProvider and the CUDA library are present.
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
import pytest
import test_sparse_ce_kernels as ce
from onnx import TensorProto, helper

CUDA_LIB = kc.custom_op_library("cuda")
CPU_LIB = kc.kernel_library("cpu")
HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not HAS_CUDA, reason="no CUDAExecutionProvider (onnxruntime-gpu) here"),
    pytest.mark.skipif(CUDA_LIB is None, reason="CUDA custom-op library not built (make -C custom_ops cuda)"),
]
CUDA = (("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider")
rng = np.random.default_rng(5)

CE_CASES = [  # (rows, classes, ignore_index, ignored rows)
    (64, 49152, 2**32 - 1, 5),  # SmolLM2's vocabulary: 16-byte chunks
    (37, 1001, 3, 4),  # an odd width: element by element
    (3, 5, ce.NONE, 0),
    (2, 3, 1, 2),  # every row ignored
]


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), kc.BFLOAT16], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", CE_CASES, ids=[f"{r}x{c}" for r, c, _, _ in CE_CASES])
def test_cuda_sparse_cross_entropy_matches_numpy_and_the_cpu_kernel(case, dtype):
    x, labels = ce._case(*case)
    ignore = case[2]
    xh = x.astype(dtype)
    x32 = xh.astype(np.float32)
    rows, lse = ce.forward(xh, labels, ignore, library=CUDA_LIB, providers=CUDA)
    want_rows, want_lse = ce.ref_forward(x32, labels, ignore)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rows, want_rows, rtol=1e-5, atol=1e-4)
    cpu_rows, _ = ce.forward(xh, labels, ignore, library=CPU_LIB)
    np.testing.assert_allclose(rows, cpu_rows, rtol=1e-5, atol=1e-4)
    grad = ce.backward(xh, labels, lse, 0.25, ignore, library=CUDA_LIB, providers=CUDA)
    assert grad.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else ce.HALF_TOL[dtype]
    np.testing.assert_allclose(grad.astype(np.float32), ce.ref_grad(x32, labels, want_lse, 0.25, ignore), rtol=tol, atol=1e-6)
    # The same inputs (the CUDA forward's LSE) on both kernels: the two LSEs differ in the last bits
    # (summation order over the row), which would move every softmax term by as much.
    cpu_grad = ce.backward(xh, labels, lse, 0.25, ignore, library=CPU_LIB)
    np.testing.assert_allclose(grad.astype(np.float32), cpu_grad.astype(np.float32), rtol=tol, atol=1e-6)


def test_cuda_sparse_cross_entropy_runs_on_cuda(tmp_path):
    x, labels = ce._case(8, 64, ce.NONE, 0)
    ins = {"logits": x, "labels": labels}
    model = ce._model(
        "SparseCrossEntropy", ins, [("loss_rows", TensorProto.FLOAT), ("lse", TensorProto.FLOAT)], ce.NONE, with_function=False
    )
    sess = kc.session(model, library=CUDA_LIB, providers=CUDA, profile_prefix=str(tmp_path / "ce"))
    sess.run(None, ins)
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(sess)] == [("SparseCrossEntropy", "CUDAExecutionProvider")]


def test_a_label_out_of_range_on_cuda_makes_only_its_row_nan():
    """The labels stay on the device (no sync): an out-of-range label is guarded there, its row NaN."""
    x, labels = ce._case(4, 100, ce.NONE, 0)
    labels[2] = 100
    rows, lse = ce.forward(x, labels, library=CUDA_LIB, providers=CUDA)
    assert np.isnan(rows[2]) and np.isnan(lse[2])
    ok = np.arange(4) != 2
    want_rows, want_lse = ce.ref_forward(x[ok], labels[ok], ce.NONE)
    np.testing.assert_allclose(rows[ok], want_rows, rtol=1e-5, atol=1e-4)
    grad = ce.backward(x, labels, np.nan_to_num(lse), 1.0, library=CUDA_LIB, providers=CUDA)
    assert np.isnan(grad[2]).all() and not np.isnan(grad[ok]).any()


# -- multi-tensor AdamUpdate -------------------------------------------------------------------------
HYPER = {"lr": 3e-3, "beta1": 0.85, "beta2": 0.99, "eps": 1e-7, "step": 7.0, "weight_decay": 0.1}
# Odd sizes around the 4-element vectors and 65536-element chunks, more than 24 tensors, and one
# tensor of more than 320 chunks: the launches split inside a tensor and between tensors.
SIZES = [1, 3, 4, 5, 7, 65535, 65536, 65537, 131075, 333, 4097, 0] * 4 + [330 * 65536 + 3]


def _adam_model(shapes) -> bytes:
    ins = [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1]) for h in HYPER]
    outs = []
    for k, shape in enumerate(shapes):
        ins += [helper.make_tensor_value_info(f"{t}{k}", TensorProto.FLOAT, list(shape)) for t in "pgmv"]
        outs += [helper.make_tensor_value_info(f"{t}{k}_next", TensorProto.FLOAT, list(shape)) for t in "pmv"]
    node = helper.make_node("AdamUpdate", [i.name for i in ins], [o.name for o in outs], domain=kc.DOMAIN)
    model = helper.make_model(
        helper.make_graph([node], "adam", ins, outs), opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)]
    )
    model.ir_version = 10
    return model.SerializeToString()


def test_multi_tensor_cuda_adam_equals_the_cpu_kernel_bit_for_bit(tmp_path):
    shapes = [(n,) if k % 2 else (1, n) for k, n in enumerate(SIZES)]
    feeds = {h: np.array([v], np.float32) for h, v in HYPER.items()}
    for k, shape in enumerate(shapes):
        feeds[f"p{k}"] = rng.standard_normal(shape).astype(np.float32)
        feeds[f"g{k}"] = rng.standard_normal(shape).astype(np.float32)
        feeds[f"m{k}"] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        feeds[f"v{k}"] = rng.uniform(0, 0.01, shape).astype(np.float32)
    model = _adam_model(shapes)
    gpu = kc.session(model, library=CUDA_LIB, providers=CUDA, profile_prefix=str(tmp_path / "adam"))
    got = gpu.run(None, feeds)
    assert [(n["op_name"], n["provider"]) for n in kc.profiled_nodes(gpu)] == [("AdamUpdate", "CUDAExecutionProvider")]
    want = kc.session(model, library=CPU_LIB).run(None, feeds)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"output {k} (parameter {k // 3}, {SIZES[k // 3]} elements)")
