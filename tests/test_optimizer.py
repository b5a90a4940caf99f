"""The e-graph optimizer: same values before and after, every rule fires, reports and cache keys."""

from __future__ import annotations

import ast
import itertools
import json

import numpy as np
import pytest
from conftest import build_example, op_examples

from meganeura_onnx import Graph, build_inference_session, build_session, build_session_with_report
from meganeura_onnx.ops import OPS
from meganeura_onnx.ops.table import Rewrite
from meganeura_onnx.reference import evaluate
from meganeura_onnx.runtime.training import graph_key
from meganeura_onnx.transforms.autodiff import gradients
from meganeura_onnx.transforms.egraph import AttrKeys, Limits, _parse_sexpr, rule_program, table_rules
from meganeura_onnx.transforms.rewrite import optimize

FP32 = {"rtol": 1e-6, "atol": 1e-6}


def _assert_same_values(before: Graph, after: Graph, feeds: dict) -> None:
    want = evaluate(before, feeds)
    got = evaluate(after, feeds)
    assert len(got) == len(want)
    for k, (w, o) in enumerate(zip(want, got, strict=True)):
        assert o.shape == w.shape, f"output {k}: shape {o.shape} != {w.shape}"
        np.testing.assert_allclose(o, w, **FP32, err_msg=f"output {k}")


def _with_gradients(g: Graph) -> Graph:
    """The example's output summed to a loss, plus the gradient of every parameter as outputs."""
    out = g.outputs()[0]
    if g.node(out).ty.dtype.name != "F32" or not OPS[g.node(out).op].differentiable:
        return g
    loss = g.sum_all(out)
    params = [nid for _, nid in g.leaves("parameter")]
    res = gradients(g, loss, params)
    g.set_outputs([out, loss, *(res.grads[p] for p in params if res.grads[p] is not None)])
    return g


@pytest.mark.parametrize("name,k,example", op_examples())
def test_every_op_example_and_its_gradients_give_the_same_values_optimized(name, k, example):
    g, f = build_example(example, seed=k)
    g = _with_gradients(g)
    opt, report = optimize(g)
    assert report.nodes_after <= report.nodes_before
    _assert_same_values(g, opt, {**f.inputs, **f.params})


# -- the seeded fuzz ------------------------------------------------------------------------------
def _random_graph(rng: np.random.Generator, rows: int = 3, cols: int = 4) -> tuple[Graph, dict]:
    """A small graph mixing every rewritable pattern, with shared intermediates and random outputs."""
    g, feeds = Graph(), {}

    def leaf(kind: str, shape: list[int]) -> int:
        name = f"{kind}{len(feeds)}"
        feeds[name] = rng.uniform(-1, 1, size=shape).astype(np.float32)
        return g.input(name, shape) if kind == "x" else g.parameter(name, shape)

    pool = [leaf("x", [rows, cols]) for _ in range(2)]
    pick = lambda: pool[int(rng.integers(len(pool)))]  # noqa: E731
    written: list[int] = []  # KV caches written by the steps: outputs of their own (another shape)

    def rope_then_cache_write() -> None:
        pos = g.input_u32(f"pos{len(feeds)}", [1])
        feeds[f"pos{len(feeds)}"] = np.array([int(rng.integers(0, 2 * rows))], np.uint32)
        k = g.rope_dynamic_offset(pick(), 10000.0, pos, 2)
        written.append(g.cache_write(k, leaf("x", [3 * rows, cols]), pos))

    patterns = [
        lambda: g.bias_add(g.matmul(pick(), leaf("w", [cols, cols])), leaf("b", [cols])),
        lambda: g.bias_add(g.matmul_bt(pick(), leaf("w", [cols, cols])), leaf("b", [cols])),
        lambda: (lambda x: g.mul(x, g.sigmoid(x)))(pick()),
        lambda: (lambda x: g.mul(g.sigmoid(x), x))(pick()),
        lambda: g.mul(g.silu(pick()), pick()),
        lambda: g.mul(pick(), g.silu(pick())),
        lambda: (lambda x: g.mul(g.mul(x, g.sigmoid(x)), pick()))(pick()),
        lambda: g.neg(g.neg(pick())),
        lambda: g.add(pick(), g.neg(pick())),
        lambda: g.add(g.neg(pick()), pick()),
        lambda: g.sub(pick(), g.neg(pick())),
        lambda: g.neg(g.sub(pick(), pick())),
        lambda: g.relu(g.relu(pick())),
        lambda: g.abs(g.neg(pick())),
        lambda: g.abs(g.abs(pick())),
        lambda: g.tanh(pick()),
        lambda: g.mul(pick(), pick()),
        lambda: g.sigmoid(pick()),
        lambda: g.matmul(pick(), leaf("w", [cols, cols])),
        lambda: g.add(pick(), g.matmul(pick(), leaf("w", [cols, cols]))),
        lambda: g.add(g.matmul(pick(), leaf("w", [cols, cols])), pick()),
        lambda: g.add(pick(), g.matmul_bt(pick(), leaf("w", [cols, cols]))),
        lambda: g.add(g.matmul_bt(pick(), leaf("w", [cols, cols])), pick()),
        rope_then_cache_write,
    ]
    for _ in range(int(rng.integers(3, 9))):
        node = patterns[int(rng.integers(len(patterns)))]()
        if node is None:
            continue
        pool.append(node)
        if rng.random() < 0.3:  # share an intermediate: the extractor must not recompute it
            pool.append(g.node(node).inputs[0])
    outs = [pool[int(i)] for i in rng.choice(len(pool), size=int(rng.integers(1, 4)))]
    g.set_outputs([*(outs if rng.random() < 0.9 else [*outs, outs[0]]), *written])
    return g, feeds


