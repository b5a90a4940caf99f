"""Benchmark the com.meganeura kernels against their ONNX function bodies and ORT's contrib ops.

    python benchmarks/custom_ops.py --device cuda --json benchmarks/results/custom_ops_cuda.json
    python benchmarks/custom_ops.py --device cpu  --json benchmarks/results/custom_ops_cpu.json

Element types: ``--dtypes float32,float16`` (default; bfloat16 is timed kernel-only, below). Variants: ``kernel``
(library registered), ``kernel_cuda_graph`` (CUDA: the same with ORT's CUDA graph, every input on
the device: the decode path, where the kernels read positions on the device and never sync),
``function`` (same model, no library: ORT inlines the function body), ``contrib`` (com.microsoft
RotaryEmbedding / GroupQueryAttention, when ORT has a kernel for that type on that provider;
otherwise recorded as not applicable, and a contrib op that ORT placed on the CPU inside a CUDA
session is flagged as such). Inputs and outputs are bound with IOBinding (on the device for CUDA).

Kernel-only time (CUDA): ``custom_ops/build/attn_check --json`` (``make -C custom_ops attn-check``),
run by this script when built: CUDA events around launches replayed from a CUDA graph, no ORT; its
results are stored under ``kernel_only``. The README table shows the per-op time of ``kernel``
(through ORT, outside a CUDA graph: it includes the host read-back of the position each op does to
validate it) next to the kernel-only time.

Timings per variant:
  wall    median wall time of one ``run_with_iobinding`` of the one-op graph (kernel launch +
          ORT's per-run overhead + stream sync), after warm-up.
  per-op  ORT's per-run overhead (~30 us on a GPU) hides short kernels, so the op is also timed
          in a graph holding N independent copies of it (same inputs, distinct outputs; ORT's
          common-subexpression elimination is disabled so the copies stay separate, and the
          profiler's node count proves it):  per_op = (t(N) - t(1)) / (N - 1).
          The fixed per-run cost cancels; what is left is the op's own cost when ops run back to
          back, i.e. GPU time, or host launch time where that is longer.
GB/s counts the bytes the op must touch at least once (inputs read + output written; for decode
attention the K/V rows [0, kv_pos] dominate) divided by the per-op time; "frac" divides by the
GPU's peak bandwidth. The JSON records the machine, versions, commit and load average.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import kernel_cases as kc  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

PEAK_GBPS = {"H100": 3350.0, "H200": 4800.0}
ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}
NP_TYPE = {"float32": np.float32, "float16": np.float16}


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip()
    except Exception:  # noqa: BLE001 - not a git checkout
        return ""


def nvidia_smi(query: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001 - no GPU here
        return ""


def kernel_only(device: str) -> dict | None:
    """Kernel-only CUDA timings from the standalone harness (when built), as its JSON."""
    exe = ROOT / "custom_ops" / "build" / "attn_check"
    if device != "cuda" or not exe.exists():
        return None
    out = Path("/tmp") / f"mn_attn_check_{os.getpid()}.json"
    run = subprocess.run([str(exe), "--json", str(out)], capture_output=True, text=True, timeout=600)
    if not out.exists():
        return {"error": (run.stdout + run.stderr)[-500:]}
    data = json.loads(out.read_text())
    out.unlink()
    return data


def gpu_name() -> str:
    return nvidia_smi("name")


def peak_for(name: str) -> float | None:
    for key, val in PEAK_GBPS.items():
        if key in name:
            return val
    return None


class Runner:
    def __init__(self, device: str, iters: int, copies: int, budget_s: float):
        self.device = device
        self.iters = iters
        self.copies = copies
        self.budget_s = budget_s
        self.providers = (
            [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
        )
        self.lib = kc.custom_op_library(device)

    def _session(self, model: bytes, library: bool, cuda_graph: bool = False):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.enable_profiling = not cuda_graph  # a captured graph runs no per-node events
        so.profile_file_prefix = os.path.join(tempfile.gettempdir(), "mn_bench")
        if library:
            so.register_custom_ops_library(self.lib)
        # CSE would merge the identical copies of the replicated graph into one node
        providers = self.providers
        if cuda_graph:
            providers = [("CUDAExecutionProvider", {"device_id": 0, "enable_cuda_graph": "1"}), "CPUExecutionProvider"]
        return ort.InferenceSession(model, so, providers=providers, disabled_optimizers=["CommonSubexpressionElimination"])

    def _run(
        self, model: bytes, feeds: dict, outs: list, out_shape, library: bool, cpu_inputs, iters: int, cuda_graph=False, dtype="float32"
    ):
        sess = self._session(model, library, cuda_graph)
        b = sess.io_binding()
        dev = "cuda" if self.device == "cuda" else "cpu"
        keep = []
        for name, arr in feeds.items():
            if (name in cpu_inputs and not cuda_graph) or dev == "cpu":
                b.bind_cpu_input(name, arr)
            else:
                v = ort.OrtValue.ortvalue_from_numpy(arr, dev, 0)
                keep.append(v)
                b.bind_ortvalue_input(name, v)
        vals = []
        for name in outs:
            out = ort.OrtValue.ortvalue_from_shape_and_type(list(out_shape), NP_TYPE[dtype], dev, 0)
            vals.append(out)
            b.bind_ortvalue_output(name, out)
        for _ in range(3):
            sess.run_with_iobinding(b)
        t_first = time.perf_counter()
        sess.run_with_iobinding(b)
        t_first = time.perf_counter() - t_first
        # keep each variant's timing loop to a few seconds (CPU function bodies take ~0.2 s a run)
        n = max(5, min(iters, int(self.budget_s / max(t_first, 1e-6))))
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            sess.run_with_iobinding(b)
            times.append(time.perf_counter() - t0)
        if cuda_graph:  # ORT captures only graphs whose every node runs on the CUDA provider
            return statistics.median(times), vals[0].numpy(), ["CUDAExecutionProvider"], None, n
        nodes = kc.profiled_nodes(sess)
        providers = sorted({x["provider"] for x in nodes if x["provider"]})
        return statistics.median(times), vals[0].numpy(), providers, nodes, n

    def time(self, model: bytes, feeds: dict, out_name: str, out_shape, library: bool, cpu_inputs=(), cuda_graph=False, dtype="float32"):
        """-> (wall s, per-op s or None, output, providers, info)"""
        run = functools.partial(self._run, cuda_graph=cuda_graph, dtype=dtype)
        t1, out, providers, nodes1, n1 = run(model, feeds, [out_name], out_shape, library, cpu_inputs, self.iters)
        info = {"iters": n1}
        copies = self.copies
        if copies > 1 and t1 * copies > self.budget_s / 3:  # slow variant (CPU function body): fewer copies
            copies = max(2, int(self.budget_s / 3 / t1))
        per_op = None
        if copies > 1:
            rmodel, routs = replicate(model, out_name, copies)
            tn, _, _, nodes_n, nn = run(rmodel, feeds, routs, out_shape, library, cpu_inputs, self.iters)
            per_op = (tn - t1) / (copies - 1)
            info.update(copies=copies, iters_copies=nn, t_copies_us=tn * 1e6)
            if nodes1 is None:  # CUDA graph: no profile; the copies were checked on the plain run
                return t1, per_op, out, providers, info
            n1, nn_ = len({x["name"] for x in nodes1}), len({x["name"] for x in nodes_n})  # distinct nodes run
            info.update(nodes=n1, nodes_copies=nn_)
            if nn_ < copies * max(1, n1):
                info["warning"] = "ORT merged or dropped copies: per-op time not valid"
                per_op = None
        return t1, per_op, out, providers, info


def replicate(model: bytes, out_name: str, n: int):
    """The graph with its nodes repeated n times (copy i's node outputs get suffix __i; inputs shared)."""
    import onnx

    m = onnx.load_from_string(model)
    g = m.graph
    nodes = list(g.node)
    graph_outs = list(g.output)
    outs = [out_name]
    for i in range(1, n):
        ren = {}
        for nd in nodes:
            c = onnx.NodeProto()
            c.CopyFrom(nd)
            c.name = f"{nd.name or nd.op_type}__{i}"
            for j, o in enumerate(c.output):
                if o:
                    ren[o] = f"{o}__{i}"
                    c.output[j] = ren[o]
            for j, x in enumerate(c.input):
                c.input[j] = ren.get(x, x)
            g.node.append(c)
        for vo in graph_outs:
            c = onnx.ValueInfoProto()
            c.CopyFrom(vo)
            c.name = ren.get(vo.name, vo.name)
            g.output.append(c)
        outs.append(ren[out_name])
    return m.SerializeToString(), outs


def model_of(nodes, inputs, outputs, functions=()):
    g = helper.make_graph(nodes, "bench", inputs, outputs)
    m = helper.make_model(
        g,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(kc.DOMAIN, 1), helper.make_opsetid("com.microsoft", 1)],
        functions=list(functions),
    )
    m.ir_version = 10
    return m.SerializeToString()


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


