"""Every op of the table with a symbolic dimension: exported once, run at two sizes, equal to numpy.

Each op's first example (or the one named in VARIANTS) is rebuilt with one of its size arguments
replaced by the name ``"n"``; float operands whose shape names ``n`` become graph inputs. Ops that
only take static shapes (the flat-NCHW family, ``group_norm``) must say so.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from conftest import build_example, run_model

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.ops import OPS, Feeds, optim
from meganeura_onnx.reference import evaluate
from meganeura_onnx.runtime.custom_ops import custom_op_library

SIZES = (2, 5)
ROW_KEYS = ("m", "s", "seq", "t", "n", "rows")
# op -> (example index, keyword arguments replacing the example's), or a builder (g, f) -> NodeId:
# where the default rule (the example's leading rows, or shape[0], become "n") does not fit.
VARIANTS = {
    "reshape": (0, {"a": ["n", 4], "b": ["4*n"]}),
    "broadcast_to": (3, {"a": ["n", 1], "b": ["n", 6]}),
    "scale_by_count": (0, {"shape": ["n", 5], "count": "5*n"}),
    "take": (0, {"n": "n", "start": 0, "shape": ("n",)}),
    # examples written as lambdas: the variant is a builder of its own
    "adam_update": lambda g, f: optim._example(g, f, [["n", 3], [2]], part=1, index=0),
}
STATIC_ONLY = {
    "conv2d",
    "conv2d_grad_input",
    "conv2d_grad_kernel",
    "concat",
    "split_a",
    "split_b",
    "upsample_2x",
    "sum_pool_2x",
    "group_norm",
}


def symbolic_variant(name: str):
    """The op's example with "n" in place of a size argument (a partial of the example function)."""
    if callable(VARIANTS.get(name)):
        return VARIANTS[name]
    index, override = VARIANTS.get(name, (0, None))
    ex = OPS[name].examples[index]
    assert isinstance(ex, functools.partial), f"{name}: its example is no partial of keyword sizes; add a builder to VARIANTS"
    kw = dict(ex.keywords)
    if override is None:
        if "shape" in kw:
            override = {"shape": ["n", *kw["shape"][1:]]}
        else:
            key = next((k for k in ROW_KEYS if k in kw), None)
            assert key is not None, f"{name}: no size argument to make symbolic in {kw}; add the op to VARIANTS or STATIC_ONLY"
            # self-attention examples tie query and key rows: both become "n"
            override = {k: "n" for k in (key, "skv") if k in kw and kw[k] == kw[key]}
    return functools.partial(ex.func, **{**kw, **override})


def build(example, size: int, seed: int = 0) -> tuple[Graph, Feeds]:
    g = Graph()
    f = Feeds(np.random.default_rng(seed), {"n": size})
    g.set_outputs([example(g, f)])
    return g, f


@pytest.mark.parametrize("name", [n for n, d in OPS.items() if not d.leaf and n not in STATIC_ONLY])
def test_op_with_a_symbolic_dim_exports_once_and_matches_numpy_at_two_sizes(name):
    check_symbolic_variant(name, library=None)  # com.meganeura ops run their function bodies


@pytest.mark.skipif(custom_op_library("cpu") is None, reason="custom-op library not built (make -C custom_ops)")
@pytest.mark.parametrize(
    "name",
    ["rope", "cache_write", "cached_attention", "scatter_add", "rope_cache_write", "swiglu", "flash_attention", "flash_attention_backward"],
)
def test_custom_op_kernel_with_a_symbolic_dim_matches_numpy_at_two_sizes(name):
    check_symbolic_variant(name, library=custom_op_library("cpu"))


def check_symbolic_variant(name: str, library: str | None) -> None:
    example = symbolic_variant(name)
    g, _ = build(example, SIZES[0])
    symbolic = [n for n in g.nodes() if not n.ty.is_static()]
    assert symbolic, f"{name}: the variant names no symbolic dimension"
    params = build(example, SIZES[0])[1].params  # static operands, baked into the model
    model, _ = to_model(g, parameters=params)
    onnx.checker.check_model(model, full_check=True)
    dim_params = {d.dim_param for v in model.graph.input for d in v.type.tensor_type.shape.dim}
    assert "n" in dim_params
    for k, size in enumerate(SIZES):
        _, f = build(example, size, seed=k)
        got = run_model(model, f.inputs, library)[0]
        want = evaluate(g, {**f.inputs, **params}, np.float64)[0]
        assert got.shape == want.shape, f"{name} at n={size}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} at n={size}")


@pytest.mark.parametrize("name", sorted(STATIC_ONLY))
def test_static_only_op_rejects_a_symbolic_operand_naming_the_argument(name):
    g, _ = build_example(OPS[name].examples[0])
    node = next(n for n in g.nodes() if n.op == name)
    g2, ids = Graph(), {}
    for n in g.nodes():
        if n.id == node.inputs[0]:
            ids[n.id] = g2.input("x_sym", ["n", *n.ty.shape[1:]])
        elif n.op == "parameter":
            ids[n.id] = g2.parameter(n.attrs["name"], n.ty.shape)
        elif n.op in ("input", "input_u32"):
            ids[n.id] = getattr(g2, n.op)(n.attrs["name"], n.ty.shape)
    with pytest.raises(ValueError, match=rf"^{name}: .*static"):
        g2.apply(name, *(ids[i] for i in node.inputs), **node.attrs)