def test_200_seeded_random_graphs_give_the_same_values_optimized_and_every_rule_fires():
    rng = np.random.default_rng(20240611)
    fired: dict[str, int] = {}
    for _ in range(200):
        g, feeds = _random_graph(rng)
        opt, report = optimize(g)
        _assert_same_values(g, opt, feeds)
        assert report.cost_after <= report.cost_before
        for rule, count in report.rules_fired.items():
            fired[rule] = fired.get(rule, 0) + count
    assert {r.name for r in table_rules()} <= {r for r, c in fired.items() if c}, f"rules that never fired: {fired}"


# -- each rule on a graph built for it ------------------------------------------------------------
def _build_pattern(tree, shapes: dict[str, list[int]]) -> Graph:
    g, env = Graph(), {}

    def build(t):
        if isinstance(t, str):
            if t not in env:
                env[t] = g.input(t[1:], shapes[t])
            return env[t]
        op_name, *args = t
        attrs = ast.literal_eval("{" + args.pop()[1] + "}") if args and isinstance(args[-1], tuple) else {}
        return g.apply(op_name, *(build(a) for a in args), **attrs)

    g.set_outputs([build(tree)])
    return g


def _rope_then_cache_write() -> Graph:
    g = Graph()
    pos = g.input_u32("kv_pos", [1])
    k = g.rope_dynamic_offset(g.input("k", [1, 8]), 10000.0, pos, 4)
    g.set_outputs([g.cache_write(k, g.input("cache", [4, 8]), pos)])
    return g


# Rules whose left side needs more than F32 inputs of [4, 4] / [4] (U32 positions, a KV cache).
PATTERN_GRAPHS = {"rope_then_cache_write": _rope_then_cache_write}


def _pattern_graph(rule) -> Graph:
    """The rule's left side with its variables as inputs, the first shapes its ops accept."""
    if rule.name in PATTERN_GRAPHS:
        return PATTERN_GRAPHS[rule.name]()
    tree = _parse_sexpr(rule.lhs, rule.name)
    names = sorted(set(_variables(tree)))
    for combo in itertools.product(([4, 4], [4]), repeat=len(names)):
        try:
            return _build_pattern(tree, dict(zip(names, combo, strict=True)))
        except (ValueError, TypeError):
            continue
    raise AssertionError(f"rule {rule.name!r}: no [4, 4] / [4] inputs fit {rule.lhs}; give it a graph in this test")


def _variables(t):
    if isinstance(t, str):
        yield t
    elif isinstance(t, list):
        for a in t[1:]:
            yield from _variables(a)