F = TensorProto.FLOAT


def bench_rope(r: Runner, S: int, H: int, hd: int, pos0: int, dtype: str = "float32"):
    D = H * hd
    T, npt = ONNX_TYPE[dtype], NP_TYPE[dtype]
    x = np.random.default_rng(0).standard_normal((S, D)).astype(npt)
    feeds = {"X": x, "offset_dyn": np.array([pos0], np.int64)}
    fn = kc.function_proto("Rope")
    node = helper.make_node("Rope", ["X", "offset_dyn"], ["Y"], domain=kc.DOMAIN, theta=10000.0, head_dim=hd, offset=0)
    model = model_of([node], [vi("X", T, [S, D]), vi("offset_dyn", TensorProto.INT64, [1])], [vi("Y", T, [S, D])], [fn] if fn else [])
    nbytes = 2 * S * D * x.itemsize
    res = {"op": "Rope", "dtype": dtype, "shape": {"S": S, "H": H, "head_dim": hd, "pos0": pos0}, "bytes": nbytes, "variants": {}}
    ref = kc.rope_ref(x.astype(np.float32), 10000.0, hd, pos0)
    common = dict(ref=ref, dtype=dtype)
    res["variants"]["kernel"] = run_variant(r, model, feeds, "Y", (S, D), True, cpu_inputs=("offset_dyn",), **common)
    if r.device == "cuda":
        res["variants"]["kernel_cuda_graph"] = run_variant(r, model, feeds, "Y", (S, D), True, cuda_graph=True, **common)
    if fn:
        res["variants"]["function"] = run_variant(r, model, feeds, "Y", (S, D), False, cpu_inputs=("offset_dyn",), **common)
    # com.microsoft.RotaryEmbedding: input [1, S, D], position_ids [1, S], cos/sin caches [max_pos, hd/2]
    max_pos = pos0 + S
    ang = np.arange(max_pos, dtype=np.float32)[:, None] * kc.inv_freq(10000.0, hd)[None, :]
    cfeeds = {
        "input": x.reshape(1, S, D),
        "position_ids": np.arange(pos0, pos0 + S, dtype=np.int64).reshape(1, S),
        "cos_cache": np.cos(ang).astype(npt),
        "sin_cache": np.sin(ang).astype(npt),
    }
    cnode = helper.make_node("RotaryEmbedding", list(cfeeds), ["Y"], domain="com.microsoft", interleaved=0, num_heads=H)
    cmodel = model_of(
        [cnode],
        [vi(k, T if v.dtype == npt else TensorProto.INT64, list(v.shape)) for k, v in cfeeds.items()],
        [vi("Y", T, [1, S, D])],
    )
    res["variants"]["contrib"] = run_variant(r, cmodel, cfeeds, "Y", (1, S, D), False, ref=ref.reshape(1, S, D), dtype=dtype)
    return res


