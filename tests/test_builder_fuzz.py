"""Seeded fuzz of the Graph builder: hostile and valid calls of every op of the table.

Each op's own examples give one valid call (its input types and attributes); the fuzzer then
replays it with one thing changed at a time: an attribute replaced by a hostile value (bools,
strings, None, NaN/inf, huge or negative numbers, float shapes...), an attribute dropped or an
unknown one added, an input replaced by a bad node id (bool, negative, out of range, a string, a
node of another graph), by a node of another dtype or another random shape, or inputs added and
removed. Leaf builders and ``set_outputs`` get hostile arguments too. Every call must either build
a node or raise ``ValueError``/``TypeError`` whose message names the op; anything else (another
exception type, a message without the op's name) is a crash.

Measured (SEED = 0, ROUNDS = 30; 73 ops, 176 examples): 7,256 calls, 774 built, 6,482 clear errors,
0 crashes. The count grows with the table.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter

import numpy as np
from conftest import build_example

from meganeura_onnx import Graph
from meganeura_onnx.ir import DType
from meganeura_onnx.ops import OPS

SEED = 0
ROUNDS = 30  # mutation rounds per (op, example); raising it finds the same classes more slowly

HOSTILE = [
    True,
    False,
    None,
    "3",
    "",
    2.9,
    -1,
    0,
    1,
    3,
    -0.0,
    2**70,
    -(2**70),
    float("inf"),
    float("-inf"),
    float("nan"),
    1e308,
    np.int64(4),
    np.float32(2.5),
    np.bool_(True),
    [],
    [0],
    [2, "3"],
    (2.9, 3.1),
    "23",
    [True, 2],
    [2, 3],
    (4,),
    object(),
    {"a": 1},
    b"4",
    1024,
    1025,
    2**40 + 1,
]


def _valid_call(example):
    """(input types, attrs) of the last node of the example's graph (the op under test)."""
    g, _ = build_example(example)
    node = g.node(g.outputs()[0])
    return node.op, [g.node(i).ty for i in node.inputs], dict(node.attrs)


def _leaf(g: Graph, k: int, ty) -> int:
    if ty.dtype is DType.U32:
        return g.input_u32(f"u{k}", list(ty.shape))
    return g.input(f"x{k}", list(ty.shape))


def _random_shape(rng) -> list[int]:
    return [int(d) for d in rng.integers(1, 9, size=int(rng.integers(1, 4)))]


def _mutate(rng, g: Graph, ids: list, types: list, attrs: dict, other: Graph) -> tuple[list, dict]:
    ids, attrs = list(ids), dict(attrs)
    kind = rng.integers(0, 8)
    if kind <= 2 and attrs:  # hostile attribute value (most frequent: attributes are where the bugs were)
        key = list(attrs)[rng.integers(len(attrs))]
        attrs[key] = HOSTILE[rng.integers(len(HOSTILE))]
    elif kind == 3 and attrs:
        del attrs[list(attrs)[rng.integers(len(attrs))]]
    elif kind == 4:
        attrs[str(rng.choice(["alpha", "axis", "theta", "shape", "eps"]))] = HOSTILE[rng.integers(len(HOSTILE))]
    elif kind == 5 and ids:
        k = rng.integers(len(ids))
        ids[k] = [True, -1, 10**6, "0", None, 1.0, other.node(0).id, np.int64(0)][rng.integers(8)]
    elif kind == 6 and ids:  # another shape or dtype at one input
        k = rng.integers(len(ids))
        dtype = types[k].dtype if rng.random() < 0.7 else (DType.U32 if types[k].dtype is DType.F32 else DType.F32)
        shape = _random_shape(rng)
        ids[k] = g.input_u32(f"m{len(g)}", shape) if dtype is DType.U32 else g.input(f"m{len(g)}", shape)
    elif ids and rng.random() < 0.5:
        ids.pop(rng.integers(len(ids)))
    else:
        ids.append(ids[0] if ids else 0)
    return ids, attrs


