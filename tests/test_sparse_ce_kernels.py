"""The fused sparse cross-entropy kernels (``com.meganeura.SparseCrossEntropy`` / ``...Grad``) on the
CPU: against an independent float64 numpy reference, the gradient against central finite
differences of that reference, both against the op table's function bodies, ignored rows, a batch
with every row ignored, float16/bfloat16 logits, label types, bad labels, and the precision pass
keeping the loss ops in half where the logits are half."""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.export.precision import lower_precision
from meganeura_onnx.runtime.training import build_session

LIB = kc.kernel_library("cpu")
pytestmark = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
NONE = -1  # the ONNX attribute's "no label is ignored"
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16, kc.BFLOAT16: TensorProto.BFLOAT16}
IDX = {np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32, np.dtype(np.uint32): TensorProto.UINT32}


# -- references (float64, independent of the op table) -------------------------------------------------
def ref_forward(x: np.ndarray, labels: np.ndarray, ignore: int) -> tuple[np.ndarray, np.ndarray]:
    x = x.astype(np.float64)
    m = x.max(axis=1)
    lse = m + np.log(np.exp(x - m[:, None]).sum(axis=1))
    lab = labels.astype(np.int64)
    keep = lab != ignore
    picked = x[np.arange(len(lab)), np.where(keep, lab, 0)]
    return np.where(keep, lse - picked, 0.0), lse


def ref_loss(x: np.ndarray, labels: np.ndarray, ignore: int) -> float:
    rows, _ = ref_forward(x, labels, ignore)
    return rows.sum() / max(int((labels.astype(np.int64) != ignore).sum()), 1)


def ref_grad(x: np.ndarray, labels: np.ndarray, lse: np.ndarray, scale: float, ignore: int) -> np.ndarray:
    p = np.exp(x.astype(np.float64) - lse.astype(np.float64)[:, None])
    lab = labels.astype(np.int64)
    keep = lab != ignore
    p[np.arange(len(lab))[keep], lab[keep]] -= 1.0
    return p * np.where(keep, scale, 0.0)[:, None]


# -- one-node models -----------------------------------------------------------------------------------
def _model(op: str, inputs: dict[str, np.ndarray], outputs: list[tuple[str, int]], ignore: int, with_function: bool = True) -> bytes:
    vis = [helper.make_tensor_value_info(n, ELEM.get(a.dtype) or IDX[a.dtype], list(a.shape)) for n, a in inputs.items()]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs]
    node = helper.make_node(op, list(inputs), [n for n, _ in outputs], domain=kc.DOMAIN, ignore_index=ignore)
    functions = [kc.function_proto(op)] if with_function else []
    model = helper.make_model(
        helper.make_graph([node], op, vis, outs),
        opset_imports=[helper.make_opsetid("", kc.OPSET), helper.make_opsetid(kc.DOMAIN, 1)],
        functions=functions,
    )
    model.ir_version = 10
    return model.SerializeToString()


def _bound_run(sess, inputs: dict[str, np.ndarray], outputs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> dict[str, np.ndarray]:
    """One run through IOBinding (bfloat16 goes in and out as its 16-bit pattern)."""
    binding, keep = sess.io_binding(), []
    for name, a in inputs.items():
        keep.append(
            ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                a.view(np.uint16) if a.dtype == kc.BFLOAT16 else a, ELEM.get(a.dtype) or IDX[a.dtype]
            )
        )
        binding.bind_ortvalue_input(name, keep[-1])
    got = {}
    for name, (shape, dtype) in outputs.items():
        got[name] = np.zeros(shape, np.uint16 if dtype == kc.BFLOAT16 else dtype)
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(got[name], ELEM[np.dtype(dtype)]))
    sess.run_with_iobinding(binding)
    return {k: v.view(kc.BFLOAT16) if outputs[k][1] == kc.BFLOAT16 else v for k, v in got.items()}


CPU = ("CPUExecutionProvider",)


