"""Mixed precision (CPU): the precision pass's casts, half-emulated numerics against numpy/ml_dtypes,
bf16 training against PyTorch autocast, fp16 dynamic loss scaling, checkpoints across precisions,
half-stored inference buffers and the CLI flags.

ORT's CPU EP has no fp16/bf16 MatMul or Gemm (onnxruntime 1.32), so on CPU those run *emulated*:
inputs rounded through the half type, float32 accumulation, the output rounded to half.
"""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner
from meganeura_onnx.cli.main import main
from onnx import TensorProto

from meganeura_onnx import Graph
from meganeura_onnx.export import to_model
from meganeura_onnx.export.precision import lower_precision
from meganeura_onnx.init import default_parameters
from meganeura_onnx.runtime.inference import build_inference_session
from meganeura_onnx.runtime.training import build_session

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models"))
import tiny_llama  # noqa: E402

HALF = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}
LLAMA = {"vocab": 32, "hidden": 32, "heads": 4, "kv_heads": 2, "intermediate": 64, "layers": 1}


def _two_matmuls_and_softmax() -> Graph:
    g = Graph()
    x = g.input("x", [4, 8])
    a = g.matmul(x, g.parameter("w1", [8, 8]))
    b = g.matmul(x, g.parameter("w2", [8, 8]))
    g.set_outputs({"y": g.softmax(g.add(a, b))})
    return g


def _types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    vis = list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)
    return {v.name: v.type.tensor_type.elem_type for v in vis}


def test_the_pass_casts_a_shared_input_once_runs_matmul_in_half_and_keeps_softmax_and_outputs_float32():
    model, _ = to_model(_two_matmuls_and_softmax(), params_as_inputs=True)
    lowered, report = lower_precision(model, "bf16", device="cuda")
    types = _types(lowered)
    casts_of_x = [n for n in lowered.graph.node if n.op_type == "Cast" and n.input[0] == "x"]
    assert len(casts_of_x) == 1  # one cast of x, read by both MatMuls
    for n in lowered.graph.node:
        if n.op_type == "MatMul":
            assert all(types[i] == TensorProto.BFLOAT16 for i in n.input), n
            assert types[n.output[0]] == TensorProto.BFLOAT16
        if n.op_type in ("Softmax", "Add"):
            assert all(types[i] == TensorProto.FLOAT for i in n.input), n
    assert types["y"] == TensorProto.FLOAT
    assert report.by_precision()["bfloat16"] == {"MatMul": 2}
    assert "Softmax" in report.by_precision()["float32"]


def test_the_pass_on_cpu_emulates_matmul_and_declares_half_inputs_and_outputs():
    model, _ = to_model(_two_matmuls_and_softmax(), params_as_inputs=True)
    lowered, report = lower_precision(model, "fp16", device="cpu", half_inputs=["w1"])
    types = _types(lowered)
    assert types["w1"] == TensorProto.FLOAT16 and types["w2"] == TensorProto.FLOAT
    assert all(types[i] == TensorProto.FLOAT for n in lowered.graph.node if n.op_type == "MatMul" for i in n.input)
    assert report.by_precision()["float16 (emulated)"] == {"MatMul": 2}
    with pytest.raises(ValueError, match="half_inputs \\['nope'\\] are not inputs"):
        lower_precision(model, "fp16", half_inputs=["nope"])
    with pytest.raises(ValueError, match="precision must be one of"):
        lower_precision(model, "fp8")


def test_outputs_as_made_keeps_a_half_made_output_half_with_no_cast_and_float32_ones_float32():
    g = Graph()
    x = g.input("x", [4, 8])
    y = g.matmul(x, g.parameter("w", [8, 8]))
    g.set_outputs({"y": y, "z": g.softmax(y)})
    model, _ = to_model(g, params_as_inputs=True)
    plain, plain_report = lower_precision(model, "fp16", device="cuda")
    assert _types(plain)["y"] == TensorProto.FLOAT and plain_report.half_outputs == []
    assert [n.input[0] for n in plain.graph.node if n.op_type == "Cast" and n.output[0] == "y"] == ["y.float16"]
    kept, report = lower_precision(model, "fp16", device="cuda", outputs_as_made=True)
    types = _types(kept)
    assert types["y"] == TensorProto.FLOAT16 and types["z"] == TensorProto.FLOAT
    assert report.half_outputs == ["y"]
    assert not [n for n in kept.graph.node if n.op_type == "Cast" and n.output[0] == "y"]  # the MatMul writes y itself


