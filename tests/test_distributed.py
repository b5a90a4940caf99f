"""Data-parallel training (gradient model + all-reduce + update model) equals one process on the
same global batch.

The reference is the native engine's one-model train step (forward + backward + Adam fused in one
ONNX model) on the whole global batch; the data-parallel side runs the split models with each rank
on its shard. The gloo case launches real processes through ``torchrun`` (CPU, as in CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dist_worker
import numpy as np
import onnx
import pytest
from cli_launch import meganeura

from meganeura_onnx.init import default_parameters
from meganeura_onnx.io import load_checkpoint
from meganeura_onnx.runtime.distributed import DataParallelSession, DistContext, check_on_cuda, flat_layout, update_model
from meganeura_onnx.runtime.training import build_session, compile_program
from meganeura_onnx.transforms.optimizer import OptimizerSpec

ROOT = Path(__file__).resolve().parent.parent
STEPS, GLOBAL_BATCH = 10, 8


def _case(seed: int = 0, clip: float = 0.0) -> dict:
    rng = np.random.default_rng(seed)
    params = default_parameters(dist_worker.build(GLOBAL_BATCH), seed)
    params["fc1.bias"] = rng.normal(0, 0.1, dist_worker.HIDDEN).astype(np.float32)
    return {
        "params": params,
        "x": rng.normal(size=(STEPS, GLOBAL_BATCH, dist_worker.FEATURES)).astype(np.float32),
        "labels": np.eye(dist_worker.CLASSES, dtype=np.float32)[rng.integers(0, dist_worker.CLASSES, (STEPS, GLOBAL_BATCH))],
        "lr": 1e-2,
        "clip": clip,
    }


def _one_process(case: dict, device: str = "cpu") -> tuple[dict[str, np.ndarray], list[float]]:
    """The fused one-model Adam step on the whole global batch: the reference."""
    g = dist_worker.build(GLOBAL_BATCH)
    s = build_session(g, device, optimizer="adam", parameters=case["params"], clip=case["clip"] > 0)
    s.set_adam(case["lr"])
    if case["clip"] > 0:
        s.set_grad_clip(case["clip"])
    return _train(s, case)


def _train(s, case: dict) -> tuple[dict[str, np.ndarray], list[float]]:
    """STEPS steps of session ``s`` on the case's batches: (final parameters, loss of each step)."""
    losses = []
    for k in range(STEPS):
        s.set_input("x", case["x"][k])
        s.set_input("labels", case["labels"][k])
        s.step()
        losses.append(s.read_loss())
    return {n: s.read_param(n) for n in s.parameter_names()}, losses


def _assert_close(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray], rel: float) -> None:
    assert set(ours) == set(ref)
    for n, r in ref.items():
        err = float(np.abs(ours[n] - r).max() / np.abs(r).max())
        assert err <= rel, f"{n}: max|diff| / max|ref| = {err:.2e} > {rel}"


def test_flat_gradient_layout_is_parameter_order_then_the_loss():
    prog = compile_program(dist_worker.build(4), None)
    slots = flat_layout(prog.trainable, prog.params)
    assert [s.name for s in slots] == prog.trainable
    assert [s.offset for s in slots] == list(np.cumsum([0] + [s.size for s in slots[:-1]]))
    assert [s.size for s in slots] == [int(np.prod(prog.params[s.name])) for s in slots]
    model, moments, hyper = update_model(slots, OptimizerSpec("adam"))
    # No Concat/Split of the flat buffer: the gradients are bound at their offsets.
    assert {f"grad.{s.name}" for s in slots} <= {i.name for i in model.graph.input}
    assert not any(n.op_type in ("Concat", "Split") for n in model.graph.node)
    assert sorted(moments) == sorted(f"adam_{k}.{s.name}" for s in slots for k in "mv") and "opt.step" in hyper
    assert {o.name for o in model.graph.output} == {f"{n}.next" for n in [s.name for s in slots] + moments}


@pytest.mark.parametrize("clip,fused", [(0.0, None), (0.5, None), (0.5, False)])
def test_split_gradient_and_update_models_equal_the_one_model_step_in_one_process(clip, fused):
    # fused=None: Adam as one AdamUpdate node on CPU (the default, as the reference); False: decomposed.
    case = _case(clip=clip)
    ref, ref_losses = _one_process(case)
    ctx = DistContext(0, 1, 0, "gloo")
    s = DataParallelSession(
        dist_worker.build(GLOBAL_BATCH), optimizer="adam", parameters=case["params"], context=ctx, fused_optimizer=fused
    )
    s.set_adam(case["lr"])
    if clip:
        s.set_grad_clip(clip)
    params, losses = _train(s, case)
    _assert_close(params, ref, 1e-6)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    assert any(n.op_type == "AdamUpdate" for n in s.onnx_models()[1].graph.node) == (fused is None)


