"""One-row products on ONNX Runtime's CPU provider, as a SmolLM2-135M decode step runs them.

    python benchmarks/cpu_products.py [--threads 1] [--repeats 6] [--out FILE]

A decode step is ~30 x 7 products of one row by a weight matrix plus the LM head; on the CPU they are
bound by how fast the weights stream from memory. Each case is a model of ``--layers`` products with
distinct weights (so they do not stay in the cache), timed as CPU time of this process per run
(median of ``--repeats`` x 20 runs) on ``--threads`` intra-op threads:

- ``MatMul`` with the weights ``[in, out]`` as graph inputs bound with IOBinding (how our sessions
  bind parameters), ``Gemm`` with a residual C input (o_proj / down_proj after the optimizer);
- ``MatMul`` with the weights as initializers handed to ORT with ``SessionOptions.add_initializer``
  (our buffers, no copy): ORT prepacks constant MatMul weights for MLAS (onnxruntime-genai's models
  hold their weights as initializers); an in-place update of the buffer is then not seen;
- the LM head ``576 x 49152``: ``MatMul`` on ``[in, out]`` vs ``Gemm(transB=1)`` on ``[out, in]``
  (the tied embedding's layout).

Prints (and with ``--out`` writes) JSON with the machine and load average.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import run_info


def _session(nodes, inputs, outputs, initializers, threads: int, shared: dict):
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph(nodes, "products", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    for name, value in shared.items():
        so.add_initializer(name, value)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def case(kind: str, layers: int, k: int, n: int, threads: int, rng) -> tuple:
    """(session, IOBinding) of ``layers`` products of kind ``matmul`` / ``gemm_c`` / ``matmul_init`` / ``gemm_tb``."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    def vi(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    wshape = [n, k] if kind == "gemm_tb" else [k, n]
    weights = {f"w{i}": ort.OrtValue.ortvalue_from_numpy(rng.standard_normal(wshape, dtype=np.float32)) for i in range(layers)}
    inputs, inits, shared = [vi("x", [1, k]), vi("r", [1, n])], [], {}
    if kind == "matmul_init":  # placeholders that add_initializer replaces (never read)
        inits = [numpy_helper.from_array(np.zeros(wshape, np.float32), name) for name in weights]
        shared = weights
    else:
        inputs += [vi(name, wshape) for name in weights]
    nodes = []
    for i, name in enumerate(weights):
        if kind == "gemm_c":
            nodes.append(helper.make_node("Gemm", ["x", name, "r"], [f"y{i}"]))
        elif kind == "gemm_tb":
            nodes.append(helper.make_node("Gemm", ["x", name], [f"y{i}"], transB=1))
        else:
            nodes.append(helper.make_node("MatMul", ["x", name], [f"y{i}"]))
    if kind != "gemm_c":
        inputs = [v for v in inputs if v.name != "r"]
    sess = _session(nodes, inputs, [vi(f"y{i}", [1, n]) for i in range(layers)], inits, threads, shared)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(rng.standard_normal((1, k), dtype=np.float32)))
    if kind == "gemm_c":
        binding.bind_ortvalue_input("r", ort.OrtValue.ortvalue_from_numpy(rng.standard_normal((1, n), dtype=np.float32)))
    if kind != "matmul_init":
        for name, value in weights.items():
            binding.bind_ortvalue_input(name, value)
    for i in range(layers):
        binding.bind_ortvalue_output(f"y{i}", ort.OrtValue.ortvalue_from_numpy(np.zeros((1, n), np.float32)))
    return sess, binding, weights  # (the weights' OrtValues must outlive the session)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    groups = {
        "down_proj 1536x576": (args.layers, 1536, 576, ("matmul", "gemm_c", "matmul_init")),
        "lm_head 576x49152": (1, 576, 49152, ("matmul", "gemm_tb", "matmul_init")),
    }
    ms: dict[str, list[float]] = {}
    cases = {f"{g} {kind}": case(kind, layers, k, n, args.threads, rng) for g, (layers, k, n, kinds) in groups.items() for kind in kinds}
    for _ in range(args.repeats):  # cases interleaved: load drift hits them alike
        for name, (sess, binding, _) in cases.items():
            c0 = time.process_time()
            for _ in range(20):
                sess.run_with_iobinding(binding)
            ms.setdefault(name, []).append((time.process_time() - c0) / 20 * 1e3)
    result = {
        "what": f"CPU ms per run (median of {args.repeats} x 20), {args.threads} intra-op thread(s); down_proj: {args.layers} distinct weights per run",
        "cpu_ms": {name: round(statistics.median(v), 3) for name, v in ms.items()},
        "machine": run_info.stamp(),
    }
    return run_info.report(result, args.out)


if __name__ == "__main__":
    main()