def _ops(t) -> set[str]:
    return {t[0]} | set().union(*(_ops(a) for a in t[1:])) if isinstance(t, list) else set()


@pytest.mark.parametrize("rule", table_rules(), ids=lambda r: r.name)
def test_each_rule_fires_on_its_pattern_and_the_sessions_agree(rule):
    g = _pattern_graph(rule)
    opt, report = optimize(g)
    assert report.rules_fired.get(rule.name, 0) >= 1, report.summary()
    assert rule.name in report.summary()
    new_ops = _ops(_parse_sexpr(rule.rhs, rule.name)) - _ops(_parse_sexpr(rule.lhs, rule.name))
    for op_name in new_ops:
        assert report.fusions.get(op_name, 0) >= 1, f"{rule.name}: {op_name} not in the result ({report.summary()})"
    assert report.nodes_after < report.nodes_before
    rng = np.random.default_rng(0)
    feeds = {name: rng.uniform(-1, 1, size=g.node(nid).ty.shape).astype(np.float32) for name, nid in g.leaves("input")}
    outs = []
    for flag in (False, True):
        s = build_inference_session(g, optimize=flag)
        for name, v in feeds.items():
            s.set_input(name, v)
        for name, _ in g.leaves("input_u32"):
            s.set_input_u32(name, [1])
        s.step()
        outs.append(s.read_output_by_index(0))
    np.testing.assert_allclose(outs[1], outs[0], **FP32)


# -- what is preserved -----------------------------------------------------------------------------
def test_a_fusion_that_would_recompute_a_shared_product_is_not_applied():
    g = Graph()
    x, w, b = g.input("x", [4, 64]), g.parameter("w", [64, 4]), g.parameter("b", [4])
    prod = g.matmul(x, w)
    g.set_outputs([g.bias_add(prod, b), g.relu(prod)])
    opt, report = optimize(g)
    assert [n.op for n in opt.nodes() if not OPS[n.op].leaf].count("matmul") == 1
    assert "gemm" not in {n.op for n in opt.nodes()}, report.summary()


def test_leaves_outputs_and_in_place_cache_writes_are_preserved():
    g = Graph()
    x = g.input("x", [1, 8])
    unused = g.parameter("unused", [3])
    cache = g.input("cache", [4, 8])
    pos = g.input_u32("pos", [1])
    written = g.cache_write(g.neg(g.neg(x)), cache, pos)
    twice = g.cache_write(g.neg(g.neg(x)), cache, pos)
    g.set_outputs([written, g.neg(g.neg(x)), twice])
    opt, report = optimize(g)
    leaves = [(n.op, n.attrs["name"]) for n in opt.nodes() if OPS[n.op].leaf]
    assert leaves == [("input", "x"), ("parameter", "unused"), ("input", "cache"), ("input_u32", "pos")]
    assert [n.op for n in opt.nodes()].count("cache_write") == 2, "in-place ops must never be merged"
    assert len(opt.outputs()) == 3 and opt.node(opt.outputs()[1]).op == "input"
    assert report.rules_fired["double_negation"] >= 1
    assert unused == g.leaves("parameter")[0][1]


# -- sessions, reports, cache keys, CLI ------------------------------------------------------------
def _mlp() -> Graph:
    g = Graph()
    x, y = g.input("x", [8, 6]), g.input("labels", [8, 3])
    h = g.bias_add(g.matmul(x, g.parameter("w1", [6, 5])), g.parameter("b1", [5]))
    h = g.mul(h, g.sigmoid(h))
    logits = g.bias_add(g.matmul_bt(h, g.parameter("w2", [3, 5])), g.parameter("b2", [3]))
    g.set_outputs([g.cross_entropy_loss(logits, y)])
    return g