def test_fp16_sessions_keep_half_made_logits_half_and_read_them_as_float32_bf16_sessions_cast_them():
    from meganeura_onnx.cli.model_file import load_module

    llama = load_module(ROOT / "models" / "llama.py")
    g = llama.build_graph(llama.PRESETS["tiny"], "logits", 8)
    params = default_parameters(g, 0)
    ids = np.arange(8, dtype=np.uint32)
    out = {}
    for precision in ("fp16", "bf16"):
        s = build_inference_session(g, parameters=params, precision=precision)
        s.set_input_u32("input_ids", ids)
        s.step()
        out[precision] = s.read_output_by_index(0)
        logits_type = s.onnx_model().graph.output[0].type.tensor_type.elem_type
        assert logits_type == (TensorProto.FLOAT16 if precision == "fp16" else TensorProto.FLOAT)
    assert out["fp16"].dtype == np.float32
    np.testing.assert_array_equal(out["fp16"], out["fp16"].astype(np.float16).astype(np.float32))  # half values, widened
    assert np.abs(out["fp16"] - out["bf16"]).max() < 0.05 * np.abs(out["bf16"]).max()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_an_emulated_half_matmul_equals_numpy_on_half_rounded_operands_with_float32_accumulation(precision):
    g = Graph()
    x = g.input("x", [16, 64])
    g.set_outputs({"y": g.matmul(x, g.parameter("w", [64, 32]))})
    rng = np.random.default_rng(0)
    xv, wv = rng.normal(size=(16, 64)).astype(np.float32), rng.normal(size=(64, 32)).astype(np.float32)
    s = build_inference_session(g, parameters={"w": wv}, precision=precision)
    s.set_input("x", xv)
    s.step()
    got = s.read_output("y")
    half = HALF[precision]
    want = (xv.astype(half).astype(np.float32) @ wv.astype(half).astype(np.float32)).astype(half).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=float(ml_dtypes.finfo(half).eps), atol=1e-6)
    assert not np.allclose(got, xv @ wv, rtol=1e-6, atol=0)  # it did round
    assert s.plan().precision_of("MatMul") == {f"{np.dtype(half).name} (emulated)"}
    assert {b.name: b.storage for b in s.buffers()}["w"] == np.dtype(half).name  # the weight is stored in half


def _llama_setup(seed: int = 0):
    g = tiny_llama.build(**LLAMA, seq=8)
    params = default_parameters(g, seed)
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, LLAMA["vocab"], 9) for _ in range(2)]
    batches = [(ids[:-1].astype(np.uint32), ids[1:].astype(np.uint32)) for ids in seqs * 10]
    return g, params, batches


def test_twenty_bf16_steps_of_a_llama_block_follow_pytorch_cpu_autocast_bf16():
    g, params, batches = _llama_setup()
    s = build_session(g, optimizer="adam", parameters=params, precision="bf16")
    s.set_adam(1e-3)
    w, loss_fn = tiny_llama.torch_model(params, **LLAMA)
    opt = torch.optim.Adam(w.values(), lr=1e-3)
    ours, theirs = [], []
    for ids, labels in batches:
        s.set_input_u32("input_ids", ids)
        s.set_input_u32("labels", labels)
        s.step()
        ours.append(s.read_loss())
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(torch.tensor(ids.astype(np.int64))[None], torch.tensor(labels.astype(np.int64)))
        loss.backward()
        opt.step()
        theirs.append(loss.item())
    np.testing.assert_allclose(ours, theirs, rtol=0.02)
    assert theirs[-1] < theirs[0]
    assert all(s.read_param(n).dtype == np.float32 for n in params)  # fp32 master weights


def test_fp16_overflowed_steps_are_skipped_counted_and_never_applied_and_the_scale_adapts():
    g, params, batches = _llama_setup()
    s = build_session(g, optimizer="adam", parameters=params, precision="fp16", loss_scale=2.0**40, loss_scale_growth_interval=2)
    s.set_adam(1e-3)
    before = {n: s.read_param(n) for n in params}
    ids, labels = batches[0]
    s.set_input_u32("input_ids", ids)
    s.set_input_u32("labels", labels)
    s.step()  # the loss times 2**40 overflows float16 in the backward MatMuls
    assert s.skipped_steps == 1 and s.optimizer_step == 0 and s.loss_scale == 2.0**39
    for n in params:
        np.testing.assert_array_equal(s.read_param(n), before[n], err_msg=n)
    steps = 1
    while s.skipped_steps == steps and steps < 60:  # halves until the gradients fit
        s.step()
        steps += 1
    assert s.optimizer_step == 1 and s.skipped_steps == steps - 1
    assert any(not np.array_equal(s.read_param(n), before[n]) for n in params)
    scale = s.loss_scale
    s.step()  # second good step in a row: the scale doubles
    assert s.loss_scale == 2 * scale and s.optimizer_step == 2


