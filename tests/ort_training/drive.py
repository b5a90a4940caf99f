"""Train a model file for a few AdamW steps on one backend and report the losses (a test helper).

The native engine runs on the main venv's onnxruntime (1.31) and onnxruntime-training pins 1.19.2, so the two never
share an interpreter. The parity tests run in the onnxruntime-training environment, call
:func:`run` in-process for the "ort-training" backend and run this file as a script with the main
environment's interpreter (pytest option ``--native-python``) for the native one. Both sides read
the same ``.npz`` (initial parameters ``param.<name>`` and one batch per step ``step<i>.<input>``),
so they start from the same weights and see the same data.

    python drive.py JOB.json   # prints {"losses": [...], "step": n} as JSON on stdout
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def build_model(path: str, sets: dict[str, Any]) -> Any:
    """``build(**sets)`` of a model file (the ``meganeura`` CLI's model-file contract)."""
    spec = importlib.util.spec_from_file_location(f"drive_model_{Path(path).stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(**sets)


def make_session(backend: str, graph: Any, params: dict[str, np.ndarray]) -> Any:
    """A training session with AdamW compiled in, on ``backend`` ("native" or "ort-training")."""
    from meganeura_onnx.runtime.training import build_session

    return build_session(graph, optimizer="adamw", parameters=params, backend=backend)


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Run ``job``: ``backend``, ``model`` (file), ``sets``, ``data`` (npz), ``adamw`` (lr, beta1,
    beta2, epsilon, weight_decay), ``steps`` (run steps ``start``..``steps-1``), optional ``load``
    (checkpoint to restore first), ``save`` + ``save_at`` (checkpoint after that many steps)."""
    graph = build_model(job["model"], job.get("sets", {}))
    data = np.load(job["data"])
    params = {k[len("param.") :]: data[k] for k in data.files if k.startswith("param.")}
    sess = make_session(job["backend"], graph, params)
    sess.set_adamw(**job["adamw"])
    if job.get("load"):
        sess.load_checkpoint(job["load"])
    losses = []
    for i in range(job.get("start", 0), job["steps"]):
        prefix = f"step{i}."
        for key in data.files:
            if key.startswith(prefix):
                value = data[key]
                name = key[len(prefix) :]
                (sess.set_input_u32 if value.dtype == np.uint32 else sess.set_input)(name, value)
        sess.step()
        losses.append(sess.read_loss())
        if job.get("save") and i + 1 == job.get("save_at"):
            sess.save_checkpoint(job["save"])
    step = sess.optimizer_step
    return {"losses": losses, "step": int(step)}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(Path(sys.argv[1]).read_text()))))
