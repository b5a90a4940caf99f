"""The decode-layer fusion (transforms.decode_layer_fusion): a tiny LLaMA decode step's five fused ops per
layer become one decode_layer when asked (CUDA sessions by default, CPU sessions not), chains that differ
from that data flow are left alone, and the fused graph computes the unfused graph's logits and caches on
the CPU, with the DecodeLayer kernel and with its function body."""

from __future__ import annotations

import ctypes

import kernel_cases as kc
import numpy as np
import pytest
import rope_attention_cases as rc
from meganeura_onnx.models import llama

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.init import default_parameters
from meganeura_onnx.transforms.rewrite import optimize

LIB = kc.kernel_library("cpu")
TINY = llama.PRESETS["tiny"]
LAYERS = TINY.num_hidden_layers
FIVE = ("rms_norm_linear", "rope_cached_attention", "linear_residual", "rms_norm_swiglu")


def op_counts(g: Graph) -> dict[str, int]:
    """Fused op -> nodes of index 0 (one per ONNX node) in ``g``."""
    counts: dict[str, int] = {}
    for n in g.nodes():
        if n.op in (*FIVE, "decode_layer") and n.attrs.get("index", 0) == 0:
            counts[n.op] = counts.get(n.op, 0) + 1
    return counts


@pytest.mark.parametrize("batch", [None, 4], ids=["one-sequence", "batch-4"])
def test_each_layers_five_fused_ops_become_one_decode_layer_when_asked(batch):
    g = llama.build_graph(TINY, "decode", 1, 16, batch)
    fused, report = optimize(g, stage="inference")
    assert op_counts(fused) == {"decode_layer": LAYERS, "rms_norm_linear": 1}, op_counts(fused)  # + the final norm with the LM head
    assert report.rules_fired.get("fuse_decode_layer") == LAYERS and report.fusions.get("decode_layer") == LAYERS, report.summary()
    caches = sorted(n.attrs["index"] for n in fused.nodes() if n.op == "decode_layer" and n.attrs["index"])
    assert caches == [1, 1, 2, 2]  # each layer's K and V caches: their next values
    five, _ = optimize(g, stage="inference", decode_layer=False)
    assert op_counts(five) == {
        "rms_norm_linear": LAYERS + 1,  # one ONNX node (index 0) per q/k/v group, + the LM head
        "rope_cached_attention": LAYERS,
        "linear_residual": 2 * LAYERS,
        "rms_norm_swiglu": LAYERS,
    }
    assert "decode_layer" not in op_counts(optimize(g, stage="inference", decode_fusion=False)[0])  # what CPU sessions run


def test_cpu_sessions_leave_layers_apart_unless_asked():
    g = llama.build_graph(TINY, "decode", 1, 16)
    assert "DecodeLayer" not in build_inference_session(g, "cpu").plan().kernels()
    asked = build_inference_session(g, "cpu", decode_layer=True).plan().kernels()
    assert asked.get("DecodeLayer") == ("kernel" if LIB is not None else "function"), asked
    assert not {"RMSNormSwiGLU", "LinearResidual", "RopeCachedAttention"} & set(asked), asked


def test_optimizing_a_fused_graph_again_keeps_its_cache_writes():
    g = llama.build_graph(TINY, "decode", 1, 16)
    once, _ = optimize(g, stage="inference")
    twice, report = optimize(once, stage="inference")
    assert twice is once and report.kept_input
    assert sum(n.op == "decode_layer" for n in twice.nodes()) == 3 * LAYERS


def test_the_smollm2_decode_layer_is_one_onnx_node_after_ort_fusions():
    """benchmarks/decode_kernels.py's count: one node (kernel) per decoder layer, as exported and as ORT runs it."""
    from test_decode_fusion import decode_layer_nodes

    nodes = decode_layer_nodes(llama.PRESETS["smollm2-135m"], optimize=True)
    # exported: DecodeLayer alone (it reads the uint32 kv_pos as it is: no Cast to int64)
    assert nodes["exported"]["by_op"] == {"DecodeLayer": 1} and nodes["ort"]["by_op"] == {"DecodeLayer": 1}, nodes
    assert nodes["ort"]["cuda_kernels"] == 1, nodes


# -- logits: the fused graph against the unfused one on the CPU -----------------------------------------
def _sessions(batch: int | None, use_custom_ops: bool, seed: int = 4):
    g = llama.build_graph(TINY, "decode", 1, 32, batch)
    params = default_parameters(g, seed)
    fused, report = optimize(g, stage="inference", decode_layer=True)
    assert report.rules_fired.get("fuse_decode_layer") == LAYERS, report.summary()
    fused_s = build_inference_session(fused, "cpu", parameters=params, optimize=False, use_custom_ops=use_custom_ops)
    plain_s = build_inference_session(g, "cpu", parameters=params, optimize=False, use_custom_ops=use_custom_ops)
    return fused_s, plain_s


