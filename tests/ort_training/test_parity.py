"""Native engine vs onnxruntime-training: 20 AdamW steps from the same weights on the same data give
the same losses (rel 1e-4), and a checkpoint written by either backend resumes in the other.

The native engine runs in the main venv's interpreter (``--native-python``, passed by
``make test-ort-training``) through ``drive.py``; the ort-training side runs in this process. Both
read one ``.npz`` with the initial parameters and the batches.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime.training", reason="needs the onnxruntime-training venv (make ort-training)")

from meganeura_onnx.init import default_parameters  # noqa: E402

from . import drive  # noqa: E402
from .conftest import LLAMA_BLOCK, MNIST_MLP  # noqa: E402
from .test_artifacts import llama_feeds, mlp_feeds  # noqa: E402

STEPS, SAVE_AT = 20, 10
CASES = {
    "mnist_mlp": (MNIST_MLP, mlp_feeds, {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.01}),
    "llama_block": (LLAMA_BLOCK, llama_feeds, {"lr": 1e-2, "beta1": 0.9, "beta2": 0.98, "epsilon": 1e-8, "weight_decay": 0.1}),
}


def run_native(python: str, job: dict, tmp: Path) -> dict:
    path = tmp / f"job-native-{len(list(tmp.glob('job-*')))}.json"
    path.write_text(json.dumps({**job, "backend": "native"}))
    proc = subprocess.run([python, str(Path(drive.__file__)), str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"native side failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_ort(job: dict) -> dict:
    return drive.run({**job, "backend": "ort-training"})


@pytest.fixture(params=list(CASES))
def case(request, tmp_path):
    """The job both backends run: model file, AdamW settings and an npz of initial weights + batches."""
    path, feeds_of, adamw = CASES[request.param]
    graph = drive.build_model(str(path), {})
    rng = np.random.default_rng(2024)
    arrays = {f"param.{n}": v for n, v in default_parameters(graph, seed=11).items()}
    batches = [feeds_of(rng) for _ in range(4)]  # a small pool seen repeatedly, so the loss visibly falls
    for i in range(STEPS):
        arrays.update({f"step{i}.{k}": v for k, v in batches[i % len(batches)].items()})
    np.savez(tmp_path / "data.npz", **arrays)
    return {"model": str(path), "sets": {}, "data": str(tmp_path / "data.npz"), "adamw": adamw, "steps": STEPS}


def test_twenty_adamw_steps_match_the_native_engine(case, native_python, tmp_path):
    native = run_native(native_python, case, tmp_path)
    ort = run_ort(case)
    assert native["step"] == ort["step"] == STEPS
    np.testing.assert_allclose(ort["losses"], native["losses"], rtol=1e-4)
    assert np.mean(ort["losses"][-4:]) < np.mean(ort["losses"][:4])  # it trained (the parity is not about a frozen model)


def test_checkpoints_move_between_backends(case, native_python, tmp_path):
    native_ck, ort_ck = tmp_path / "native.safetensors", tmp_path / "ort.safetensors"
    native = run_native(native_python, {**case, "save": str(native_ck), "save_at": SAVE_AT}, tmp_path)
    ort = run_ort({**case, "save": str(ort_ck), "save_at": SAVE_AT})

    # native checkpoint -> ort-training continues where the native run was
    ort_resumed = run_ort({**case, "load": str(native_ck), "start": SAVE_AT})
    assert ort_resumed["step"] == STEPS
    np.testing.assert_allclose(ort_resumed["losses"], native["losses"][SAVE_AT:], rtol=1e-4)

    # ort-training checkpoint -> the native engine continues where the ort-training run was
    native_resumed = run_native(native_python, {**case, "load": str(ort_ck), "start": SAVE_AT}, tmp_path)
    assert native_resumed["step"] == STEPS
    np.testing.assert_allclose(native_resumed["losses"], ort["losses"][SAVE_AT:], rtol=1e-4)