def test_training_optimized_and_not_gives_the_same_losses_and_the_report_has_meganeuras_fields():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 8)]
    losses = []
    for flag in (False, True):
        s = build_session(_mlp(), optimizer="sgd", optimize=flag)
        s.set_learning_rate(0.1)
        run = []
        for _ in range(3):
            s.set_input("x", x)
            s.set_input("labels", y)
            s.step()
            run.append(float(s.read_loss()))
        losses.append(run)
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    s, report = build_session_with_report(_mlp(), optimizer="sgd")
    assert [r.stage for r in report.stages] == ["forward", "train step"]
    assert report.fusions["gemm"] == 2 and report.fusions["silu"] == 1
    assert report.rules_fired["matmul_bias_to_gemm"] >= 1 and report.rules_fired["silu_from_sigmoid"] >= 1
    assert report.eclasses > 0 and report.enodes >= report.eclasses and report.saturation_seconds > 0
    assert "(rewrite (Op_bias_add (Op_matmul ?a ?b" in report.program and "(datatype T" in report.program
    assert build_session(_mlp(), optimize=False).report is None


def test_cache_key_covers_the_optimize_setting_and_attributes(tmp_path):
    g = _mlp()
    assert graph_key(g, None, None, True) != graph_key(g, None, None, False)
    a, b = Graph(), Graph()
    for graph, eps in ((a, 1e-5), (b, 1e-6)):
        x = graph.input("x", [2, 4])
        graph.set_outputs([graph.mean_all(graph.rms_norm(x, graph.parameter("w", [4]), eps))])
    assert graph_key(a, None, None) != graph_key(b, None, None)
    from meganeura_onnx import build_session_cached

    path = tmp_path / "model.onnx"
    plain = build_session_cached(_mlp(), path, optimize=False)
    optimized = build_session_cached(_mlp(), path)
    assert plain._prog.report is None and optimized._prog.report is not None, "a model cached without optimization was reused"
    again = build_session_cached(_mlp(), path)
    assert again._prog.report is None, "the cached optimized model was not reused"
    assert again.report.stages[0].stage == "forward"


def test_inspect_optimize_prints_the_report_of_a_model_file(tmp_path):
    from cli_launch import ROOT, meganeura

    model = str(ROOT / "models" / "mnist_mlp.py")
    human = meganeura("inspect", "--optimize", model).stdout
    assert "OptimizeReport (forward)" in human and "rules fired: matmul_bias_to_gemm x2" in human
    assert "OptimizeReport (train step)" in human and "e-classes" in human and "saturation" in human
    stages = json.loads(meganeura("inspect", "--optimize", model, "--json").stdout)["stages"]
    assert [s["stage"] for s in stages] == ["forward", "train step"]
    assert stages[0]["fusions"] == {"gemm": 2} and stages[0]["removed"] == {"bias_add": 2, "matmul": 2}
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"not a model file")
    bad = meganeura("inspect", "--optimize", str(onnx_file), check=False)
    assert bad.returncode != 0 and "--optimize takes a model file" in bad.stderr and "Traceback" not in bad.stderr


def test_saturation_stops_at_the_iteration_and_enode_limits_and_says_why():
    g = Graph()
    x, u = g.input("x", [2, 3]), g.input("u", [2, 3])
    g.set_outputs([g.mul(g.mul(x, g.sigmoid(x)), u)])  # silu needs one round, swiglu a second
    full, report = optimize(g)
    assert report.stop_reason == "saturated" and report.fusions == {"swiglu": 1}
    one, report = optimize(g, limits=Limits(iterations=1))
    assert report.stop_reason == "iteration limit (1)" and report.fusions == {"silu": 1}
    _, report = optimize(g, limits=Limits(enodes=3))
    assert report.stop_reason == "e-node limit (3)" and report.iterations == 1
    feeds = {"x": np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3), "u": np.ones((2, 3), np.float32)}
    _assert_same_values(g, one, feeds)
    _assert_same_values(g, full, feeds)


def test_a_rule_naming_an_unknown_op_or_an_unbound_variable_is_refused_with_its_name():
    keys = AttrKeys()
    with pytest.raises(ValueError, match="rewrite 'bad_op': 'transpose' is not an op of the table"):
        rule_program([Rewrite("bad_op", "(transpose (transpose ?x))", "?x")], keys)
    with pytest.raises(ValueError, match=r"rewrite 'bad_var': \?y on the right side is not bound"):
        rule_program([Rewrite("bad_var", "(neg ?x)", "?y")], keys)
    with pytest.raises(ValueError, match="rewrite 'bad_arity': neg takes"):
        rule_program([Rewrite("bad_arity", "(neg ?x ?y)", "?x")], keys)