def forward(x, labels, ignore=NONE, library=LIB, providers=CPU):
    """(loss_rows, lse) of the SparseCrossEntropy node (``library=None``: its function body)."""
    ins = {"logits": x, "labels": labels}
    model = _model("SparseCrossEntropy", ins, [("loss_rows", TensorProto.FLOAT), ("lse", TensorProto.FLOAT)], ignore)
    out = _bound_run(
        kc.session(model, library=library, providers=providers), ins, {n: ((x.shape[0],), np.float32) for n in ("loss_rows", "lse")}
    )
    return out["loss_rows"], out["lse"]


def backward(x, labels, lse, scale, ignore=NONE, library=LIB, providers=CPU):
    """dlogits of the SparseCrossEntropyGrad node, in the logits' type."""
    ins = {"logits": x, "labels": labels, "lse": lse.astype(np.float32), "scale": np.array([scale], np.float32)}
    model = _model("SparseCrossEntropyGrad", ins, [("dlogits", ELEM[x.dtype])], ignore)
    return _bound_run(kc.session(model, library=library, providers=providers), ins, {"dlogits": (x.shape, x.dtype)})["dlogits"]


rng = np.random.default_rng(11)
CASES = [  # (rows, classes, ignore_index, how many rows carry it)
    (5, 7, NONE, 0),
    (33, 1000, 3, 4),  # an ignored label inside the class range
    (9, 49152 // 16, 2**32 - 1, 3),  # an ignored label past the range (as U32 padding), a wide row
    (1, 1, NONE, 0),  # one class: loss 0, gradient 0
]


def _case(rows, classes, ignore, ignored, dtype=np.uint32):
    x = (rng.standard_normal((rows, classes)) * 4).astype(np.float32)
    labels = rng.integers(0, classes, rows).astype(dtype)
    if ignored:
        labels[:ignored] = ignore
    return x, labels


@pytest.mark.parametrize("case", CASES, ids=[f"{r}x{c}-ignore{i}" for r, c, i, _ in CASES])
def test_kernels_match_float64_numpy_and_the_function_bodies(case):
    x, labels = _case(*case)
    ignore = case[2]
    rows, lse = forward(x, labels, ignore)
    want_rows, want_lse = ref_forward(x, labels, ignore)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rows, want_rows, rtol=1e-5, atol=1e-4)
    body_rows, body_lse = forward(x, labels, ignore, library=None)
    np.testing.assert_allclose(rows, body_rows, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(lse, body_lse, rtol=1e-5, atol=1e-5)
    grad = backward(x, labels, lse, 0.37, ignore)
    np.testing.assert_allclose(grad, ref_grad(x, labels, want_lse, 0.37, ignore), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(grad, backward(x, labels, lse, 0.37, ignore, library=None), rtol=1e-4, atol=1e-7)
    assert not grad[np.isin(labels.astype(np.int64), [ignore])].any(), "ignored rows must have a zero gradient"


def test_the_gradient_of_the_mean_loss_matches_central_finite_differences():
    x, labels = _case(6, 9, 4, 2)
    count = int((labels != 4).sum())
    _, lse = forward(x, labels, 4)
    grad = backward(x, labels, lse, 1.0 / count, 4)
    fd = np.zeros(x.shape)
    x64 = x.astype(np.float64)
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x64)
        d[idx] = 1e-5
        fd[idx] = (ref_loss(x64 + d, labels, 4) - ref_loss(x64 - d, labels, 4)) / 2e-5
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint32])
def test_every_label_type_gives_the_same_result(dtype):
    x, labels = _case(4, 6, NONE, 0, dtype)
    rows, lse = forward(x, labels)
    np.testing.assert_allclose(rows, ref_forward(x, labels, NONE)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(backward(x, labels, lse, 1.0), ref_grad(x, labels, lse, 1.0, NONE), rtol=1e-4, atol=1e-7)


def test_a_batch_with_every_row_ignored_has_zero_terms_and_a_zero_gradient_and_the_loss_is_zero():
    x, labels = _case(4, 5, 7, 4)
    rows, lse = forward(x, labels, 7)
    assert not rows.any()
    np.testing.assert_allclose(lse, ref_forward(x, labels, 7)[1], rtol=1e-5)  # computed for every row all the same
    assert not backward(x, labels, lse, 1.0, 7).any()
    # The graph divides by max(count, 1): the loss is 0 (not NaN), and so is its gradient.
    g = Graph()
    lg = g.parameter("logits", [4, 5])
    g.set_outputs([g.sparse_cross_entropy_loss(lg, g.input_u32("labels", [4]), ignore_index=7)])
    s = build_session(g, parameters={"logits": x})
    assert s.plan().kernels()["SparseCrossEntropy"] == "kernel"
    s.set_input_u32("labels", labels)
    s.step()
    assert s.read_loss() == 0.0 and not s.read_grad("logits").any()


HALF_TOL = {np.dtype(np.float16): 2.0**-10, kc.BFLOAT16: 2.0**-7}


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), kc.BFLOAT16], ids=["float16", "bfloat16"])
def test_half_logits_are_computed_in_float32_and_the_gradient_is_rounded_once(dtype):
    x, labels = _case(7, 300, 5, 2)
    xh = x.astype(dtype)
    x32 = xh.astype(np.float32)  # what the kernel reads, widened
    rows, lse = forward(xh, labels, 5)
    want_rows, want_lse = ref_forward(x32, labels, 5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)  # float32 outputs: no half rounding
    np.testing.assert_allclose(rows, want_rows, rtol=1e-5, atol=1e-4)
    grad = backward(xh, labels, lse, 0.5, 5)
    assert grad.dtype == dtype
    tol = HALF_TOL[dtype]
    np.testing.assert_allclose(grad.astype(np.float32), ref_grad(x32, labels, want_lse, 0.5, 5), rtol=tol, atol=1e-6)