def test_two_accumulated_micro_batches_equal_one_step_on_their_union():
    case = _case(clip=0.5)
    ref, ref_losses = _one_process(case)
    half = GLOBAL_BATCH // 2
    ctx = DistContext(0, 1, 0, "gloo")
    s = DataParallelSession(dist_worker.build(half), optimizer="adam", parameters=case["params"], context=ctx, clip=True)
    s.set_adam(case["lr"])
    s.set_grad_clip(case["clip"])
    s.set_grad_accumulation(2)
    losses = []
    for k in range(STEPS):
        for rows in (slice(0, half), slice(half, None)):
            s.set_input("x", case["x"][k, rows])
            s.set_input("labels", case["labels"][k, rows])
            s.step()
        losses.append(s.read_loss())
    assert s.optimizer_step == STEPS
    _assert_close({n: s.read_param(n) for n in s.parameter_names()}, ref, 1e-5)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)


def test_a_session_that_runs_on_the_cpu_is_refused_where_cuda_was_asked():
    import onnxruntime as ort

    s = DataParallelSession(dist_worker.build(2), context=DistContext(0, 1, 0, "gloo"))
    counts = s.placement()
    assert set(counts["gradient"]) == set(counts["update"]) == {"CPUExecutionProvider"} and counts["update"]["CPUExecutionProvider"] > 0
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = ort.InferenceSession(s.onnx_models()[1].SerializeToString(), opts, providers=["CPUExecutionProvider"])
    with pytest.raises(RuntimeError, match="should run on CUDAExecutionProvider.*CPUExecutionProvider"):
        check_on_cuda(sess, "update")


@pytest.mark.parametrize("named", [False, True])
def test_read_grad_and_outputs_equal_the_gradients_only_session(named):
    case = _case()
    g = dist_worker.build(GLOBAL_BATCH, named=named)
    ref = build_session(g, parameters=case["params"])
    s = DataParallelSession(g, optimizer="sgd", parameters=case["params"], context=DistContext(0, 1, 0, "gloo"))
    for sess in (ref, s):
        sess.set_input("x", case["x"][0])
        sess.set_input("labels", case["labels"][0])
        sess.step()
    _assert_close({n: s.read_grad(n) for n in case["params"]}, {n: ref.read_grad(n) for n in case["params"]}, 1e-6)
    assert s.num_outputs() == 2  # the loss and the logits (the reference also lists its gradients)
    for k in range(2):
        np.testing.assert_allclose(s.read_output_by_index(k), ref.read_output_by_index(k), rtol=1e-6)


def _torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
        "NCCL_NVLS_ENABLE": "0",
    }
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, f"torchrun exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def test_two_gloo_processes_give_the_parameters_of_one_process_on_the_same_global_batch(tmp_path):
    case = _case(seed=1)
    # 0.0005 MB = 131 floats: the 164-float gradient buffer goes in two all-reduce buckets
    # (the CLI test below covers the default single call).
    extra = {k: case[k] for k in ("x", "labels", "lr", "clip")} | {"bucket_mb": 0.0005}
    np.savez(tmp_path / "case.npz", **{f"param.{n}": v for n, v in case["params"].items()}, **extra)
    _torchrun(2, str(ROOT / "tests" / "dist_worker.py"), str(tmp_path / "case.npz"), str(tmp_path))
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in (0, 1)]
    params = [{k[6:]: f[k] for k in f.files if k.startswith("param.")} for f in ranks]
    for n in params[0]:  # every rank applied the same update to the same averaged gradient
        np.testing.assert_array_equal(params[0][n], params[1][n], err_msg=n)
    ref, ref_losses = _one_process(case)
    _assert_close(params[0], ref, 1e-5)
    np.testing.assert_allclose(ranks[0]["losses"], ref_losses, rtol=1e-5)
    ckpt = load_checkpoint(tmp_path / "ckpt.safetensors")  # written by rank 0
    assert ckpt.step == STEPS and ckpt.metadata["world_size"] == "2" and set(ckpt.adam_m) == set(ref)
    _assert_close(ckpt.params, params[0], 0.0)


