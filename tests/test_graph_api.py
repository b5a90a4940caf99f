"""The Graph API: Meganeura's names, types, toposort, and build-time shape/dtype errors."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from meganeura_onnx import DType, Graph, TensorType

SEED_METHODS = (
    "input input_u32 parameter constant scalar matmul matmul_at matmul_bt add mul bias_add broadcast_add greater relu sigmoid "
    "neg abs log recip div sum_all mean_all softmax log_softmax cross_entropy_loss bce_loss mse_loss l1_loss silu swiglu "
    "rms_norm rope rope_with_offset rope_dynamic_offset causal_attention full_attention cross_attention multi_head_attn "
    "embedding scatter_add layer_norm conv2d group_norm concat split_a split_b upsample_2x cache_write cached_attention "
    "set_outputs outputs nodes node toposort"
).split()


@pytest.mark.parametrize("name", SEED_METHODS)
def test_every_seed_method_is_a_documented_graph_method(name):
    method = getattr(Graph, name)
    assert callable(method)
    assert method.__doc__ and method.__doc__.strip(), f"Graph.{name} has no docstring"


def test_positional_argument_order_follows_meganeura():
    params = list(inspect.signature(Graph.rope_with_offset).parameters)
    assert params == ["self", "x", "theta", "pos_offset", "head_dim"]
    params = list(inspect.signature(Graph.conv2d).parameters)
    assert params[1:] == [
        "x",
        "kernel",
        "batch",
        "in_channels",
        "in_h",
        "in_w",
        "out_channels",
        "kernel_h",
        "kernel_w",
        "stride",
        "padding",
    ]
    params = list(inspect.signature(Graph.cached_attention).parameters)
    assert params[1:] == ["q", "k_cache", "v_cache", "kv_pos", "num_heads", "num_kv_heads", "head_dim"]


def test_tensor_type_and_dtype_match_the_seed():
    t = TensorType.f32([32, 784])
    assert (t.num_elements(), t.size_bytes(), t.rank(), t.dtype) == (25088, 100352, 2, DType.F32)
    assert TensorType.new([4, 3], DType.U32).rank() == 2
    assert DType.F32.size_bytes() == DType.U32.size_bytes() == 4


def test_builders_return_node_ids_with_inferred_types():
    g = Graph()
    x = g.input("x", [8, 784])
    w = g.parameter("w", [784, 128])
    h = g.matmul(x, w)
    assert g.node(h).ty == TensorType.f32([8, 128])
    assert g.node(h).inputs == (x, w)
    assert g.node(g.sum_all(h)).ty.shape == (1,)
    tok = g.input_u32("tok", [5])
    table = g.parameter("emb", [100, 16])
    assert g.node(g.embedding(tok, table)).ty.shape == (5, 16)
    assert g.node(g.conv2d(g.input("img", [2 * 3 * 8 * 8]), g.parameter("k", [4 * 3 * 3 * 3]), 2, 3, 8, 8, 4, 3, 3, 2, 1)).ty.shape == (
        2 * 4 * 4 * 4,
    )


def test_toposort_drops_dead_nodes_and_orders_inputs_first():
    g = Graph()
    a = g.input("a", [2, 2])
    dead = g.relu(a)
    b = g.parameter("b", [2, 2])
    out = g.add(g.neg(a), b)
    g.set_outputs([out])
    s = g.toposort()
    assert len(s.nodes()) == len(g.nodes()) - 1
    assert all(i < n.id for n in s.nodes() for i in n.inputs)
    assert "relu" not in [n.op for n in s.nodes()] and dead == 1
    assert s.node(s.outputs()[0]).op == "add"
    assert isinstance(s, Graph)


@pytest.mark.parametrize(
    "build,error,words",
    [
        (lambda g: g.matmul(g.input("a", [2, 3]), g.input("b", [4, 5])), ValueError, ["matmul", "[2, 3]", "[4, 5]"]),
        (lambda g: g.add(g.input("a", [2, 3]), g.input("b", [3, 2])), ValueError, ["add", "[2, 3]", "[3, 2]"]),
        (lambda g: g.bias_add(g.input("a", [2, 3]), g.input("b", [2])), ValueError, ["bias_add", "bias", "[3]", "[2]"]),
        (lambda g: g.embedding(g.input("i", [4]), g.parameter("t", [10, 3])), TypeError, ["embedding", "indices", "U32"]),
        (lambda g: g.relu(g.input_u32("i", [4])), TypeError, ["relu", "x", "F32"]),
        (lambda g: g.rope(g.input("x", [4, 10]), 10000.0, 4), ValueError, ["rope", "divisible", "head_dim"]),
        (lambda g: g.rope(g.input("x", [4, 6]), 10000.0, 3), ValueError, ["rope", "even"]),
        (
            lambda g: g.causal_attention(g.input("q", [4, 8]), g.input("k", [4, 8]), g.input("v", [4, 8]), 3, 1, 4),
            ValueError,
            ["causal_attention"],
        ),
        (
            lambda g: g.causal_attention(g.input("q", [4, 8]), g.input("k", [3, 8]), g.input("v", [3, 8]), 2, 2, 4),
            ValueError,
            ["same sequence length"],
        ),
        (lambda g: g.cross_entropy_loss(g.input("l", [4, 3]), g.input("y", [4, 2])), ValueError, ["cross_entropy_loss", "labels"]),
        (lambda g: g.constant([1.0, 2.0], [3]), ValueError, ["constant", "2 values", "[3]"]),
        (lambda g: g.input("x", [0, 3]), ValueError, ["input", "shape"]),
        (lambda g: g.matmul(g.input("x", [2, 2]), 99), ValueError, ["matmul", "b", "99"]),
        (lambda g: g.matmul(g.input("x", [2, 2]), "w"), TypeError, ["matmul", "NodeId"]),
        (lambda g: (g.input("x", [2]), g.parameter("x", [2])), ValueError, ["already used"]),
        (lambda g: g.cache_write(g.input("n", [1, 4]), g.input("c", [8, 5]), g.input_u32("p", [1])), ValueError, ["cache_write", "width"]),
        (lambda g: g.conv2d(g.input("x", [10]), g.input("k", [4]), 1, 1, 3, 3, 1, 2, 2, 1, 0), ValueError, ["conv2d", "x", "9"]),
        (
            lambda g: g.group_norm(g.input("x", [24]), g.input("w", [4]), g.input("b", [4]), 1, 4, 6, 3, 1e-5),
            ValueError,
            ["group_norm", "num_groups"],
        ),
    ],
)
def test_invalid_builds_raise_naming_op_argument_and_shapes(build, error, words):
    with pytest.raises(error) as info:
        build(Graph())
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"


def test_constant_and_scalar_hold_their_values():
    g = Graph()
    c = g.constant([1, 2, 3, 4, 5, 6], [2, 3])
    s = g.scalar(2.5)
    np.testing.assert_array_equal(g.node(c).attrs["value"], np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    assert g.node(s).ty.shape == (1,) and g.node(s).attrs["value"][0] == 2.5
