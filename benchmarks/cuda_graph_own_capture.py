"""Does ONNX Runtime's CUDA-graph replay leave the GPU idle between greedy decode steps?

ORT's ``CUDAGraphManager::Replay`` synchronises its stream after every ``cudaGraphLaunch``, so each
queued step of ``Session.steps`` waits for the one before it and the host's next ``Run`` starts only
then. This probe measures what that costs: ``LlamaRunner`` (SmolLM2-135M shape, random weights, batch
1, prompt 128, 127 greedy steps in ``generate``'s chunks of 8 then 64) with ORT's CUDA graph, against
the same decoder session run without it on a stream we own (``user_compute_stream``), its steps
captured by ``torch.cuda.CUDAGraph`` (K steps per graph) and launched back to back with one wait per
chunk. The chosen tokens must equal ORT's; the JSON holds us per token per repeat.

It reaches into ``Session``'s IOBindings (a probe, not an API): GPU machine only, torch needed.

    python benchmarks/cuda_graph_own_capture.py OUT.json [--precision fp16] [--repeat 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "benchmarks", ROOT / "models"):
    sys.path.insert(0, str(p))

import run_info  # noqa: E402

NEW_TOKENS = 128


def chunk_sizes(steps: int) -> list[int]:
    """generate's chunks on a fast device: 8 steps first, then 64 at a time."""
    out, size = [], 8
    while steps:
        out.append(min(size, steps))
        steps -= out[-1]
        size = 64
    return out


def time_ort_graph(llama, cfg, prompt: list[int], precision: str, repeat: int) -> tuple[list[int], list[float]]:
    runner = llama.LlamaRunner(cfg, None, max_seq=512, device="cuda", precision=precision)
    times = []
    for _ in range(repeat):
        last = int(np.argmax(runner.prefill(prompt)))
        tokens, start = [last], time.perf_counter()
        for k in chunk_sizes(NEW_TOKENS - 1):
            tokens += runner.decode_greedy(tokens[-1], k)
        times.append((time.perf_counter() - start) / (NEW_TOKENS - 1))
    return tokens, times


class OwnGraphs:
    """The decoder's steps captured on our stream, ``per_graph`` steps per graph, one graph per parity."""

    def __init__(self, torch, decoder, stream, per_graph: int) -> None:
        self.torch, self.d, self.stream, self.k = torch, decoder, stream, per_graph
        self.graphs = {}
        start = decoder._parity
        for parity in (start, start ^ 1):
            self._set_parity(parity)
            for k in {1, per_graph}:
                self.graphs[(parity, k)] = self._capture(k)
        self._set_parity(start)

    def _set_parity(self, parity: int) -> None:
        while self.d._parity != parity:
            self.d._swap()

    def _capture(self, k: int):
        torch, d = self.torch, self.d
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="relaxed"):
            for _ in range(k):
                d._ort.run_with_iobinding(d._bindings[d._parity], d._queued_options[d._parity])
                d._swap()
        for _ in range(k):  # capturing ran nothing: the parity goes back
            d._swap()
        return graph

    def steps(self, count: int) -> None:
        self.d._bindings[self.d._parity].synchronize_inputs()
        with self.torch.cuda.stream(self.stream):
            while count:
                k = self.k if count >= self.k else 1
                self.graphs[(self.d._parity, k)].replay()
                for _ in range(k):
                    self.d._swap()
                count -= k
        self.stream.synchronize()


def time_own_graphs(torch, llama, cfg, prompt: list[int], precision: str, repeat: int, per_graph: int) -> tuple[list[int], list[float]]:
    import meganeura_onnx.runtime.session as session_module

    stream = torch.cuda.Stream()
    plain = session_module.providers_for

    def on_our_stream(device, providers=None, cuda_graph=False, tf32=False):
        found, kind = plain(device, providers, False, tf32)
        name, options = found[0]
        found[0] = (name, {**options, "user_compute_stream": str(stream.cuda_stream)})
        return found, kind

    session_module.providers_for = on_our_stream
    try:
        runner = llama.LlamaRunner(cfg, None, max_seq=512, device="cuda", precision=precision, cuda_graph=False)
    finally:
        session_module.providers_for = plain
    d = runner.decoder
    runner.decode_greedy(int(np.argmax(runner.prefill(prompt))), 4)  # ORT's first runs allocate
    torch.cuda.synchronize()
    graphs = OwnGraphs(torch, d, stream, per_graph)
    times = []
    for _ in range(repeat):
        last = int(np.argmax(runner.prefill(prompt)))
        tokens, position, start = [last], len(prompt), time.perf_counter()
        d.set_input_u32("input_ids", [last])
        d.set_input_u32("kv_pos", [position])
        for k in chunk_sizes(NEW_TOKENS - 1):
            graphs.steps(k)
            tokens += d.read_output("next_log")[0, position + 1 : position + 1 + k].tolist()
            position += k
        times.append((time.perf_counter() - start) / (NEW_TOKENS - 1))
    return tokens, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--precision", default="fp16", choices=("fp32", "fp16", "bf16"))
    ap.add_argument("--repeat", type=int, default=4)
    a = ap.parse_args()
    import llama
    import torch

    cfg = llama.load_config(None, "smollm2-135m")
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab_size, 128)]
    reference, ort_times = time_ort_graph(llama, cfg, prompt, a.precision, a.repeat)
    variants = {"ort_cuda_graph": {"us_per_token": [1e6 * t for t in ort_times]}}
    for k in (1, 2, 8):
        tokens, times = time_own_graphs(torch, llama, cfg, prompt, a.precision, a.repeat, k)
        variants[f"own_graph_{k}_steps"] = {"us_per_token": [1e6 * t for t in times], "tokens_equal_ort": tokens == reference}
    for v in variants.values():  # the first repeat includes ORT's capture: left out of the median
        v["median_us"] = statistics.median(v["us_per_token"][1:])
        v["tokens_per_s"] = 1e6 / v["median_us"]
    result = {**run_info.stamp(), "precision": a.precision, "new_tokens": NEW_TOKENS, "prompt": len(prompt), "variants": variants}
    run_info.report(result, a.out)


if __name__ == "__main__":
    main()