@pytest.mark.parametrize("op", ["SparseCrossEntropy", "SparseCrossEntropyGrad"])
@pytest.mark.parametrize("label", [6, 2**32 - 2])
def test_a_label_out_of_range_is_an_ort_error_naming_the_op_the_row_and_the_label(op, label):
    x, labels = _case(3, 6, NONE, 0)
    labels[1] = label
    with pytest.raises(RuntimeError) as info:  # ORT's error status, raised by run_with_iobinding
        if op == "SparseCrossEntropy":
            forward(x, labels, 2**32 - 1)
        else:
            backward(x, labels, np.zeros(3, np.float32), 1.0, 2**32 - 1)
    assert f"Status Message: {op}: labels[1] = {label} is out of range [0, 6)" in str(info.value)


def test_the_precision_pass_keeps_the_loss_ops_in_half_with_float32_loss_terms_and_log_sum_exp():
    g = Graph()
    h = g.input("h", [8, 16])
    logits = g.matmul(h, g.parameter("w", [16, 40]))
    g.set_outputs([g.sparse_cross_entropy_loss(logits, g.input_u32("labels", [8]), ignore_index=0)])
    params = {"w": (rng.standard_normal((16, 40)) * 0.3).astype(np.float32)}
    hv, lv = rng.standard_normal((8, 16)).astype(np.float32), rng.integers(0, 40, 8).astype(np.uint32)
    losses = {}
    for precision in ("fp32", "bf16"):
        s = build_session(g, parameters=params, precision=precision)
        s.set_input("h", hv)
        s.set_input_u32("labels", lv)
        s.step()
        losses[precision] = s.read_loss()
        plan = s.plan()
        assert plan.kernels()["SparseCrossEntropy"] == plan.kernels()["SparseCrossEntropyGrad"] == "kernel"
    for op in ("SparseCrossEntropy", "SparseCrossEntropyGrad"):
        assert plan.precision_of(op, "com.meganeura") == {"bfloat16"}, plan.precision_of(op, "com.meganeura")
    model, _ = to_model(g, params_as_inputs=True)
    lowered, _ = lower_precision(model, "bf16", device="cuda")
    node = next(n for n in lowered.graph.node if n.op_type == "SparseCrossEntropy")
    producers = {o: n for n in lowered.graph.node for o in n.output}
    assert producers[node.input[0]].op_type == "MatMul", "the half logits go to the kernel without a cast"
    consumers = [n for n in lowered.graph.node if set(n.input) & set(node.output)]
    assert consumers and not any(n.op_type == "Cast" for n in consumers), "loss terms and log-sum-exp stay float32: no cast"
    np.testing.assert_allclose(losses["bf16"], losses["fp32"], rtol=2e-2)
