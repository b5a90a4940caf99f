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


def test_every_seed_method_is_a_documented_graph_method():
    missing = [name for name in SEED_METHODS if not callable(getattr(Graph, name, None))]
    undocumented = [name for name in SEED_METHODS if name not in missing and not (getattr(Graph, name).__doc__ or "").strip()]
    assert not missing and not undocumented, f"Graph lacks methods {missing}; methods without a docstring: {undocumented}"


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
        (lambda g: g.matmul(g.input("x", [2, 2]), True), TypeError, ["matmul", "b", "NodeId", "True"]),
        (lambda g: g.matmul(g.input("x", [2, 2]), -1), ValueError, ["matmul", "b", "-1"]),
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


# -- node handles ------------------------------------------------------------------------------------
def test_a_node_id_is_an_int_that_knows_its_graph():
    g = Graph()
    x = g.input("x", [2, 3])
    y = g.relu(x)
    assert isinstance(y, int) and y == 1 and [10, 20][y] == 20 and {1: "ok"}[y] == "ok"
    assert repr(y) == "1" and g.node(y).inputs == (x,)
    assert g.node(1).op == "relu"  # a plain int is still an index


@pytest.mark.parametrize(
    "use",
    [
        lambda g, foreign: g.relu(foreign),
        lambda g, foreign: g.apply("add", g.input("a", [2, 3]), foreign),
        lambda g, foreign: g.set_outputs([foreign]),
        lambda g, foreign: g.node(foreign),
    ],
)
def test_a_node_id_of_another_graph_is_refused(use):
    other = Graph()
    foreign = other.relu(other.input("x", [2, 3]))  # id 1 exists in both graphs
    g = Graph()
    g.input("y", [2, 3])
    g.relu(0)
    with pytest.raises(ValueError, match="another Graph"):
        use(g, foreign)


def test_toposort_and_rewrites_hand_out_handles_of_the_new_graph():
    from meganeura_onnx.transforms.rewrite import optimize

    g = Graph()
    x = g.input("x", [2, 3])
    out = g.bias_add(g.matmul(x, g.parameter("w", [3, 4])), g.parameter("b", [4]))
    g.set_outputs([out])
    for new in (g.toposort(), optimize(g)[0]):
        (o,) = new.outputs()
        assert new.node(o).ty.shape == (2, 4)
        assert new.relu(o) is not None  # usable in the new graph
        with pytest.raises(ValueError, match="another Graph"):
            g.relu(o)


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda g: g.node("0"), TypeError, ["node", "NodeId", "'0'"]),
        (lambda g: g.node(7), ValueError, ["node 7", "1 nodes"]),
        (lambda g: g.node(None), TypeError, ["node", "None"]),
        (lambda g: g.set_outputs([True]), TypeError, ["set_outputs", "output 0", "True"]),
        (lambda g: g.set_outputs(0), TypeError, ["set_outputs", "list"]),
        (lambda g: g.set_outputs([0, 5]), ValueError, ["set_outputs", "output 1", "node 5"]),
        (lambda g: g.set_outputs([0.0]), TypeError, ["set_outputs", "0.0"]),
    ],
)
def test_bad_node_ids_raise_type_or_value_errors(call, error, words):
    g = Graph()
    g.input("x", [2])
    with pytest.raises(error) as info:
        call(g)
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"


# -- attributes: checked centrally from the op table ---------------------------------------------------
def _x(g, shape=(4, 8)):
    return g.input("x", list(shape))


