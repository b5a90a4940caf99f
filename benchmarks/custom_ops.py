"""Benchmark the com.meganeura kernels against their ONNX function bodies and ORT's contrib ops.

    python benchmarks/custom_ops.py --device cuda --json benchmarks/results/custom_ops_cuda.json
    python benchmarks/custom_ops.py --device cpu  --json benchmarks/results/custom_ops_cpu.json

Variants: ``kernel`` (library registered), ``function`` (same model, no library: ORT inlines the
function body), ``contrib`` (com.microsoft RotaryEmbedding / GroupQueryAttention, when ORT has a
kernel for fp32 on that provider; otherwise recorded as not applicable). Inputs and outputs are
bound on the device with IOBinding; each timing is the median per-run wall time of one session
run (kernel launch + ORT overhead + stream sync), after warm-up.
GB/s counts the bytes the op must touch at least once (inputs read + output written; for decode
attention the K/V rows [0, kv_pos] dominate); "frac" divides by the GPU's peak bandwidth.
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
    def __init__(self, device: str, iters: int):
        self.device = device
        self.iters = iters
        self.providers = (
            [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
        )
        self.lib = kc.custom_op_library(device)

    def time(self, model: bytes, feeds: dict, out_name: str, out_shape, library: bool, cpu_inputs=()):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = "/tmp/mn_bench"
        if library:
            so.register_custom_ops_library(self.lib)
        sess = ort.InferenceSession(model, so, providers=self.providers)
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
        out = ort.OrtValue.ortvalue_from_shape_and_type(list(out_shape), np.float32, dev, 0)
        b.bind_ortvalue_output(out_name, out)
        for _ in range(5):
            sess.run_with_iobinding(b)
        times = []
        for _ in range(self.iters):
            t0 = time.perf_counter()
            sess.run_with_iobinding(b)
            times.append(time.perf_counter() - t0)
        providers = sorted({n["provider"] for n in kc.profiled_nodes(sess) if n["provider"]})
        return statistics.median(times), out.numpy(), providers


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
        t, out, providers = r.time(model, feeds, out_name, out_shape, library, cpu_inputs)
    except Exception as e:  # noqa: BLE001 - recorded, e.g. contrib op without an fp32 kernel here
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    res = {"median_us": t * 1e6, "providers": providers}
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
    ap.add_argument("--quick", action="store_true", help="fewer shapes (smoke run)")
    a = ap.parse_args()
    r = Runner(a.device, a.iters or (100 if a.device == "cuda" else 30))
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
    hdr = f"{'op':16} {'shape':44} {'variant':9} {'time us':>9} {'GB/s':>8} {'frac':>6} {'speedup':>8}  providers / note"
    print(hdr)
    print("-" * len(hdr))
    for res in results:
        base = res["variants"].get("kernel", {}).get("median_us")
        for var, v in res["variants"].items():
            v.pop("_out", None)
            if "median_us" in v:
                gbps = res["bytes"] / (v["median_us"] * 1e-6) / 1e9
                v["GBps"] = gbps
                v["frac_peak"] = gbps / peak if peak else None
                v["kernel_speedup"] = v["median_us"] / base if base else None
                err = f"  err {v['max_abs_err']:.1e}" if "max_abs_err" in v else ""
                print(
                    f"{res['op']:16} {json.dumps(res['shape'])[:44]:44} {var:9} {v['median_us']:9.1f} {gbps:8.1f} "
                    f"{(f'{gbps / peak:.2f}' if peak else '-'):>6} {v['median_us'] / base:8.2f}x  {','.join(v['providers'])}"
                    f"{err}"
                )
            else:
                print(f"{res['op']:16} {json.dumps(res['shape'])[:44]:44} {var:9} {'n/a':>9}  {v['error'][:90]}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(
            json.dumps(
                {"device": a.device, "name": name, "ort": ort.__version__, "peak_GBps": peak, "iters": r.iters, "results": results},
                indent=1,
            )
        )
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