def _steps(fused, plain, batch: int | None, steps: int = 5):
    starts = np.array([0] if batch is None else [0, 5, 2, 9][:batch])
    rc.decode_in_lockstep(fused, plain, starts, steps, TINY.vocab_size)
    for name in plain.inplace_state | fused.inplace_state:
        np.testing.assert_allclose(fused.read_state(name), plain.read_state(name), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
@pytest.mark.parametrize("batch", [None, 4], ids=["one-sequence", "batch-4"])
def test_fused_graph_gives_the_unfused_graphs_logits_and_caches_with_the_cpu_kernel_in_place(batch):
    fused, plain = _sessions(batch, use_custom_ops=True)
    assert fused.plan().kernels() == {"DecodeLayer": "kernel", "RMSNormLinear": "kernel"}, fused.plan().kernels()
    assert len(fused.inplace_state) == 2 * LAYERS  # both caches of every layer: one buffer, written in place
    lib = ctypes.CDLL(LIB)
    lib.MeganeuraCacheWriteFullCopies.restype = ctypes.c_int64
    before = lib.MeganeuraCacheWriteFullCopies()
    _steps(fused, plain, batch)
    assert lib.MeganeuraCacheWriteFullCopies() == before


@pytest.mark.parametrize("batch", [None, 4], ids=["one-sequence", "batch-4"])
def test_fused_graph_gives_the_unfused_graphs_logits_with_the_function_body(batch):
    fused, plain = _sessions(batch, use_custom_ops=False)
    assert fused.plan().kernels() == {"DecodeLayer": "function", "RMSNormLinear": "function"}, fused.plan().kernels()
    _steps(fused, plain, batch, steps=3)


# -- chains the pass must leave alone ---------------------------------------------------------------
def _chain(*, eps_mlp: float = 1e-5, output_x1: bool = False, h_elsewhere: bool = False, o_residual_other: bool = False) -> Graph:
    """One layer written with the five fused ops (D 16, 4 x 2 heads of 4, intermediate 24), optionally off the pattern."""
    g = Graph()
    x, pos = g.input("x", [1, 16]), g.input_u32("kv_pos", [1])
    p = {n: g.parameter(n, s) for n, s in (("an", [16]), ("wq", [16, 16]), ("wk", [8, 16]), ("wv", [8, 16]), ("wo", [16, 16]))}
    p.update({n: g.parameter(n, s) for n, s in (("mn", [16]), ("wg", [24, 16]), ("wu", [24, 16]), ("wd", [16, 24]))})
    kc_, vc_ = g.input("k_cache", [8, 8]), g.input("v_cache", [8, 8])
    q, k, v = g.rms_norm_linear(x, p["an"], [p["wq"], p["wk"], p["wv"]], 1e-5)
    a, k2, v2 = g.rope_cached_attention(q, k, v, kc_, vc_, pos, 4, 2, 4, 1e4)
    x1 = g.linear_residual(a, p["wo"], g.input("r", [1, 16]) if o_residual_other else x)
    h = g.rms_norm_swiglu(x1, p["mn"], p["wg"], p["wu"], eps_mlp)
    outs = {"y": g.linear_residual(h, p["wd"], x1)}
    if output_x1:
        outs["x1"] = x1
    if h_elsewhere:
        outs["h2"] = g.mul(h, h)
    g.set_outputs(outs)
    return g


@pytest.mark.parametrize(
    "change",
    [{}, {"eps_mlp": 1e-6}, {"output_x1": True}, {"h_elsewhere": True}, {"o_residual_other": True}],
    ids=["the-pattern", "two-eps", "x1-is-an-output", "h-read-elsewhere", "o-proj-adds-another-residual"],
)
def test_only_exactly_the_five_op_data_flow_is_fused(change):
    from meganeura_onnx.transforms.decode_layer_fusion import fuse_decode_layers

    g = _chain(**change)
    out, made = fuse_decode_layers(g)
    assert made == (0 if change else 1)
    assert (out is g) == bool(change)
    if not change:
        assert op_counts(out) == {"decode_layer": 1}, op_counts(out)


def test_a_fused_chain_computes_what_the_five_ops_compute():
    """The hand-written chain and its fusion (numpy references of the graph): the same y and caches."""
    from meganeura_onnx.reference import evaluate
    from meganeura_onnx.transforms.decode_layer_fusion import fuse_decode_layers

    g = _chain()
    out, _ = fuse_decode_layers(g)
    rng = np.random.default_rng(0)
    feeds = {n.attrs["name"]: rng.uniform(-1, 1, n.ty.shape) for n in g.nodes() if n.op in ("input", "parameter")}
    feeds["kv_pos"] = np.array([5], np.uint32)
    want, got = evaluate(g, feeds, np.float64), evaluate(out, feeds, np.float64)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)