@pytest.mark.parametrize(
    "build,error,words",
    [
        (lambda g: g.rms_norm(_x(g), g.parameter("w", [8]), True), TypeError, ["rms_norm", "eps", "finite float32 number", "True"]),
        (lambda g: g.rms_norm(_x(g), g.parameter("w", [8]), 0.0), ValueError, ["rms_norm", "eps", "> 0", "0.0"]),
        (lambda g: g.rms_norm(_x(g), g.parameter("w", [8]), float("nan")), ValueError, ["rms_norm", "eps", "nan"]),
        (lambda g: g.layer_norm(_x(g), g.parameter("w", [8]), g.parameter("b", [8]), "1e-5"), TypeError, ["layer_norm", "eps", "'1e-5'"]),
        (lambda g: g.rope(_x(g), True, 4), TypeError, ["rope", "theta", "True"]),
        (lambda g: g.rope(_x(g), float("inf"), 4), ValueError, ["rope", "theta", "inf"]),
        (lambda g: g.rope(_x(g), -1.0, 4), ValueError, ["rope", "theta", "> 0"]),
        (lambda g: g.rope(_x(g, (4, 2048)), 1e4, 2048), ValueError, ["rope", "head_dim", "[2, 1024]", "2048"]),
        (lambda g: g.rope(_x(g), 1e4, 4.0), TypeError, ["rope", "head_dim", "an int", "4.0"]),
        (lambda g: g.rope_with_offset(_x(g), 1e4, -1, 4), ValueError, ["rope", "offset_static", "-1"]),
        (lambda g: g.rope_with_offset(_x(g), 1e4, 2**41, 4), ValueError, ["rope", "offset_static", "2**40"]),
        (
            lambda g: g.gemm(_x(g), g.parameter("w", [8, 2]), g.parameter("b", [2]), "False"),
            TypeError,
            ["gemm", "trans_b", "bool", "'False'"],
        ),
        (lambda g: g.gemm(_x(g), g.parameter("w", [8, 2]), g.parameter("b", [2]), 0), TypeError, ["gemm", "trans_b", "bool", "0"]),
        (
            lambda g: g.multi_head_attn(_x(g), _x2(g), _x2(g, "v"), 2, 2, 4, 1),
            TypeError,
            ["multi_head_attn", "is_cross", "bool"],
        ),
        (lambda g: g.causal_attention(_x(g), _x2(g), _x2(g, "v"), True, 2, 4), TypeError, ["causal_attention", "num_heads", "True"]),
        (lambda g: g.affine(_x(g), float("inf"), 0.0), ValueError, ["affine", "scale", "inf"]),
        (lambda g: g.affine(_x(g), 1.0, None), TypeError, ["affine", "shift", "None"]),
        (lambda g: g.reshape(_x(g), [2.9, 3.1]), TypeError, ["reshape", "shape", "2.9"]),
        (lambda g: g.reshape(_x(g), "23"), TypeError, ["reshape", "shape", "'23'"]),
        (lambda g: g.reshape(_x(g), [True, 32]), TypeError, ["reshape", "shape", "True"]),
        (lambda g: g.scatter_add(g.input_u32("i", [4]), _x(g), 0), ValueError, ["scatter_add", "num_rows", ">= 1", "0"]),
        (
            lambda g: g.conv2d(g.input("x", [9]), g.input("k", [4]), 1, 1, 3, 3, 1, 2, 2, 1, True),
            TypeError,
            ["conv2d", "padding", "True"],
        ),
        (lambda g: g.apply("rope", _x(g), theta=1e4, head_dim=4), TypeError, ["rope", "missing", "offset_static"]),
        (lambda g: g.apply("relu", _x(g), alpha=0.1), TypeError, ["relu", "unexpected", "alpha"]),
        (lambda g: g.apply("add", _x(g)), TypeError, ["add", "takes 2 inputs", "got 1"]),
        (lambda g: g.apply(3, _x(g)), ValueError, ["apply", "unknown op", "3"]),
        (lambda g: g.apply("input", name="x", shape=[1]), ValueError, ["apply", "unknown op", "'input'"]),
    ],
)
def test_attributes_are_checked_for_type_and_range_naming_op_argument_expected_and_given(build, error, words):
    with pytest.raises(error) as info:
        build(Graph())
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"


def _x2(g, name="k"):
    return g.input(name, [4, 8])


def test_valid_attributes_are_normalised_to_plain_python_values():
    g = Graph()
    y = g.rope(g.input("x", [3, 8]), np.float32(500.0), np.int64(4))
    a = g.node(y).attrs
    assert (type(a["theta"]), type(a["head_dim"])) == (float, int) and a["theta"] == 500.0
    r = g.reshape(y, np.array([4, 6]))
    assert g.node(r).attrs["shape"] == (4, 6) and all(type(d) is int for d in g.node(r).attrs["shape"])


