"""Shared helpers for the test suite."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from meganeura_onnx import Graph
from meganeura_onnx.ops import OPS, Feeds


def op_examples(include_custom: bool = True):
    """(op name, example index, builder) for every example of every non-leaf op in the table."""
    cases = []
    for name, d in OPS.items():
        if d.leaf:
            continue
        for k, ex in enumerate(d.examples):
            cases.append(pytest.param(name, k, ex, id=f"{name}-{k}"))
    return cases


def build_example(example, seed: int = 0) -> tuple[Graph, Feeds]:
    g = Graph()
    feeds = Feeds(np.random.default_rng(seed))
    out = example(g, feeds)
    g.set_outputs([out])
    return g, feeds


def run_model(model, feeds: dict, library: str | None = None) -> list[np.ndarray]:
    """Run an ONNX ModelProto on ORT's CPU provider (optionally with a custom-op library)."""
    opts = ort.SessionOptions()
    if library:
        opts.register_custom_ops_library(library)
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def live_nodes(g: Graph) -> list:
    """The nodes the outputs of ``g`` depend on, in id order (walked here, not by the package's own
    ``reachable``, so a pass's tests do not lean on the code they check)."""
    seen, stack = set(g.outputs()), list(g.outputs())
    while stack:
        for i in g.node(stack.pop()).inputs:
            if i not in seen:
                seen.add(i)
                stack.append(i)
    return [g.node(i) for i in sorted(seen)]