def test_fp16_training_with_a_normal_scale_tracks_fp32_training():
    g, params, batches = _llama_setup()
    losses = {}
    for precision in ("fp32", "fp16"):
        s = build_session(g, optimizer="adam", parameters=params, precision=precision)
        s.set_adam(1e-3)
        losses[precision] = []
        for ids, labels in batches[:6]:
            s.set_input_u32("input_ids", ids)
            s.set_input_u32("labels", labels)
            s.step()
            losses[precision].append(s.read_loss())
        if precision == "fp16":
            assert s.skipped_steps == 0 and s.optimizer_step == 6
    np.testing.assert_allclose(losses["fp16"], losses["fp32"], rtol=5e-3)


def test_checkpoints_are_float32_and_load_into_sessions_of_any_precision(tmp_path):
    g, params, batches = _llama_setup()
    s = build_session(g, optimizer="adam", parameters=params, precision="bf16")
    s.set_adam(1e-3)
    for ids, labels in batches[:2]:
        s.set_input_u32("input_ids", ids)
        s.set_input_u32("labels", labels)
        s.step()
    path = tmp_path / "bf16.safetensors"
    s.save_checkpoint(path)
    for precision in ("fp32", "fp16"):
        other = build_session(g, optimizer="adam", precision=precision, seed=1)
        other.load_checkpoint(path)
        assert other.optimizer_step == 2
        for n in params:
            np.testing.assert_array_equal(other.read_param(n), s.read_param(n), err_msg=n)
        other.save_checkpoint(tmp_path / f"{precision}.safetensors")
        back = build_session(g, optimizer="adam", precision="bf16", seed=2)
        back.load_checkpoint(tmp_path / f"{precision}.safetensors")
        for n in params:
            np.testing.assert_array_equal(back.read_param(n), s.read_param(n), err_msg=n)


def test_tf32_and_unknown_precisions_are_refused_naming_the_argument():
    g, _, _ = _llama_setup()
    with pytest.raises(ValueError, match="precision='tf32' needs device='cuda'"):
        build_session(g, precision="tf32")
    with pytest.raises(ValueError, match="precision must be one of \\['fp32', 'tf32', 'bf16', 'fp16'\\], got 'fp8'"):
        build_inference_session(g, precision="fp8")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_inference_stores_weights_in_half_returns_float32_logits_near_fp32(precision):
    from meganeura_onnx.cli.model_file import load_module

    llama = load_module(ROOT / "models" / "llama.py")
    cfg = llama.PRESETS["tiny"]
    g = llama.build_graph(cfg, "logits", 16)
    params = default_parameters(g, 0)
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, 16).astype(np.uint32)
    out, sessions = {}, {}
    for p in ("fp32", precision):
        s = sessions[p] = build_inference_session(g, parameters=params, precision=p)
        s.set_input_u32("input_ids", ids)
        s.step()
        out[p] = s.read_output_by_index(0)
    assert out[precision].dtype == np.float32
    err = np.abs(out[precision] - out["fp32"]).max() / np.abs(out["fp32"]).max()
    assert 1e-6 < err < 0.05, err
    full, half = sessions["fp32"].memory_summary(), sessions[precision].memory_summary()
    assert half.total_buffer_bytes < 0.6 * full.total_buffer_bytes
    name = "model.layers.0.self_attn.q_proj.weight"
    value = np.random.default_rng(1).normal(size=sessions[precision].parameter_shape(name)).astype(np.float32)
    sessions[precision].set_parameter(name, value)
    np.testing.assert_array_equal(sessions[precision].read_param(name), value.astype(HALF[precision]).astype(np.float32))