def bench_attention(r: Runner, L: int, H: int, KVH: int, hd: int, max_seq: int, dtype: str = "float32"):
    kv_pos = L - 1  # decode: the query at position kv_pos attends to L cached rows
    T, npt = ONNX_TYPE[dtype], NP_TYPE[dtype]
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, H * hd)).astype(npt)
    kc_ = rng.standard_normal((max_seq, KVH * hd)).astype(npt)
    vc_ = rng.standard_normal((max_seq, KVH * hd)).astype(npt)
    feeds = {"Q": q, "K": kc_, "V": vc_, "kv_pos": np.array([kv_pos], np.int64)}
    fn = kc.function_proto("CachedAttention")
    node = helper.make_node("CachedAttention", list(feeds), ["Y"], domain=kc.DOMAIN, num_heads=H, num_kv_heads=KVH, head_dim=hd)
    model = model_of(
        [node],
        [vi("Q", T, [1, H * hd]), vi("K", T, [max_seq, KVH * hd]), vi("V", T, [max_seq, KVH * hd]), vi("kv_pos", TensorProto.INT64, [1])],
        [vi("Y", T, [1, H * hd])],
        [fn] if fn else [],
    )
    nbytes = (2 * L * KVH * hd + 2 * H * hd) * q.itemsize
    res = {
        "op": "CachedAttention",
        "dtype": dtype,
        "shape": {"cached": L, "H": H, "KVH": KVH, "head_dim": hd, "max_seq": max_seq},
        "bytes": nbytes,
        "variants": {},
    }
    f32 = [a.astype(np.float32) for a in (q, kc_, vc_)]
    ref = kc.cached_attention_ref(*f32, kv_pos, H, KVH, hd) if L <= 2048 else None
    res["variants"]["kernel"] = run_variant(r, model, feeds, "Y", (1, H * hd), True, ref=ref, cpu_inputs=("kv_pos",), dtype=dtype)
    if ref is None:
        ref = res["variants"]["kernel"].pop("_out")
    if r.device == "cuda":
        res["variants"]["kernel_cuda_graph"] = run_variant(r, model, feeds, "Y", (1, H * hd), True, ref=ref, cuda_graph=True, dtype=dtype)
    if fn:
        res["variants"]["function"] = run_variant(r, model, feeds, "Y", (1, H * hd), False, ref=ref, cpu_inputs=("kv_pos",), dtype=dtype)
    # com.microsoft.GroupQueryAttention with a shared past/present buffer (BNSH), new token = row kv_pos
    past_k = np.ascontiguousarray(kc_.reshape(max_seq, KVH, hd).transpose(1, 0, 2))[None]
    past_v = np.ascontiguousarray(vc_.reshape(max_seq, KVH, hd).transpose(1, 0, 2))[None]
    gfeeds = {
        "query": q.reshape(1, 1, H * hd),
        "key": kc_[kv_pos].reshape(1, 1, KVH * hd),
        "value": vc_[kv_pos].reshape(1, 1, KVH * hd),
        "past_key": past_k,
        "past_value": past_v,
        "seqlens_k": np.array([kv_pos], np.int32),
        "total_sequence_length": np.array(L, np.int32),
    }
    gnode = helper.make_node(
        "GroupQueryAttention", list(gfeeds), ["Y", "present_key", "present_value"], domain="com.microsoft", num_heads=H, kv_num_heads=KVH
    )
    gvi = [vi(k, T if v.dtype == npt else TensorProto.INT32, list(v.shape)) for k, v in gfeeds.items()]
    gmodel = model_of(
        [gnode], gvi, [vi("Y", T, [1, 1, H * hd]), vi("present_key", T, list(past_k.shape)), vi("present_value", T, list(past_v.shape))]
    )
    res["variants"]["contrib"] = run_variant(
        r,
        gmodel,
        gfeeds,
        "Y",
        (1, 1, H * hd),
        False,
        ref=ref.reshape(1, 1, H * hd),
        cpu_inputs=("seqlens_k", "total_sequence_length"),
        dtype=dtype,
    )
    return res


