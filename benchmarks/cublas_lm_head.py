"""cuBLAS (``torch.matmul``) for SmolLM2-135M's LM head (576 -> 49152) and q|k|v (576 -> 960) at 1, 8 and
16 rows, float16 and float32: what the decode-step fusions compare their GEMV kernels with
(``custom_ops/decode_linear_check`` times those on the same shapes).

Each time: CUDA events over 100 products replayed from a CUDA graph, the median of 3 replays; weights
larger than 50 MB are read from four copies in turn, so from DRAM as in a decode step. TF32 is off.

    python benchmarks/cublas_lm_head.py OUT.json      # a CUDA machine with torch
"""

from __future__ import annotations

import json
import sys

import torch

SHAPES = (("lm_head", 576, 49152), ("q|k|v", 576, 960))


def time_products(x: torch.Tensor, weights: list[torch.Tensor], out: torch.Tensor, launches: int = 100) -> float:
    """Median us per product of ``x @ w.T`` over the weights in turn, replayed from one CUDA graph."""
    for w in weights:
        torch.matmul(x, w.t(), out=out)
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for i in range(launches):
            torch.matmul(x, weights[i % len(weights)].t(), out=out)
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches)
    return sorted(times)[1]


def main(path: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for name, k, n in SHAPES:
        for dtype in (torch.float16, torch.float32):
            copies = 4 if n * k * torch.finfo(dtype).bits // 8 > 50e6 else 1
            weights = [torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5 for _ in range(copies)]
            for m in (1, 8, 16):
                x = torch.randn(m, k, device="cuda", dtype=dtype)
                us = time_products(x, weights, torch.empty(m, n, device="cuda", dtype=dtype))
                row = {"op": "torch.matmul (cuBLAS)", "shape": name, "dtype": str(dtype).split(".")[-1], "M": m, "K": k, "N": n}
                row.update(us=round(us, 2), weight_copies=copies, torch=torch.__version__, gpu=torch.cuda.get_device_name())
                print(json.dumps(row), flush=True)
                rows.append(row)
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/cublas_lm_head.py OUT.json")
    main(sys.argv[1])