def _outcome(fn, op_name: str) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a numpy overflow warning on the way is a crash too
            fn()
    except (ValueError, TypeError) as e:
        return "error" if op_name in str(e) else f"crash: message without {op_name!r}: {type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - the point of the fuzzer: anything else is a crash
        return f"crash: {type(e).__name__}: {e}"
    return "built"


def _fuzz_ops(rng, tally: Counter, crashes: list) -> None:
    other = Graph()
    other.input("o", [2])
    for d in OPS.values():
        if d.leaf:
            continue
        for example in d.examples:
            op_name, types, attrs = _valid_call(example)
            for k in range(ROUNDS + 1):
                g = Graph()
                ids, a = [_leaf(g, j, t) for j, t in enumerate(types)], attrs
                if k:  # round 0 is the example's own call, which must build
                    ids, a = _mutate(rng, g, ids, types, attrs, other)
                result = _outcome(lambda g=g, ids=ids, a=a: g.apply(op_name, *ids, **a), op_name)
                if k == 0 and result != "built":
                    crashes.append(f"{op_name}: its example's own call fails: {result}")
                tally[result if not result.startswith("crash") else "crash"] += 1
                if result.startswith("crash"):
                    crashes.append(f"{op_name}({ids}, {a}): {result}")


def _fuzz_leaves(rng, tally: Counter, crashes: list) -> None:
    builders = {
        "input": lambda g, v, s: g.input(v, s),
        "input_u32": lambda g, v, s: g.input_u32(v, s),
        "parameter": lambda g, v, s: g.parameter(v, s),
        "constant": lambda g, v, s: g.constant(v, s),
        "scalar": lambda g, v, s: g.scalar(v),
        "set_outputs": lambda g, v, s: g.set_outputs(v),
    }
    names = ["x", "w", "", "const_0", "output_1", "adam_m.w", "x.next", "n0_relu/relu_1", 3, None, True]
    for _ in range(300):
        for op_name, build in builders.items():
            g = Graph()
            g.input("taken", [2])
            shape = HOSTILE[rng.integers(len(HOSTILE))] if rng.random() < 0.5 else _random_shape(rng)
            if op_name == "constant":
                n = math.prod(shape) if isinstance(shape, list) and all(type(d) is int for d in shape) else 2
                choices = [None, "abc", [1.0] * n, [float("nan")] * n, [True] * n, np.ones(n), [[1.0], [2.0, 3.0]], [1e39] * n]
                value = choices[rng.integers(len(choices))]
            elif op_name in ("scalar", "set_outputs"):
                value = HOSTILE[rng.integers(len(HOSTILE))] if rng.random() < 0.7 else [0]
            else:
                value = names[rng.integers(len(names))] if rng.random() < 0.6 else "taken"
            result = _outcome(lambda g=g, v=value, s=shape, b=build: b(g, v, s), op_name)
            tally[result if not result.startswith("crash") else "crash"] += 1
            if result.startswith("crash"):
                crashes.append(f"{op_name}({value!r}, {shape!r}): {result}")


def test_builder_fuzz_gives_a_node_or_a_clear_error_for_every_call():
    rng = np.random.default_rng(SEED)
    tally: Counter = Counter()
    crashes: list[str] = []
    _fuzz_ops(rng, tally, crashes)
    _fuzz_leaves(rng, tally, crashes)
    total = sum(tally.values())
    print(f"builder fuzz: {total} calls, {tally['built']} built, {tally['error']} clear errors, {tally['crash']} crashes")
    assert not crashes, f"{len(crashes)} of {total} calls crashed, e.g.:\n" + "\n".join(crashes[:15])
    assert total >= 5000 and tally["built"] > 0 and tally["error"] > 0


def test_the_fuzz_oracle_counts_a_crash():
    tally = Counter()
    assert _outcome(lambda: [][1], "relu").startswith("crash: IndexError")
    assert _outcome(lambda: (_ for _ in ()).throw(ValueError("no op name here")), "relu").startswith("crash: message")
    assert _outcome(lambda: (_ for _ in ()).throw(ValueError("relu: bad")), "relu") == "error"
    assert not tally