def test_the_cast_converter_round_trips_bfloat16_buffers_bit_exactly():
    from meganeura_onnx.runtime.half import HalfBuffers

    conv = HalfBuffers("bfloat16", "cpu", ["CPUExecutionProvider"])
    v = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    buf = conv.new(v)
    assert buf.data_type() == "tensor(bfloat16)"
    np.testing.assert_array_equal(conv.read(buf), v.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert ort.get_device()  # (the converter ran through ORT itself)


def test_generate_cli_runs_in_bf16_and_refuses_tf32_on_cpu():
    r = CliRunner().invoke(
        main, ["generate", "llama", "--preset", "tiny", "--prompt-ids", "1,2,3", "--max-new-tokens", "4", "--precision", "bf16", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert '"generated_ids"' in r.output
    r = CliRunner().invoke(main, ["generate", "llama", "--preset", "tiny", "--prompt-ids", "1,2", "--precision", "tf32"])
    assert r.exit_code == 2 and "tf32 is a CUDA tensor-core mode; it needs --device cuda" in r.output and "Traceback" not in r.output


def test_train_cli_accepts_bf16_and_fp16_and_refuses_tf32_on_cpu(tmp_path):
    model = tmp_path / "small.py"
    model.write_text(
        "import numpy as np\n"
        "from meganeura_onnx import Graph\n"
        "def build(batch=8):\n"
        "    g = Graph(); x = g.input('x', [batch, 6]); w = g.parameter('w', [6, 2])\n"
        "    g.set_outputs([g.mse_loss(g.matmul(x, w), g.input('y', [batch, 2]))]); return g\n"
        "def data():\n"
        "    r = np.random.default_rng(0); x = r.normal(size=(80, 6)); y = x[:, :2] * 2\n"
        "    return {'x_train': x[:64], 'y_train': y[:64], 'x_test': x[64:], 'y_test': y[64:]}\n"
    )
    for precision in ("bf16", "fp16"):
        r = CliRunner().invoke(main, ["train", str(model), "--epochs", "3", "--precision", precision, "--lr", "0.05"])
        assert r.exit_code == 0, r.output
        assert "epoch 3: train loss" in r.output
        assert ("steps skipped on overflow" in r.output) == (precision == "fp16")
    r = CliRunner().invoke(main, ["train", str(model), "--precision", "tf32"])
    assert r.exit_code == 2 and "tf32 is a CUDA tensor-core mode; it needs --device cuda, got --device cpu" in r.output


def test_kv_caches_are_stored_in_half_and_written_in_place_only_where_the_cache_kernels_take_half(monkeypatch):
    from meganeura_onnx.cli.model_file import load_module

    from meganeura_onnx.export.precision import half_storage_inputs
    from meganeura_onnx.ops import OPS

    llama = load_module(ROOT / "models" / "llama.py")
    model, spec = to_model(llama.build_graph(llama.PRESETS["tiny"], "decode", 1, 16), params_as_inputs=True, with_state=True)
    caches = sorted(spec.state)
    at = OPS["cache_write"].custom.input_names().index("cache")
    declared = {name: OPS[name].half_types for name in ("cache_write", "cached_attention")}
    assert all("float16" in t for t in declared.values())  # the table declares the half cache kernels
    # Cache kernels that took float32 only: caches stay float32, their ops too, nothing cast in front.
    for name in declared:
        monkeypatch.setattr(OPS[name], "half_types", frozenset())
    assert not half_storage_inputs(model, "fp16", "cuda", caches)
    lowered, _ = lower_precision(model, "fp16", device="cuda")
    writes = [n for n in lowered.graph.node if n.op_type == "CacheWrite"]
    assert writes and all(n.input[at] in caches for n in writes)
    # Kernels that take float16 (as the op table declares them): caches stored in half, read and
    # written by the half kernels directly, their next values half, the logits float32.
    for name, types in declared.items():
        monkeypatch.setattr(OPS[name], "half_types", types)
    stored = half_storage_inputs(model, "fp16", "cuda", caches)
    assert stored == set(caches)
    assert not half_storage_inputs(model, "fp16", "cuda", caches, custom_kernels=False)  # function bodies: float32
    lowered, report = lower_precision(model, "fp16", device="cuda", half_inputs=stored, half_outputs=[spec.state[c] for c in stored])
    types = _types(lowered)
    writes = [n for n in lowered.graph.node if n.op_type == "CacheWrite"]
    assert all(n.input[at] in caches for n in writes)  # in place: the stored buffer itself, no cast
    assert all(types[spec.state[c]] == TensorProto.FLOAT16 for c in caches)
    assert types[lowered.graph.output[0].name] == TensorProto.FLOAT
    assert set(report.by_precision()["float16"]) >= {"com.meganeura.CacheWrite", "com.meganeura.CachedAttention", "Gemm"}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_greedy_decode_with_half_kv_caches_follows_fp32_except_at_near_ties(precision):
    from meganeura_onnx.cli.model_file import load_module

    from meganeura_onnx.generation import generate
    from meganeura_onnx.runtime.custom_ops import custom_op_library

    llama = load_module(ROOT / "models" / "llama.py")
    cfg = llama.PRESETS["tiny"]
    prompt = [5, 17, 99, 3, 64, 12]
    runner = llama.LlamaRunner(cfg, None, max_seq=64, prefill_chunk=4, precision=precision)
    if custom_op_library("cpu") is not None:  # the cache kernels take half: the V caches are stored in half
        storage = {b.name: b.storage for b in runner.decoder.buffers() if b.kind == "state"}
        assert np.dtype(HALF[precision]).name in storage.values(), storage
    ours = list(generate(runner, prompt, 32))
    reference = list(generate(llama.LlamaRunner(cfg, None, max_seq=64, prefill_chunk=4), prompt, 32))
    params = default_parameters(llama.build_graph(cfg, "logits", 8), 0)
    for k, (a, b) in enumerate(zip(ours, reference, strict=True)):
        if a != b:  # allowed only where fp32's top two logits are within half rounding; then the paths part
            logits = llama.logits(cfg, params, prompt + reference[:k])[-1]
            top2 = np.sort(logits)[-2:]
            assert top2[1] - top2[0] <= 2e-2 * abs(top2[1]) + 1e-3, (k, ours, reference, top2)
            break
