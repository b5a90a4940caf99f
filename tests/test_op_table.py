"""The op table: every op is complete, and its ONNX export computes its numpy reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import build_example, op_examples, run_model

from meganeura_onnx.export import to_model
from meganeura_onnx.ops import OPS
from meganeura_onnx.reference import evaluate

# Ops whose float32 result differs from the float64 reference by more than 1e-5 for a stated reason.
TOLERANCE = {}


@pytest.mark.parametrize("name", [n for n, d in OPS.items() if not d.leaf])
def test_every_op_declares_shape_rule_reference_lowering_and_two_examples(name):
    d = OPS[name]
    assert d.shape_rule is not None, f"{name} has no shape rule"
    assert d.numpy_ref is not None, f"{name} has no numpy reference"
    assert d.lowering is not None, f"{name} has no ONNX lowering"
    assert len(d.examples) >= 2, f"{name} needs examples of at least two shapes"
    shapes = set()
    for ex in d.examples:
        g, _ = build_example(ex)
        shapes.add(tuple(t.ty.shape for t in g.nodes()))
    assert len(shapes) >= 2, f"{name}'s examples all use the same shapes"


@pytest.mark.parametrize("name,k,example", op_examples())
def test_exported_op_matches_numpy_reference_and_passes_full_checker(name, k, example):
    g, f = build_example(example, seed=k)
    model, _ = to_model(g, parameters=f.params)
    onnx.checker.check_model(model, full_check=True)
    got = run_model(model, f.inputs)[0]  # no custom-op library: com.meganeura ops run their function bodies
    want = evaluate(g, {**f.inputs, **f.params}, np.float64)[0]
    rtol, atol = TOLERANCE.get(name, (1e-5, 1e-5))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_custom_ops_are_exported_in_the_meganeura_domain_with_function_bodies():
    for name, onnx_op in [
        ("rope", "Rope"),
        ("cache_write", "CacheWrite"),
        ("cached_attention", "CachedAttention"),
        ("scatter_add", "ScatterAdd"),
    ]:
        g, f = build_example(OPS[name].examples[0])
        model, _ = to_model(g, parameters=f.params)
        custom = [n for n in model.graph.node if n.domain == "com.meganeura"]
        assert [n.op_type for n in custom] == [onnx_op]
        assert [(fn.domain, fn.name) for fn in model.functions] == [("com.meganeura", onnx_op)]
        assert any(o.domain == "com.meganeura" and o.version == 1 for o in model.opset_import)
        assert all(n.domain in ("", None) for n in model.functions[0].node), "function bodies must be standard ONNX"
