"""The "ort-training" Session backend: training through onnxruntime-training's artifacts.

:class:`OrtTrainingSession` generates the artifacts for a loss Graph
(:func:`meganeura_onnx.training_artifacts.generate_training_artifacts`) and drives them with
``onnxruntime.training.api`` (``CheckpointState``, ``Module``, ``Optimizer``) behind the Session
methods of the native engine: ``set_input``, ``set_input_u32``, ``step``, ``read_loss``,
``set_learning_rate``, ``set_adam``/``set_adamw``, ``read_param``, ``set_parameter``,
``save_checkpoint``/``load_checkpoint``. Checkpoints use the project's safetensors layout
(parameters by name, ``adam_m.<name>``, ``adam_v.<name>``, the step in the metadata), so a run moves
between this backend and the native one.

Differences from the native engine, all due to what ORT's artifacts fix at generation time:
- The optimizer kind (``"adamw"`` or ``"sgd"``) is chosen when the session is built.
- AdamW's betas, eps and weight decay are attributes of ``optimizer_model.onnx``; changing them
  (``set_adam``/``set_adamw``) regenerates that one small model and rebuilds the ``Optimizer`` over
  the same state, so the moments and step are kept.
- Inputs are host numpy arrays handed to ``Module.__call__`` each step (ORT's training API has no
  IOBinding); parameters and optimizer state stay inside ORT's ``CheckpointState``.

Only importable work happens at module level; onnxruntime-training is imported when a session is built.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..ir import DType, GraphCore, TensorType
from ..training_artifacts import AdamWConfig, generate_training_artifacts, import_ort_training, patch_adamw
from .ort_checkpoint import OrtCheckpoint, read_ort_checkpoint, write_ort_checkpoint
from .values import NUMPY, host_array


class OrtTrainingSession:
    """A training session over onnxruntime-training artifacts. Build it with
    :func:`build_ort_training_session` (or ``build_session(graph, backend="ort-training")``)."""

    def __init__(
        self,
        graph: GraphCore,
        *,
        optimizer: str = "adamw",
        device: str = "cpu",
        parameters: Mapping[str, np.ndarray] | None = None,
        seed: int = 0,
        artifacts_dir: str | os.PathLike | None = None,
    ) -> None:
        import_ort_training()
        optimizer = "adamw" if optimizer == "adam" else optimizer  # the native engine's name; set_adam sets weight_decay=0
        if device != "cpu":
            # The pinned wheel is onnxruntime-training-cpu; a CUDA build of 1.19.2 exists (CUDA 11.8/12)
            # but is not what this environment installs.
            raise ValueError(f"ort-training backend: device must be 'cpu' (onnxruntime-training-cpu 1.19.2), got {device!r}")
        self._tmp = None
        if artifacts_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="meganeura-ortt-")
            artifacts_dir = self._tmp.name
        self._graph = graph
        self.artifacts = generate_training_artifacts(graph, artifacts_dir, optimizer, parameters=parameters, seed=seed)
        self._device = device
        self._types: dict[str, TensorType] = {}
        for n in graph.nodes():
            if n.op in ("input", "input_u32", "parameter"):
                self._types[n.attrs["name"]] = n.ty
        self._inputs = {name: np.zeros(self._types[name].shape, NUMPY[self._types[name].dtype]) for name in self.artifacts.inputs}
        self._output_types = [graph.node(nid).ty for nid in graph.outputs()]
        self._outputs: list[np.ndarray] = [np.zeros(t.shape, np.float32) for t in self._output_types]
        self._lr: float | None = None  # no optimizer update until a learning rate is set (Meganeura's step())
        self._last_grads: dict[str, np.ndarray] = {}
        self._adamw = self.artifacts.adamw
        self._load_state(self.artifacts.checkpoint)

    # -- ORT objects --------------------------------------------------------------------------------
    def _load_state(self, checkpoint: str | os.PathLike) -> None:
        from onnxruntime.training.api import CheckpointState, Module, Optimizer

        a = self.artifacts
        self._state = CheckpointState.load_checkpoint(os.fspath(checkpoint))
        self._module = Module(os.fspath(a.training_model), self._state, os.fspath(a.eval_model), device=self._device)
        self._module.train()
        self._optimizer = Optimizer(os.fspath(a.optimizer_model), self._module)
        if self._lr is not None:
            self._optimizer.set_learning_rate(self._lr)
        order = self._module.input_names()
        if sorted(order) != sorted(self._inputs):
            raise RuntimeError(f"ort-training: the training model takes inputs {order}, the graph has {list(self._inputs)}")
        self._input_order = order

    # -- data in -------------------------------------------------------------------------------------
    def _check(self, name: str, kinds: tuple[str, ...], what: str) -> TensorType:
        known = {"input": list(self._inputs), "parameter": list(self.artifacts.parameters)}
        names = [n for k in kinds for n in known[k]]
        if name not in names:
            raise KeyError(f"{what}: no {'/'.join(kinds)} named {name!r}; the session has {names}")
        return self._types[name]

    def set_input(self, name: str, data: object) -> None:
        """Set the F32 input ``name`` (flat or shaped; the element count must match)."""
        ty = self._check(name, ("input",), "set_input")
        self._inputs[name] = host_array(name, data, ty, DType.F32, "set_input")

    def set_input_u32(self, name: str, data: object) -> None:
        """Set the U32 input ``name`` (token ids, positions)."""
        ty = self._check(name, ("input",), "set_input_u32")
        self._inputs[name] = host_array(name, data, ty, DType.U32, "set_input_u32")

    def set_parameter(self, name: str, data: object) -> None:
        """Overwrite a parameter's value in ORT's state (the optimizer state is left as it is)."""
        ty = self._check(name, ("parameter",), "set_parameter")
        self._state.parameters[name] = host_array(name, data, ty, DType.F32, "set_parameter")

    # -- optimizer -------------------------------------------------------------------------------------
    def set_learning_rate(self, lr: float) -> None:
        """Learning rate of the session's optimizer (SGD or AdamW, fixed when the artifacts were built);
        from now on ``step()`` applies the update."""
        self._lr = float(lr)
        self._optimizer.set_learning_rate(self._lr)

    def set_adamw(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, weight_decay: float = 0.01) -> None:
        """AdamW (``torch.optim.AdamW``'s formula, as the native engine's ``set_adamw``) with these hyper-parameters for the following steps.

        Moments and step are kept when the hyper-parameters change: only ``optimizer_model.onnx`` is
        rewritten and the ``Optimizer`` rebuilt over the same ``CheckpointState``.
        """
        if self.artifacts.optimizer != "adamw":
            raise RuntimeError(
                "set_adam/set_adamw: this session's artifacts were generated with optimizer='sgd'; build it with optimizer='adamw'"
            )
        config = AdamWConfig(float(beta1), float(beta2), float(epsilon), float(weight_decay))
        if config != self._adamw:
            import onnx
            from onnxruntime.training.api import Optimizer

            path = self.artifacts.optimizer_model
            onnx.save(patch_adamw(onnx.load(os.fspath(path)), config), os.fspath(path))
            self._adamw = self.artifacts.adamw = config
            self._optimizer = Optimizer(os.fspath(path), self._module)
        self.set_learning_rate(lr)

    def set_adam(self, lr: float, beta1: float, beta2: float, epsilon: float) -> None:
        """Adam (AdamW with no weight decay), Meganeura's ``set_adam(lr, beta1, beta2, epsilon)``."""
        self.set_adamw(lr, beta1, beta2, epsilon, 0.0)

    # -- running ------------------------------------------------------------------------------------------
    def step(self) -> None:
        """Forward + backward, then the optimizer update when a learning rate has been set."""
        outs = self._module(*(self._inputs[n] for n in self._input_order))
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        self._outputs = [np.asarray(o) for o in outs]
        if self._lr is not None:
            self._optimizer.step()
        else:
            # ORT accumulates gradients in place; keep a copy before the reset so read_grad sees this step's.
            self._last_grads = {n: np.array(self._state.parameters[n].grad, copy=True) for n in self.artifacts.parameters}
        self._module.lazy_reset_grad()

    def wait(self) -> None:
        """``step()`` is synchronous; kept so Meganeura programs port unchanged."""

    # -- data out ------------------------------------------------------------------------------------------
    def num_outputs(self) -> int:
        return len(self._output_types)

    def output_names(self) -> list[str]:
        """The graph's output names in order."""
        return self._graph.output_names()

    def read_output(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """The output called ``name`` of the last step."""
        names = self._graph.output_names()
        if name not in names:
            raise KeyError(f"read_output: no output named {name!r}; the session has {names}")
        return self.read_output_by_index(names.index(name), out)

    def read_output_by_index(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        """Output ``index`` of the last step (0 = the loss)."""
        if not isinstance(index, int) or not 0 <= index < len(self._outputs):
            raise IndexError(f"read_output_by_index: index {index!r} out of range; the session has {len(self._outputs)} outputs")
        return _copy_out(np.asarray(self._outputs[index]).reshape(self._output_types[index].shape), out, f"output {index}")

    def read_loss(self) -> float:
        """The loss of the last step (output 0)."""
        return float(np.asarray(self._outputs[0]).reshape(-1)[0])

    def read_param(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Current value of a parameter."""
        self._check(name, ("parameter",), "read_param")
        return _copy_out(np.array(self._state.parameters[name].data, copy=True), out, f"parameter {name!r}")

    get_parameter = read_param

    def read_grad(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Gradient of the loss wrt ``name`` from the last ``step()``; only without an optimizer (as
        in the native engine: with one, the gradient is consumed by the update)."""
        self._check(name, ("parameter",), "read_grad")
        if self._lr is not None:
            raise RuntimeError("read_grad: gradients are kept only while no optimizer is set (no set_learning_rate/set_adam yet)")
        return _copy_out(np.array(self._last_grads[name], copy=True), out, f"gradient of {name!r}")

    def parameter_names(self) -> list[str]:
        return list(self.artifacts.parameters)

    @property
    def optimizer_step(self) -> int:
        """Optimizer updates applied so far (Adam's t; ORT keeps it in the optimizer state)."""
        return self._ort_checkpoint().step

    # -- checkpoints -----------------------------------------------------------------------------------------
    def _ort_checkpoint(self) -> OrtCheckpoint:
        from onnxruntime.training.api import CheckpointState

        with tempfile.TemporaryDirectory(prefix="meganeura-ortt-ck-") as tmp:
            path = Path(tmp) / "checkpoint"
            CheckpointState.save_checkpoint(self._state, os.fspath(path), include_optimizer_state=True)
            return read_ort_checkpoint(path)

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Write parameters, Adam moments and step as safetensors (the native engine's layout).

        Written to a temporary file and renamed, so a crash never destroys the previous checkpoint.
        """
        from .checkpoint import Checkpoint, save_checkpoint

        ck = self._ort_checkpoint()
        params = {name: ck.parameters[name] for name in self.artifacts.parameters}
        adam_m = {name: m for name, (m, _) in ck.moments.items()}
        adam_v = {name: v for name, (_, v) in ck.moments.items()}
        save_checkpoint(path, Checkpoint(params, adam_m, adam_v, ck.step, {"optimizer": self.artifacts.optimizer}))

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore parameters and (for AdamW) moments and step from a safetensors checkpoint written by
        either backend. Names and shapes must match this graph; missing moments start at zero."""
        from .checkpoint import check_compatible, load_checkpoint

        saved = load_checkpoint(path)
        expected = {n: self._types[n].shape for n in self.artifacts.parameters}
        check_compatible(saved, expected, f"load_checkpoint({str(path)!r})")
        ck = OrtCheckpoint(dict(saved.params), step=saved.step, has_optimizer_group=True)
        ck.learning_rate = self._lr if self._lr is not None else 0.0
        if self.artifacts.optimizer == "adamw":
            for name, shape in expected.items():
                zero = np.zeros(shape, np.float32)
                ck.moments[name] = (saved.adam_m.get(name, zero), saved.adam_v.get(name, zero))
        with tempfile.TemporaryDirectory(prefix="meganeura-ortt-ck-") as tmp:
            ort_path = Path(tmp) / "checkpoint"
            write_ort_checkpoint(ort_path, ck)
            self._load_state(ort_path)

    # -- inspection --------------------------------------------------------------------------------------------
    def memory_summary(self) -> Any:
        """Host-side sizes of what ORT's state holds (parameters, gradients, Adam moments, inputs)."""
        from .plan import MemorySummary

        params = [self._types[n].size_bytes() for n in self.artifacts.parameters]
        adam = 2 * sum(params) if self.artifacts.optimizer == "adamw" else 0
        inputs = [a.nbytes for a in self._inputs.values()]
        sizes = params + params + inputs + ([p for p in params for _ in (0, 1)] if adam else [])
        return MemorySummary(sum(sizes), adam, len(sizes), max(sizes, default=0))


def _copy_out(arr: np.ndarray, out: np.ndarray | None, what: str) -> np.ndarray:
    if out is None:
        return arr
    if out.size != arr.size:
        raise ValueError(f"{what} has {arr.size} elements (shape {list(arr.shape)}); out has {out.size}")
    out.reshape(-1)[:] = arr.reshape(-1)
    return out


def build_ort_training_session(
    graph: GraphCore,
    *,
    optimizer: str = "adamw",
    device: str = "cpu",
    parameters: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    artifacts_dir: str | os.PathLike | None = None,
) -> OrtTrainingSession:
    """A training session for ``graph`` (output 0 = the scalar loss) over onnxruntime-training.

    Parameters start from ``parameters`` or the default init with ``seed`` (the native engine's
    default too, so both backends start from the same weights). ``artifacts_dir`` keeps the generated
    files; by default they go to a temporary folder removed with the session. Raises ``ImportError``
    saying how to install onnxruntime-training when it is missing.
    """
    return OrtTrainingSession(graph, optimizer=optimizer, device=device, parameters=parameters, seed=seed, artifacts_dir=artifacts_dir)


def ort_training_step_time(
    graph: GraphCore, feeds: Mapping[str, np.ndarray], *, steps: int = 50, warmup: int = 5, lr: float = 1e-3
) -> float:
    """Median seconds per AdamW training step (forward + backward + update) of ``graph`` on this backend.

    ``feeds`` maps every input name to its data (U32 inputs as unsigned integer arrays). Runs in the
    onnxruntime-training environment; from another environment call ``python -m
    meganeura_onnx.runtime.ort_training bench`` with that environment's interpreter.
    """
    sess = build_ort_training_session(graph)
    for name, value in feeds.items():
        (sess.set_input_u32 if np.issubdtype(np.asarray(value).dtype, np.unsignedinteger) else sess.set_input)(name, value)
    sess.set_adam(lr, 0.9, 0.999, 1e-8)
    for _ in range(warmup):
        sess.step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        sess.step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def random_feeds(graph: GraphCore, seed: int = 0) -> dict[str, np.ndarray]:
    """Timing data for every input: F32 uniform in [0, 1), U32 zeros (a valid index for any table)."""
    rng = np.random.default_rng(seed)
    return {
        n.attrs["name"]: rng.random(n.ty.shape, dtype=np.float32) if n.op == "input" else np.zeros(n.ty.shape, np.uint32)
        for n in graph.nodes()
        if n.op in ("input", "input_u32")
    }


def ort_training_step_time_subprocess(
    python: str | os.PathLike, model: str | os.PathLike, sets: Mapping[str, Any] | None = None, *, steps: int = 50
) -> dict:
    """:func:`ort_training_step_time` of a model file, measured by ``python`` (the onnxruntime-training
    venv's interpreter) from any environment, e.g. a benchmark running in the main venv. Returns the
    JSON record that ``python -m meganeura_onnx.runtime.ort_training bench`` prints."""
    import subprocess

    args = [os.fspath(python), "-m", "meganeura_onnx.runtime.ort_training", "bench", os.fspath(model), "--steps", str(steps)]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value!r}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"ort-training benchmark failed ({' '.join(args)}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _bench_main(argv: Sequence[str] | None = None) -> None:
    """``python -m meganeura_onnx.runtime.ort_training bench MODEL.py [--set batch=64] [--steps 50]``:
    the model's AdamW step time on this backend as one JSON line."""
    import argparse
    import ast
    import importlib.util

    p = argparse.ArgumentParser(prog="python -m meganeura_onnx.runtime.ort_training")
    p.add_argument("command", choices=["bench"])
    p.add_argument("model", help="model file defining build(**kwargs) -> Graph with the loss as output 0")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args(argv)
    sets = {k: ast.literal_eval(v) for k, _, v in (item.partition("=") for item in args.sets)}
    spec = importlib.util.spec_from_file_location("meganeura_bench_model", args.model)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    graph = module.build(**sets)
    seconds = ort_training_step_time(graph, random_feeds(graph), steps=args.steps, warmup=args.warmup)
    import onnxruntime

    record = {"backend": "ort-training", "onnxruntime": onnxruntime.__version__, "model": os.path.basename(args.model), "sets": sets}
    print(json.dumps({**record, "steps": args.steps, "step_s": seconds}))


if __name__ == "__main__":
    _bench_main()