# -- leaves ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build,error,words",
    [
        (lambda g: g.constant(None, [1]), TypeError, ["constant", "values", "None"]),
        (lambda g: g.constant([1.0, float("nan")], [2]), ValueError, ["constant", "finite", "value 1"]),
        (lambda g: g.constant([1e39], [1]), ValueError, ["constant", "finite float32"]),
        (lambda g: g.constant([True, False], [2]), TypeError, ["constant", "bools"]),
        (lambda g: g.constant(["1", "2"], [2]), TypeError, ["constant", "finite numbers"]),
        (lambda g: g.scalar(True), TypeError, ["scalar", "finite number", "True"]),
        (lambda g: g.scalar("2.5"), TypeError, ["scalar", "'2.5'"]),
        (lambda g: g.scalar(float("-inf")), ValueError, ["scalar", "-inf"]),
        (lambda g: g.input(3, [2]), TypeError, ["input", "name", "3"]),
        (lambda g: g.input("", [2]), ValueError, ["input", "name"]),
    ],
)
def test_hostile_leaf_arguments_are_refused(build, error, words):
    with pytest.raises(error) as info:
        build(Graph())
    for w in words:
        assert w in str(info.value), f"{w!r} missing from: {info.value}"


@pytest.mark.parametrize("name", ["const_1", "output_0", "adam_m.w", "adam_v.w", "opt.lr", "grad.w", "cache.next", "n3_matmul/matmul_7"])
def test_names_the_toolchain_generates_are_reserved(name):
    for make in (lambda g: g.input(name, [2]), lambda g: g.parameter(name, [2]), lambda g: g.input_u32(name, [1])):
        with pytest.raises(ValueError, match="reserved"):
            make(Graph())


def test_leaf_names_near_the_reserved_ones_stay_usable():
    g = Graph()
    for name in ("const", "const_a", "output", "my_output_0", "adam_m", "optimizer.lr", "next", "layer.0.weight", "n3_matmul"):
        g.input(name, [1])


def test_a_leaf_named_like_an_exported_constant_can_no_longer_replace_it():
    from meganeura_onnx.export import to_model

    g = Graph()
    x = g.input("x", [2])
    c = g.constant([1.0, 2.0], [2])
    g.set_outputs([g.add(x, c)])
    model, _ = to_model(g)
    const_names = {t.name for t in model.graph.initializer}
    with pytest.raises(ValueError, match="reserved"):
        Graph().input(sorted(const_names)[0], [2])


@pytest.mark.parametrize("which", ["constant", "lowered value"])
def test_an_output_named_like_a_value_the_exporter_generates_is_refused_at_export(which):
    from meganeura_onnx.export import to_model

    g = Graph()
    x = g.input("x", [2])
    y = g.relu(g.add(x, g.constant([1.0, 2.0], [2])))
    g.set_outputs({"y": y})
    model, _ = to_model(g)
    if which == "constant":
        name = model.graph.initializer[0].name
    else:
        name = next(n.output[0] for n in model.graph.node if n.op_type == "Add")
    g.set_outputs({name: y})
    with pytest.raises(ValueError, match="the exporter gives another value"):
        to_model(g)


def test_gradients_and_evaluate_refuse_node_ids_of_another_graph():
    from meganeura_onnx.reference import evaluate
    from meganeura_onnx.transforms import gradients

    other = Graph()
    foreign = other.sum_all(other.parameter("w", [3]))
    g = Graph()
    w = g.parameter("w", [3])
    loss = g.sum_all(w)
    with pytest.raises(ValueError, match="another Graph"):
        gradients(g, foreign, [w])
    with pytest.raises(ValueError, match="another Graph"):
        gradients(g, loss, [other.node(0).id])
    with pytest.raises(ValueError, match="evaluate.*another Graph"):
        evaluate(g, {"w": np.ones(3, np.float32)}, nodes=[foreign])
    with pytest.raises(TypeError, match="gradients: loss"):
        gradients(g, "loss", [w])
