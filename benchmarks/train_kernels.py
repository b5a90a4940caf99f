"""The train step's loss and optimizer kernels alone: ours against their ONNX function bodies.

    python benchmarks/train_kernels.py --device cuda --json benchmarks/results/train_kernels_gpu.json
    python benchmarks/train_kernels.py --device cpu --rows 256 --vocab 8192     # a smaller CPU shape

- ``SparseCrossEntropy`` (per-row loss term + log-sum-exp) and ``SparseCrossEntropyGrad``
  (``softmax - onehot`` from the log-sum-exp) at SmolLM2-135M's training shape (8 x 256 rows, vocab
  49152), float32 and float16 logits; the function bodies (float32 only) are ReduceLogSumExp +
  GatherElements and Exp + ScatterElements + Mul on ORT's own kernels.
- ``AdamUpdate`` over SmolLM2-135M's parameter shapes (30 layers of 9 tensors, embeddings, LM head,
  final norm: 273 tensors); on CUDA our kernel is a few multi-tensor launches, the function body
  ~13 elementwise nodes per parameter.

Each op runs alone in a one-node ONNX Runtime session, inputs and outputs bound once on the device
(IOBinding), so the times are the ops' own; the median of ``--iters`` runs is reported with the
spread, and the load average is recorded (timings on a shared machine are distorted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import run_info
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from meganeura_onnx.ops import OPS  # noqa: E402
from meganeura_onnx.runtime.custom_ops import custom_op_library  # noqa: E402

OPSET, DOMAIN = 21, "com.meganeura"
ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.uint32): TensorProto.UINT32}
HIDDEN, FFN, KV, LAYERS = 576, 1536, 192, 30


def _model(op: str, inputs: dict[str, np.ndarray], outputs: list[tuple[str, int]], **attrs) -> bytes:
    vis = [helper.make_tensor_value_info(n, ONNX_TYPE[a.dtype], list(a.shape)) for n, a in inputs.items()]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs]
    node = helper.make_node(op, list(inputs), [n for n, _ in outputs], domain=DOMAIN, **attrs)
    fn = next(d for d in OPS.values() if d.custom is not None and d.custom.name == op).custom_function
    arity = (len(inputs) - 6) // 4 if op == "AdamUpdate" else None
    body = fn(OPSET, arity) if arity else fn(OPSET)
    model = helper.make_model(
        helper.make_graph([node], op, vis, outs),
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)],
        functions=[body],
    )
    model.ir_version = 10
    return model.SerializeToString()


def _time(model: bytes, inputs: dict[str, np.ndarray], outputs: list[str], device: str, library: str | None, iters: int) -> dict:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if library:
        so.register_custom_ops_library(library)
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    sess = ort.InferenceSession(model, so, providers=providers)
    binding = sess.io_binding()
    keep = [ort.OrtValue.ortvalue_from_numpy(a, device, 0) for a in inputs.values()]
    for name, v in zip(inputs, keep, strict=True):
        binding.bind_ortvalue_input(name, v)
    for name in outputs:
        binding.bind_output(name, device)
    for _ in range(3):  # warm-up: allocations, cuDNN/cuBLAS handles
        sess.run_with_iobinding(binding)
    times = []
    for _ in range(iters):
        binding.synchronize_inputs()
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)
        binding.synchronize_outputs()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times)}


def cross_entropy(device: str, rows: int, vocab: int, iters: int, library: str | None) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for dtype in (np.float32, np.float16):
        x = (rng.standard_normal((rows, vocab)) * 3).astype(dtype)
        labels = rng.integers(0, vocab, rows).astype(np.uint32)
        lse = np.log(np.exp(x.astype(np.float64)).sum(axis=1)).astype(np.float32)
        fwd_in = {"logits": x, "labels": labels}
        bwd_in = {**fwd_in, "lse": lse, "scale": np.array([1.0 / rows], np.float32)}
        fwd = _model("SparseCrossEntropy", fwd_in, [("loss_rows", TensorProto.FLOAT), ("lse", TensorProto.FLOAT)], ignore_index=-1)
        bwd = _model("SparseCrossEntropyGrad", bwd_in, [("dlogits", ONNX_TYPE[np.dtype(dtype)])], ignore_index=-1)
        for op, model, ins, outs in (
            ("SparseCrossEntropy", fwd, fwd_in, ["loss_rows", "lse"]),
            ("SparseCrossEntropyGrad", bwd, bwd_in, ["dlogits"]),
        ):
            # The function bodies compute in float32 only (the precision pass never runs them in half).
            for impl, lib in (("kernel", library), ("function body", None))[: 2 if dtype == np.float32 else 1]:
                r = _time(model, ins, outs, device, lib, iters)
                out.append({"op": op, "dtype": np.dtype(dtype).name, "impl": impl, "shape": [rows, vocab], **r})
                print(f"{op:24s} {np.dtype(dtype).name:8s} {impl:14s} {r['median_ms']:8.3f} ms  ({r['min_ms']:.3f}-{r['max_ms']:.3f})")
    return out


def smollm2_shapes() -> list[tuple[int, ...]]:
    layer = [
        (HIDDEN, HIDDEN),
        (HIDDEN, KV),
        (HIDDEN, KV),
        (HIDDEN, HIDDEN),
        (HIDDEN, FFN),
        (HIDDEN, FFN),
        (FFN, HIDDEN),
        (HIDDEN,),
        (HIDDEN,),
    ]
    return [(49152, HIDDEN), *(layer * LAYERS), (HIDDEN,), (HIDDEN, 49152)]


def adam(device: str, iters: int, library: str | None, shapes: list[tuple[int, ...]]) -> list[dict]:
    rng = np.random.default_rng(1)
    ins = {
        h: np.array([v], np.float32)
        for h, v in zip(("lr", "beta1", "beta2", "eps", "step", "weight_decay"), (1e-3, 0.9, 0.95, 1e-8, 3.0, 0.1), strict=True)
    }
    for k, s in enumerate(shapes):
        for t in "pgmv":
            ins[f"{t}{k}"] = (rng.standard_normal(s) * 0.01).astype(np.float32) ** (2 if t == "v" else 1)
    outs = [f"{t}{k}_next" for k in range(len(shapes)) for t in "pmv"]
    model = _model("AdamUpdate", ins, [(o, TensorProto.FLOAT) for o in outs])
    elements = sum(int(np.prod(s)) for s in shapes)
    out = []
    for impl, lib in (("kernel", library), ("function body", None)):
        r = _time(model, ins, outs, device, lib, iters)
        out.append({"op": "AdamUpdate", "impl": impl, "tensors": len(shapes), "elements": elements, **r})
        print(f"{'AdamUpdate':24s} {len(shapes)} tensors {impl:14s} {r['median_ms']:8.3f} ms  ({r['min_ms']:.3f}-{r['max_ms']:.3f})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--rows", type=int, default=8 * 256)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--adam-layers", type=int, default=LAYERS, help="layers of SmolLM2 shapes in the Adam case (fewer for a quick CPU run)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    library = custom_op_library(a.device)
    if library is None:
        raise SystemExit(f"train_kernels: the {a.device} custom-op library is not built (make -C custom_ops)")
    if a.device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit("train_kernels: --device cuda needs onnxruntime-gpu with CUDAExecutionProvider")
    shapes = smollm2_shapes()
    shapes = shapes[: 1 + 9 * a.adam_layers] + shapes[-2:]
    result = {
        "device": a.device,
        "ort": ort.__version__,
        "machine": {**run_info.host(), "cpu": run_info.cpu_model()},
        "loadavg": run_info.load_average(),
        "commit": run_info.git_commit(),
        "dirty": run_info.git_dirty(),
        "date": run_info.utc_now(),
        "cross_entropy": cross_entropy(a.device, a.rows, a.vocab, a.iters, library),
        "adam": adam(a.device, a.iters, library, shapes),
    }
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
