"""The op table: every op is complete, and its ONNX export computes its numpy reference."""

from __future__ import annotations

import inspect

import numpy as np
import onnx
import pytest
from conftest import build_example, op_examples, run_model

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.ops import OPS, OpDef
from meganeura_onnx.ops.table import op as declare_op
from meganeura_onnx.reference import evaluate

# Ops whose float32 result differs from the float64 reference by more than 1e-5 for a stated reason.
TOLERANCE = {}


def missing_slots(d: OpDef) -> list[str]:
    """What op ``d`` lacks to be complete, in words (empty when nothing is missing)."""
    lacks = []
    for slot, what in (("shape_rule", "a shape rule"), ("numpy_ref", "a numpy reference"), ("lowering", "an ONNX lowering")):
        if getattr(d, slot) is None:
            lacks.append(what)
    if d.differentiable and d.vjp_rule is None:
        lacks.append("a VJP rule (or differentiable=False)")
    if len(d.examples) < 2:
        lacks.append("examples of at least two shapes")
    elif d.shape_rule is not None:
        shapes = {tuple(n.ty.shape for n in build_example(ex)[0].nodes()) for ex in d.examples}
        if len(shapes) < 2:
            lacks.append("examples of two different shapes (all use the same)")
    if d.shape_rule is not None:
        params = inspect.signature(d.shape_rule).parameters.values()
        named = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)][len(d.inputs) :]
        named += [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in named]
        undeclared = sorted({n for n in named if not n.startswith("_")} - {a.name for a in d.attrs})  # _x: loop-bound defaults
        if undeclared:
            lacks.append(f"attribute declarations for {undeclared} (its shape rule takes them)")
    if d.custom is not None:
        if d.custom_function is None:
            lacks.append(f"a function body for its custom op {d.custom.name}")
        if d.inplace_input is not None and d.custom.inplace_input is None:
            lacks.append("the in-place input in its custom-op schema")
    builder = getattr(Graph, d.name, None)
    if builder is not None and not (builder.__doc__ or "").strip():
        lacks.append(f"a docstring on Graph.{d.name}")
    return lacks


def test_every_op_of_the_table_is_complete():
    lacking = {name: missing_slots(d) for name, d in OPS.items() if not d.leaf}
    report = "\n".join(f"  {name} lacks {', '.join(m)}" for name, m in lacking.items() if m)
    assert not report, "incomplete ops:\n" + report


def test_the_completeness_check_names_the_op_and_what_it_lacks():
    d = declare_op("__test_incomplete", ("x",))
    try:
        d.shape(lambda x, *, k: x)
        lacks = missing_slots(d)
    finally:
        del OPS["__test_incomplete"]
    text = ", ".join(lacks)
    for words in ("numpy reference", "ONNX lowering", "VJP rule", "two shapes", "attribute declarations for ['k']"):
        assert words in text, f"{words!r} missing from {text!r}"


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


@pytest.mark.parametrize("name", [n for n, d in OPS.items() if d.custom is not None])
def test_custom_ops_are_exported_in_the_meganeura_domain_with_their_declared_function_body(name):
    d = OPS[name]
    g, f = build_example(d.examples[0])
    model, _ = to_model(g, parameters=f.params)
    custom = [n for n in model.graph.node if n.domain == "com.meganeura"]
    assert [n.op_type for n in custom] == [d.custom.name]
    assert {a.name for a in custom[0].attribute} <= {a.name for a in d.custom.attrs}
    assert [(fn.domain, fn.name) for fn in model.functions] == [(d.custom.domain, d.custom.name)]
    fn = model.functions[0]
    group = len(d.custom.variadic_inputs)
    arity = (len(custom[0].input) - len(d.custom.inputs)) // group if group else 1
    assert list(fn.input) == d.custom.input_names(arity) and list(fn.output) == d.custom.output_names(arity)
    # required attributes by name, optional ones with their defaults (a node may leave them out)
    assert sorted([*fn.attribute, *(a.name for a in fn.attribute_proto)]) == sorted(a.name for a in d.custom.attrs)
    defaults = {a.name: a.default for a in d.custom.attrs if not a.required and a.default is not None}
    assert {a.name: onnx.helper.get_attribute_value(a) for a in fn.attribute_proto} == defaults
    assert any(o.domain == "com.meganeura" and o.version == 1 for o in model.opset_import)
    assert all(n.domain in ("", None) for n in fn.node), "function bodies must be standard ONNX"
