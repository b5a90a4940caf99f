"""Benchmark the com.meganeura kernels against their ONNX function bodies and ORT's contrib ops.

    python benchmarks/custom_ops.py --device cuda --json benchmarks/results/custom_ops_cuda.json
    python benchmarks/custom_ops.py --device cpu  --json benchmarks/results/custom_ops_cpu.json

Variants: ``kernel`` (library registered), ``function`` (same model, no library: ORT inlines the
function body), ``contrib`` (com.microsoft RotaryEmbedding / GroupQueryAttention, when ORT has a
kernel for fp32 on that provider; otherwise recorded as not applicable, and a contrib op that ORT
placed on the CPU inside a CUDA session is flagged as such). Inputs and outputs are bound with
IOBinding (on the device for CUDA).

Two timings per variant:
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
GPU's peak bandwidth.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
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


def gpu_name() -> str:
    try:
        return (
            subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            .stdout.strip()
            .splitlines()[0]
        )
    except Exception:  # noqa: BLE001
        return ""


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

    def _session(self, model: bytes, library: bool):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = "/tmp/mn_bench"
        if library:
            so.register_custom_ops_library(self.lib)
        # CSE would merge the identical copies of the replicated graph into one node
        return ort.InferenceSession(model, so, providers=self.providers, disabled_optimizers=["CommonSubexpressionElimination"])

    def _run(self, model: bytes, feeds: dict, outs: list, out_shape, library: bool, cpu_inputs, iters: int):
        sess = self._session(model, library)
        b = sess.io_binding()
        dev = "cuda" if self.device == "cuda" else "cpu"
        keep = []
        for name, arr in feeds.items():
            if name in cpu_inputs or dev == "cpu":
                b.bind_cpu_input(name, arr)
            else:
                v = ort.OrtValue.ortvalue_from_numpy(arr, dev, 0)
                keep.append(v)
                b.bind_ortvalue_input(name, v)
        vals = []
        for name in outs:
            out = ort.OrtValue.ortvalue_from_shape_and_type(list(out_shape), np.float32, dev, 0)
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
        nodes = kc.profiled_nodes(sess)
        providers = sorted({x["provider"] for x in nodes if x["provider"]})
        return statistics.median(times), vals[0].numpy(), providers, nodes, n

    def time(self, model: bytes, feeds: dict, out_name: str, out_shape, library: bool, cpu_inputs=()):
        """-> (wall s, per-op s or None, output, providers, info)"""
        t1, out, providers, nodes1, n1 = self._run(model, feeds, [out_name], out_shape, library, cpu_inputs, self.iters)
        info = {"iters": n1}
        copies = self.copies
        if copies > 1 and t1 * copies > self.budget_s / 3:  # slow variant (CPU function body): fewer copies
            copies = max(2, int(self.budget_s / 3 / t1))
        per_op = None
        if copies > 1:
            rmodel, routs = replicate(model, out_name, copies)
            tn, _, _, nodes_n, nn = self._run(rmodel, feeds, routs, out_shape, library, cpu_inputs, self.iters)
            per_op = (tn - t1) / (copies - 1)
            n1, nn_ = len({x["name"] for x in nodes1}), len({x["name"] for x in nodes_n})  # distinct nodes run
            info.update(copies=copies, iters_copies=nn, t_copies_us=tn * 1e6, nodes=n1, nodes_copies=nn_)
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


def bench_rope(r: Runner, S: int, H: int, hd: int, pos0: int):
    D = H * hd
    x = np.random.default_rng(0).standard_normal((S, D)).astype(np.float32)
    feeds = {"X": x, "offset_dyn": np.array([pos0], np.int64)}
    fn = kc.function_proto("Rope")
    node = helper.make_node("Rope", ["X", "offset_dyn"], ["Y"], domain=kc.DOMAIN, theta=10000.0, head_dim=hd, offset=0)
    model = model_of([node], [vi("X", F, [S, D]), vi("offset_dyn", TensorProto.INT64, [1])], [vi("Y", F, [S, D])], [fn] if fn else [])
    nbytes = 2 * S * D * 4
    res = {"op": "Rope", "shape": {"S": S, "H": H, "head_dim": hd, "pos0": pos0}, "bytes": nbytes, "variants": {}}
    ref = kc.rope_ref(x, 10000.0, hd, pos0)
    res["variants"]["kernel"] = run_variant(r, model, feeds, "Y", (S, D), True, ref, ("offset_dyn",))
    if fn:
        res["variants"]["function"] = run_variant(r, model, feeds, "Y", (S, D), False, ref, ("offset_dyn",))
    # com.microsoft.RotaryEmbedding: input [1, S, D], position_ids [1, S], cos/sin caches [max_pos, hd/2]
    max_pos = pos0 + S
    ang = np.arange(max_pos, dtype=np.float32)[:, None] * kc.inv_freq(10000.0, hd)[None, :]
    cfeeds = {
        "input": x.reshape(1, S, D),
        "position_ids": np.arange(pos0, pos0 + S, dtype=np.int64).reshape(1, S),
        "cos_cache": np.cos(ang).astype(np.float32),
        "sin_cache": np.sin(ang).astype(np.float32),
    }
    cnode = helper.make_node("RotaryEmbedding", list(cfeeds), ["Y"], domain="com.microsoft", interleaved=0, num_heads=H)
    cmodel = model_of(
        [cnode],
        [vi(k, F if v.dtype == np.float32 else TensorProto.INT64, list(v.shape)) for k, v in cfeeds.items()],
        [vi("Y", F, [1, S, D])],
    )
    res["variants"]["contrib"] = run_variant(r, cmodel, cfeeds, "Y", (1, S, D), False, ref.reshape(1, S, D), ())
    return res


def bench_attention(r: Runner, L: int, H: int, KVH: int, hd: int, max_seq: int):
    kv_pos = L - 1  # decode: the query at position kv_pos attends to L cached rows
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, H * hd)).astype(np.float32)
    kc_ = rng.standard_normal((max_seq, KVH * hd)).astype(np.float32)
    vc_ = rng.standard_normal((max_seq, KVH * hd)).astype(np.float32)
    feeds = {"Q": q, "K": kc_, "V": vc_, "kv_pos": np.array([kv_pos], np.int64)}
    fn = kc.function_proto("CachedAttention")
    node = helper.make_node("CachedAttention", list(feeds), ["Y"], domain=kc.DOMAIN, num_heads=H, num_kv_heads=KVH, head_dim=hd)
    model = model_of(
        [node],
        [vi("Q", F, [1, H * hd]), vi("K", F, [max_seq, KVH * hd]), vi("V", F, [max_seq, KVH * hd]), vi("kv_pos", TensorProto.INT64, [1])],
        [vi("Y", F, [1, H * hd])],
        [fn] if fn else [],
    )
    nbytes = 2 * L * KVH * hd * 4 + 2 * H * hd * 4
    res = {
        "op": "CachedAttention",
        "shape": {"cached": L, "H": H, "KVH": KVH, "head_dim": hd, "max_seq": max_seq},
        "bytes": nbytes,
        "variants": {},
    }
    ref = kc.cached_attention_ref(q, kc_, vc_, kv_pos, H, KVH, hd) if L <= 2048 else None
    res["variants"]["kernel"] = run_variant(r, model, feeds, "Y", (1, H * hd), True, ref, ("kv_pos",))
    if ref is None:
        ref = res["variants"]["kernel"].pop("_out")
    if fn:
        res["variants"]["function"] = run_variant(r, model, feeds, "Y", (1, H * hd), False, ref, ("kv_pos",))
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
    gvi = [vi(k, F if v.dtype == np.float32 else TensorProto.INT32, list(v.shape)) for k, v in gfeeds.items()]
    gmodel = model_of(
        [gnode], gvi, [vi("Y", F, [1, 1, H * hd]), vi("present_key", F, list(past_k.shape)), vi("present_value", F, list(past_v.shape))]
    )
    res["variants"]["contrib"] = run_variant(
        r, gmodel, gfeeds, "Y", (1, 1, H * hd), False, ref.reshape(1, 1, H * hd), ("seqlens_k", "total_sequence_length")
    )
    return res


def run_variant(r, model, feeds, out_name, out_shape, library, ref, cpu_inputs):
    try:
        t, per_op, out, providers, info = r.time(model, feeds, out_name, out_shape, library, cpu_inputs)
    except Exception as e:  # noqa: BLE001 - recorded, e.g. contrib op without an fp32 kernel here
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    res = {"median_us": t * 1e6, "per_op_us": per_op * 1e6 if per_op is not None else None, "providers": providers, **info}
    if r.device == "cuda" and "CUDAExecutionProvider" not in providers:
        res["note"] = "ran on CPU: ORT has no fp32 CUDA kernel for it"
    if ref is not None:
        res["max_abs_err"] = float(np.max(np.abs(out - ref)))
    else:
        res["_out"] = out
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--iters", type=int, default=0, help="timed runs per variant (default 100 cuda / 30 cpu)")
    ap.add_argument("--copies", type=int, default=16, help="copies of the op in the per-op graph (1: wall time only)")
    ap.add_argument("--budget", type=float, default=0.0, help="seconds per timing loop (default 2 cuda / 4 cpu)")
    ap.add_argument("--quick", action="store_true", help="fewer shapes (smoke run)")
    a = ap.parse_args()
    r = Runner(a.device, a.iters or (100 if a.device == "cuda" else 30), a.copies, a.budget or (2.0 if a.device == "cuda" else 4.0))
    if r.lib is None:
        sys.exit(f"custom-op library for {a.device} not built: make -C custom_ops")
    name = gpu_name() if a.device == "cuda" else platform.processor() or platform.machine()
    peak = peak_for(name) if a.device == "cuda" else None
    lens = [128, 512, 2048, 8192] if not a.quick else [128, 2048]
    results = []
    H, KVH, hd = 32, 8, 128
    for L in lens:
        results.append(bench_attention(r, L, H, KVH, hd, max_seq=8192))
    for S, pos0 in [(1, 4095), (2048, 0)] if not a.quick else [(1, 4095), (256, 0)]:
        results.append(bench_rope(r, S, H, hd, pos0))
    print(f"device: {a.device} {name}  ORT {ort.__version__}  peak {peak or '-'} GB/s")
    print(
        f"wall = median time of one session run (includes ORT's per-run overhead); per-op = (t(N) - t(1)) / (N - 1)\n"
        f"from a graph with N = {a.copies} independent copies of the op (same inputs, CSE off). GB/s, frac and speedup use per-op."
    )
    hdr = f"{'op':16} {'shape':36} {'variant':9} {'wall us':>9} {'per-op us':>10} {'GB/s':>8} {'frac':>6} {'vs kern':>8}  providers / note"
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
                    f"{res['op']:16} {shape:36} {var:9} {v['median_us']:9.1f} {(f'{t:10.1f}' if t else '       n/a')} "
                    f"{(f'{gbps:8.1f}' if gbps else '       -')} {(f'{gbps / peak:.2f}' if (peak and gbps) else '-'):>6} "
                    f"{v['vs_kernel']:7.2f}x  {','.join(v['providers'])}{err}{note}"
                )
            else:
                print(f"{res['op']:16} {shape:36} {var:9} {'n/a':>9}  {v['error'][:90]}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(
            json.dumps(
                {
                    "device": a.device,
                    "name": name,
                    "ort": ort.__version__,
                    "peak_GBps": peak,
                    "iters": r.iters,
                    "copies": a.copies,
                    "method": "median_us: wall time of one run; per_op_us = (t(N copies) - t(1)) / (N - 1); GBps/frac_peak from per_op_us",
                    "results": results,
                },
                indent=1,
            )
        )
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