def test_train_cli_with_two_processes_and_a_resume_matches_one_process(tmp_path):
    # Global batch 8 = 2 ranks x 4 rows, updates over 2 accumulated micro-batches: 4 updates an epoch.
    model = str(ROOT / "tests" / "dist_worker.py")
    common = ["--batch-size", "8", "--lr", "0.01", "--grad-accum", "2"]
    meganeura("train", model, "--epochs", "2", *common, "--checkpoint", str(tmp_path / "one.safetensors"))
    two = ["--nproc-per-node", "2", "--checkpoint", str(tmp_path / "two.safetensors")]
    meganeura("train", model, "--epochs", "1", *common, *two)  # epoch 1, then every rank resumes from rank 0's file
    r = meganeura("train", model, "--epochs", "2", *common, *two, "--resume")
    assert r.stdout.count("epoch 2:") == 1 and "resumed from" in r.stdout, r.stdout  # only rank 0 reports
    one, two = load_checkpoint(tmp_path / "one.safetensors"), load_checkpoint(tmp_path / "two.safetensors")
    assert two.step == one.step == 2 * (64 // 8 // 2) and two.metadata["world_size"] == "2"
    _assert_close(two.params, one.params, 1e-5)


def test_train_cli_refuses_a_global_batch_that_does_not_split_before_starting_processes(tmp_path):
    r = meganeura("train", str(ROOT / "tests" / "dist_worker.py"), "--batch-size", "7", "--nproc-per-node", "2", check=False)
    assert r.returncode != 0 and "global batch 7 must be divisible by the 2 processes" in r.stderr, r.stderr
    assert "torch.distributed.run" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def _gpus() -> int:
    import onnxruntime as ort
    import torch

    return torch.cuda.device_count() if "CUDAExecutionProvider" in ort.get_available_providers() else 0


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 1, reason="needs onnxruntime-gpu and a CUDA GPU")
def test_split_models_on_cuda_equal_the_one_model_cuda_step():
    case = _case(clip=0.5)
    ref, ref_losses = _one_process(case, "cuda")
    s = DataParallelSession(dist_worker.build(GLOBAL_BATCH), device="cuda", parameters=case["params"], context=DistContext(0, 1, 0, "nccl"))
    s.set_adam(case["lr"])
    s.set_grad_clip(case["clip"])
    params, losses = _train(s, case)
    _assert_close(params, ref, 1e-5)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    # The update model is elementwise math only: every node on the GPU (no host round trips).
    assert set(s.placement()["update"]) == {"CUDAExecutionProvider"}


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 2, reason="needs onnxruntime-gpu and 2 CUDA GPUs")
def test_two_gpus_over_nccl_give_the_parameters_of_one_gpu(tmp_path):
    case = _case(seed=2)
    extra = {k: case[k] for k in ("x", "labels", "lr", "clip")} | {"device": "cuda"}
    np.savez(tmp_path / "case.npz", **{f"param.{n}": v for n, v in case["params"].items()}, **extra)
    _torchrun(2, str(ROOT / "tests" / "dist_worker.py"), str(tmp_path / "case.npz"), str(tmp_path))
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in (0, 1)]
    params = [{k[6:]: f[k] for k in f.files if k.startswith("param.")} for f in ranks]
    for n in params[0]:
        np.testing.assert_array_equal(params[0][n], params[1][n], err_msg=n)
    ref, ref_losses = _one_process(case, "cuda")
    _assert_close(params[0], ref, 1e-5)
    np.testing.assert_allclose(ranks[0]["losses"], ref_losses, rtol=1e-5)


def test_token_ids_are_checked_on_upload_so_the_kernels_skip_their_read_back():
    """As Session: the token ids (embedding, and its ScatterAdd gradient) are validated when
    uploaded, so no kernel of the gradient model keeps ``check_positions=1``."""
    sys.path.insert(0, str(ROOT / "models"))
    import tiny_llama

    g = tiny_llama.build(vocab=32, hidden=32, heads=4, kv_heads=2, intermediate=64, layers=1, seq=8, batch=1)
    s = DataParallelSession(g, optimizer="sgd", context=DistContext(0, 1, 0, "gloo"))
    with pytest.raises(ValueError, match=r"set_input_u32: 'input_ids' = 32 is out of range: it must be <= 31"):
        s.set_input_u32("input_ids", np.full(8, 32))
    grad_model = s.onnx_models()[0]
    flags = {
        n.op_type: onnx.helper.get_attribute_value(a) for n in grad_model.graph.node for a in n.attribute if a.name == "check_positions"
    }
    assert "ScatterAdd" in flags and set(flags.values()) == {0}, flags
    s.set_input_u32("input_ids", np.arange(8) % 32)
    s.set_input_u32("labels", np.arange(1, 9) % 32)
    s.set_learning_rate(0.1)
    s.step()
    assert np.isfinite(s.read_loss())