def test_fp16_lowering_for_cuda_runs_decode_layer_in_half_with_both_kv_caches_in_half():
    """The precision pass as a CUDA session runs it: DecodeLayer takes half, so both caches are stored in
    half, no Cast copies a cache and every float input of the node comes in half (checked on the model)."""
    from meganeura_onnx.export import to_model
    from meganeura_onnx.export.precision import half_storage_inputs, lower_precision

    g, _ = optimize(llama.build_graph(TINY, "decode", 1, 32), stage="inference")
    model, spec = to_model(g, params_as_inputs=True, with_state=True)
    stored = half_storage_inputs(model, "fp16", "cuda", [*spec.parameters, *spec.state])
    assert set(spec.state) <= stored, sorted(set(spec.state) - stored)
    lowered, report = lower_precision(model, "fp16", device="cuda", half_inputs=stored, half_outputs=[spec.state[n] for n in spec.state])
    caches = set(spec.state) | set(spec.state.values())
    assert not [n.input[0] for n in lowered.graph.node if n.op_type == "Cast" and n.input[0] in caches]
    layers = [n for n in lowered.graph.node if n.op_type == "DecodeLayer"]
    assert len(layers) == LAYERS and {p for _, _, op, p in report.nodes if op == "DecodeLayer"} == {"float16"}
    produced = {o: n for n in lowered.graph.node for o in n.output}
    for n in layers:  # no float input is a Cast to float32
        for name in n.input[:-1]:
            src = produced.get(name)
            assert src is None or not (src.op_type == "Cast" and src.attribute[0].i == 1), name


@pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("batch", [None, 4], ids=["one-sequence", "batch-4"])
def test_the_cpu_kernel_gives_the_five_kernels_logits_bit_for_bit(precision, batch):
    """DecodeLayer's CPU kernel runs the five kernels' work in sequence, rounding where they round: a CPU
    session with it (decode_layer=True) and one running the five fused ops give identical logits, in
    float32 and with the layers computed in half."""
    g = llama.build_graph(TINY, "decode", 1, 32, batch)
    params = default_parameters(g, 1)
    layer = build_inference_session(g, "cpu", parameters=params, decode_layer=True, precision=precision)
    five_graph, _ = optimize(g, stage="inference", decode_layer=False)
    five = build_inference_session(five_graph, "cpu", parameters=params, optimize=False, precision=precision)
    half = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[precision]
    assert layer.plan().precision_of("DecodeLayer", "com.meganeura") == {half} == five.plan().precision_of("RMSNormSwiGLU", "com.meganeura")
    rows = 1 if batch is None else batch
    for step in range(3):
        for s in (layer, five):
            s.set_input_u32("input_ids", [7 + 11 * r + step for r in range(rows)])
            s.set_input_u32("kv_pos", [step + r for r in range(rows)])
            s.step()
        np.testing.assert_array_equal(layer.read_output_by_index(0), five.read_output_by_index(0), err_msg=f"step {step}")


@pytest.mark.parametrize("batch", [None, 4], ids=["one-sequence", "batch-4"])
def test_llama_runner_with_decode_layer_generates_the_plain_runners_greedy_tokens_on_cpu(batch):
    """LlamaRunner(decode_layer=True) on the CPU: [in, out] weights (trans_b=0 DecodeLayer), the prefill
    session's cache writes handed to the decode step's DecodeLayer and back; the greedy tokens of the
    runner without the fusion."""
    from meganeura_onnx.generation import generate, generate_batch

    kw = {"max_seq": 48, "prefill_chunk": 8, "device": "cpu", "seed": 5, **({} if batch is None else {"batch": batch})}
    cls = llama.LlamaRunner if batch is None else llama.LlamaBatchRunner
    on, off = cls(TINY, decode_layer=True, **kw), cls(TINY, decode_layer=False, **kw)
    assert "DecodeLayer" in on.decoder.plan().kernels() and "DecodeLayer" not in off.decoder.plan().kernels()
    prompts = [[3, 17, 42, 7, 99], [5, 6], [200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [42]][: batch or 1]
    if batch is None:
        assert list(generate(on, prompts[0], 24)) == list(generate(off, prompts[0], 24))
    else:
        assert generate_batch(on, prompts, 24) == generate_batch(off, prompts, 24)


def test_llama_runner_on_cpu_takes_decode_layer_by_default_where_the_kernel_library_is_built():
    """The CPU runner's default: one DecodeLayer per layer when our CPU kernel runs it, the products
    as ONNX Runtime's MatMul otherwise (the function body would be slower than MLAS)."""
    runner = llama.LlamaRunner(TINY, max_seq=16, prefill_chunk=4, device="cpu")
    kernels = runner.decoder.plan().kernels()
    assert ("DecodeLayer" in kernels) == (LIB is not None)
    plain = llama.LlamaRunner(TINY, max_seq=16, prefill_chunk=4, device="cpu", use_custom_ops=False)
    assert "DecodeLayer" not in plain.decoder.plan().kernels()