def run_variant(r, model, feeds, out_name, out_shape, library, *, ref, cpu_inputs=(), cuda_graph=False, dtype="float32"):
    try:
        t, per_op, out, providers, info = r.time(model, feeds, out_name, out_shape, library, cpu_inputs, cuda_graph, dtype)
    except Exception as e:  # noqa: BLE001 - recorded, e.g. contrib op without a kernel of this type here
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    res = {"median_us": t * 1e6, "per_op_us": per_op * 1e6 if per_op is not None else None, "providers": providers, **info}
    if r.device == "cuda" and "CUDAExecutionProvider" not in providers:
        res["note"] = f"ran on CPU: ORT has no {dtype} CUDA kernel for it"
    if ref is not None:
        res["max_abs_err"] = float(np.max(np.abs(out.astype(np.float32) - ref)))
    else:
        res["_out"] = out.astype(np.float32)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--iters", type=int, default=0, help="timed runs per variant (default 100 cuda / 30 cpu)")
    ap.add_argument("--copies", type=int, default=16, help="copies of the op in the per-op graph (1: wall time only)")
    ap.add_argument("--budget", type=float, default=0.0, help="seconds per timing loop (default 2 cuda / 4 cpu)")
    ap.add_argument("--quick", action="store_true", help="fewer shapes (smoke run)")
    ap.add_argument("--dtypes", default="float32,float16", help="comma-separated: float32, float16")
    a = ap.parse_args()
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in NP_TYPE]
    if bad:
        sys.exit(f"--dtypes: {bad[0]!r} is not one of {sorted(NP_TYPE)}")
    r = Runner(a.device, a.iters or (100 if a.device == "cuda" else 30), a.copies, a.budget or (2.0 if a.device == "cuda" else 4.0))
    if r.lib is None:
        sys.exit(f"custom-op library for {a.device} not built: make -C custom_ops")
    name = gpu_name() if a.device == "cuda" else platform.processor() or platform.machine()
    peak = peak_for(name) if a.device == "cuda" else None
    lens = [128, 512, 2048, 8192] if not a.quick else [128, 2048]
    results = []
    H, KVH, hd = 32, 8, 128
    for dtype in dtypes:
        for L in lens:
            results.append(bench_attention(r, L, H, KVH, hd, max_seq=8192, dtype=dtype))
        for S, pos0 in [(1, 4095), (2048, 0)] if not a.quick else [(1, 4095), (256, 0)]:
            results.append(bench_rope(r, S, H, hd, pos0, dtype=dtype))
    kernels = kernel_only(a.device)
    _print_results(results, kernels, a.device, name, peak, a.copies)
    if a.json:
        _write_json(a.json, results, kernels, a.device, name, peak, dtypes, r.iters, a.copies)


