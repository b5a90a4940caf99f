"""Every output of a ``com.meganeura`` node has its type and shape in the exported model, so ONNX
Runtime (whose view of a custom op comes from the kernel library, which infers output 0 at most)
and ``onnx.shape_inference`` see them all."""

from __future__ import annotations

import onnx
import onnxruntime as ort

from meganeura_onnx import Graph
from meganeura_onnx.export.onnx_export import to_model
from meganeura_onnx.ops.lowering import CUSTOM_DOMAIN
from meganeura_onnx.runtime import custom_ops


def _two_output_custom_op_model() -> onnx.ModelProto:
    """SwiGLUGrad (dgate, dup) with both outputs read inside the graph, neither a graph output."""
    g = Graph()
    gate, up, dy = (g.input(name, [4, 8]) for name in ("gate", "up", "dy"))
    dgate, dup = (g.apply("swiglu_grad", gate, up, dy, index=k) for k in (0, 1))
    g.set_outputs([g.add(dgate, g.mul(dup, dup))])
    model, _ = to_model(g)
    return model


def _custom_outputs(model: onnx.ModelProto) -> list[str]:
    return [o for n in model.graph.node if n.domain == CUSTOM_DOMAIN for o in n.output]


def _types(values) -> dict[str, tuple[int, list[int]]]:
    return {v.name: (v.type.tensor_type.elem_type, [d.dim_value for d in v.type.tensor_type.shape.dim]) for v in values}


def test_every_output_of_a_multi_output_custom_op_is_declared_with_its_shape():
    model = _two_output_custom_op_model()
    outs = _custom_outputs(model)
    assert len(outs) == 2
    declared = _types(model.graph.value_info)
    assert {o: declared.get(o) for o in outs} == {o: (onnx.TensorProto.FLOAT, [4, 8]) for o in outs}
    inferred = _types(onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.value_info)
    assert {o: inferred.get(o) for o in outs} == {o: (onnx.TensorProto.FLOAT, [4, 8]) for o in outs}


def test_onnx_runtime_knows_every_custom_op_output_shape(tmp_path):
    """ORT's optimized model (with our kernel library registered where built) types both outputs."""
    model = _two_output_custom_op_model()
    opts = ort.SessionOptions()
    custom_ops.register(opts, "cpu")
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    optimized = onnx.load(opts.optimized_model_filepath)
    seen = _types(optimized.graph.value_info)
    assert {o: seen.get(o) for o in _custom_outputs(optimized)} == {o: (onnx.TensorProto.FLOAT, [4, 8]) for o in _custom_outputs(model)}
