"""ONNX nodes per decoder layer of the one-token decode step, as exported and as ONNX Runtime runs it.

    python benchmarks/decode_kernels.py                  # SmolLM2-135M shape, CPUExecutionProvider
    python benchmarks/decode_kernels.py --device cuda    # the same after the CUDA EP's own fusions

The decode step of ``models/llama.py`` (mode ``decode``) is built with 1 and with 2 decoder layers,
with and without the e-graph optimizer; each is exported (parameters as inputs, KV caches as state)
(``optimized``: the decode-step fusions that CUDA sessions apply, down to one DecodeLayer per layer, counted
here on the CPU provider; ``optimized_without_decode_layer``: the same with each layer left as its five fused
ops; ``optimized_without_norm_fusion``: what CPU sessions run) and loaded into an ``InferenceSession`` with
our kernel library registered and
``optimized_model_filepath`` set, which writes the graph ORT runs after its own fusions (Simplified
LayerNormalization, QuickGelu, ...). One layer's nodes are the difference between the two models,
so the embedding, final norm and LM head drop out. After ORT's fusions every node is one kernel launch
except ORT's Gemm with a C input on CUDA, which copies C into the output first: ``cuda_kernels`` counts
those two (the graph a CUDA session runs: ``optimized``; LinearResidual takes the residual add into the
product's epilogue, so that graph has no such Gemm).

Prints (and with ``--out`` writes) JSON: per-layer node counts by op type, machine and load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from collections import Counter
from pathlib import Path

GEMM_C_COPY = "copy of Gemm's C (CUDA)"
"""Pseudo op counted beside each ORT ``Gemm`` with a C input: on CUDA it is a copy kernel of its own."""


def _model_nodes(
    cfg,
    layers: int,
    optimize: bool,
    device: str,
    decode_fusion: bool = True,
    decode_layer: bool = True,
    rope_attention: bool | None = None,
) -> tuple[Counter, Counter]:
    """(op type -> count) of the exported decode step and of the graph ORT runs (with ``GEMM_C_COPY``)."""
    import onnx
    import onnxruntime as ort
    from meganeura_onnx.models import llama

    from meganeura_onnx import custom_op_library
    from meganeura_onnx.export import to_model
    from meganeura_onnx.transforms.rewrite import optimize as optimize_graph

    g = llama.build_graph(dataclasses.replace(cfg, num_hidden_layers=layers), "decode", 1, 256)
    if optimize:
        layers_fused = decode_fusion and decode_layer
        g, _ = optimize_graph(g, stage="inference", decode_fusion=decode_fusion, decode_layer=layers_fused, rope_attention=rope_attention)
    model, _ = to_model(g, params_as_inputs=True, with_state=True)
    ours = Counter(n.op_type for n in model.graph.node)
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        library = custom_op_library(device)
        if library is not None:
            so.register_custom_ops_library(library)
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
        ort.InferenceSession(model.SerializeToString(), so, providers=providers)
        ran_nodes = onnx.load(so.optimized_model_filepath).graph.node
        ran = Counter(n.op_type for n in ran_nodes)
        ran[GEMM_C_COPY] = sum(n.op_type == "Gemm" and len(n.input) > 2 and n.input[2] != "" for n in ran_nodes)
    return ours, ran


def decode_layer_nodes(
    cfg, *, optimize: bool, device: str = "cpu", decode_fusion: bool = True, decode_layer: bool = True, rope_attention: bool | None = None
) -> dict:
    """One decoder layer's ONNX nodes by op type: ``exported`` (our file) and ``ort`` (what ORT runs, with
    ``cuda_kernels``: its nodes plus the C copy of each Gemm with a C input, the launches on CUDA).
    ``decode_fusion=False``: without the decode-step fusions; ``decode_layer=False``: with them but each
    layer left as its five fused ops (no DecodeLayer); ``rope_attention`` (default: as ``decode_fusion``):
    the rope + cache writes + attention fusion (CPU sessions run ``decode_fusion=False,
    rope_attention=True`` where our kernel library is loaded)."""
    args = (optimize, device, decode_fusion, decode_layer, rope_attention)
    one, two = _model_nodes(cfg, 1, *args), _model_nodes(cfg, 2, *args)
    out = {}
    for key, a, b in (("exported", one[0], two[0]), ("ort", one[1], two[1])):
        copies = b.pop(GEMM_C_COPY, 0) - a.pop(GEMM_C_COPY, 0)
        per_layer = {op: b[op] - a[op] for op in sorted(set(a) | set(b)) if b[op] != a[op]}
        out[key] = {"total": sum(per_layer.values()), "by_op": per_layer}
        if key == "ort":
            out[key]["cuda_kernels"] = out[key]["total"] + copies
    return out


def main(argv: list[str] | None = None) -> dict:
    import onnxruntime as ort
    import run_info  # beside this script (tests import the module without benchmarks/ on the path)
    from meganeura_onnx.models import llama

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smollm2-135m")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    cfg = llama.PRESETS[args.preset]
    result = {
        "what": f"ONNX nodes per decoder layer, {args.preset} decode step (1 token), {args.device}",
        "unoptimized": decode_layer_nodes(cfg, optimize=False, device=args.device),
        "optimized": decode_layer_nodes(cfg, optimize=True, device=args.device),
        "optimized_without_decode_layer": decode_layer_nodes(cfg, optimize=True, device=args.device, decode_layer=False),
        "optimized_without_norm_fusion": decode_layer_nodes(cfg, optimize=True, device=args.device, decode_fusion=False),
        "cpu_session": decode_layer_nodes(cfg, optimize=True, device=args.device, decode_fusion=False, rope_attention=True),
        "note": "inference sessions fuse the RMSNorms and the residual adds into their projections, and then each decoder layer "
        "into one DecodeLayer, on CUDA only ('optimized'; 'optimized_without_decode_layer': build_inference_session(..., decode_layer=False)); "
        "CPU sessions with our kernel library run 'cpu_session' (the rope + cache writes + attention fusion, no norm + projection "
        "fusion: ONNX Runtime's MLAS products outpace our GEMV kernels there), without it 'optimized_without_norm_fusion'; "
        "ort.cuda_kernels counts a Gemm with a C input as two launches (ORT's CUDA Gemm copies C first)",
        "machine": run_info.stamp(),
        "onnxruntime": ort.__version__,
    }
    return run_info.report(result, args.out)


if __name__ == "__main__":
    main()