def _print_results(results: list, kernels, device: str, name: str, peak, copies: int) -> None:
    """The table: wall and per-op time of each variant, bandwidth and fraction of the peak."""
    print(f"device: {device} {name}  ORT {ort.__version__}  peak {peak or '-'} GB/s")
    print(
        f"wall = median time of one session run (includes ORT's per-run overhead); per-op = (t(N) - t(1)) / (N - 1)\n"
        f"from a graph with N = {copies} independent copies of the op (same inputs, CSE off). GB/s, frac and speedup use per-op."
    )
    hdr = f"{'op':16} {'dtype':8} {'shape':36} {'variant':17} {'wall us':>9} {'per-op us':>10} {'GB/s':>8} {'frac':>6} {'vs kern':>8}  providers / note"
    print(hdr)
    print("-" * len(hdr))
    for res in results:
        kern = res["variants"].get("kernel", {})
        base = kern.get("per_op_us") or kern.get("median_us")
        for var, v in res["variants"].items():
            v.pop("_out", None)
            shape = ",".join(f"{k}={x}" for k, x in res["shape"].items())[:36]
            if "median_us" in v:
                t = v["per_op_us"] if v.get("per_op_us") and v["per_op_us"] > 0 else None
                gbps = res["bytes"] / (t * 1e-6) / 1e9 if t else None
                v["GBps"] = gbps
                v["frac_peak"] = gbps / peak if (peak and gbps) else None
                v["vs_kernel"] = (t or v["median_us"]) / base if base else None
                err = f"  err {v['max_abs_err']:.1e}" if "max_abs_err" in v else ""
                note = f"  [{v['note']}]" if "note" in v else ""
                note += f"  [{v['warning']}]" if "warning" in v else ""
                print(
                    f"{res['op']:16} {res['dtype']:8} {shape:36} {var:17} {v['median_us']:9.1f} {(f'{t:10.1f}' if t else '       n/a')} "
                    f"{(f'{gbps:8.1f}' if gbps else '       -')} {(f'{gbps / peak:.2f}' if (peak and gbps) else '-'):>6} "
                    f"{v['vs_kernel']:7.2f}x  {','.join(v['providers'])}{err}{note}"
                )
            else:
                print(f"{res['op']:16} {res['dtype']:8} {shape:36} {var:17} {'n/a':>9}  {v['error'][:90]}")
    if kernels and "results" in kernels:
        print("\nkernel only (custom_ops/build/attn_check: CUDA events around launches replayed from a CUDA graph, no ORT):")
        for k in kernels["results"]:
            print(
                f"  {k['op']:14} {k['dtype']:8} {k['config']:14} B={k['batch']} L={k['cached']:<6} {k['kernel_graph_us']:8.2f} us "
                f"{k['GBps']:7.0f} GB/s {100 * k['frac_peak']:4.0f}%"
            )


def _write_json(path: Path, results: list, kernels, device: str, name: str, peak, dtypes: list, iters: int, copies: int) -> None:
    """The JSON record of the run: machine, versions, load average, every result and the kernel-only timings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "device": device,
                "name": name,
                "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
                "versions": {
                    "onnxruntime": ort.__version__,
                    "numpy": np.__version__,
                    "python": platform.python_version(),
                    "driver": nvidia_smi("driver_version") if device == "cuda" else None,
                },
                "commit": git_commit(),
                "loadavg": os.getloadavg(),
                "dtypes": dtypes,
                "ort": ort.__version__,
                "peak_GBps": peak,
                "iters": iters,
                "copies": copies,
                "method": "median_us: wall time of one run; per_op_us = (t(N copies) - t(1)) / (N - 1); GBps/frac_peak from per_op_us",
                "results": results,
                "kernel_only": kernels,
                "readme_table": "per_op_us of variant 'kernel' (through ORT, outside a CUDA graph) and kernel_only kernel_graph_us",
            },
            indent=1,
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
