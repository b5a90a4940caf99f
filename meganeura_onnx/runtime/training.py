"""Training sessions: forward graph -> rewrites -> autodiff -> optimizer update -> ONE ONNX model.

The train-step model's inputs are the data inputs, the parameters, the optimizer state
(``adam_m.<p>``, ``adam_v.<p>``) and the hyper-parameters (``opt.lr``, ``opt.beta1``, ...,
``opt.step`` as ``[1]`` inputs); its outputs are the loss (``output_0``), the graph's other
outputs, and the next value of every parameter and state tensor (``<name>.next``). With no
optimizer set, the outputs are the gradients ``grad.<p>`` instead and parameters stay put.

:class:`TrainingSession` is the inference :class:`~meganeura_onnx.runtime.session.Session` with that
model: parameters and moments are device OrtValues bound with IOBinding and swapped with their
``.next`` twins after each step, so they never cross to the host unless read.

The optimizer is part of the compiled model. ``build_session(g, optimizer="adam")`` compiles once;
``build_session(g)`` compiles the gradients-only model, and a later ``set_learning_rate`` /
``set_adam`` / ``set_adamw`` recompiles at the next ``step()`` (parameters carried over; one-off).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

from ..export import to_model
from ..graph import Graph
from ..init import default_parameters
from ..ir import DType, TensorType
from ..transforms.autodiff import gradients
from ..transforms.optimizer import OptimizerSpec, append_update
from ..transforms.rewrite import OptimizeReport, optimize
from .checkpoint import Checkpoint, check_compatible, load_checkpoint, save_checkpoint
from .session import Session

DEFAULT_HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "max_grad_norm": 1.0}
CACHE_FORMAT = "meganeura-train-model-1"


@dataclass
class TrainProgram:
    """A compiled train-step model and the names a session binds."""

    model: onnx.ModelProto
    inputs: dict[str, tuple[list[int], str]]  # data input -> (shape, "f32"/"u32")
    params: dict[str, list[int]]  # every parameter the model reads
    trainable: list[str]  # parameters that receive a gradient
    moments: list[str]  # adam_m.<p>, adam_v.<p>
    hyper: list[str]  # opt.<name>
    outputs: dict[str, list[int]]  # output name -> shape (loss, graph outputs, grads)
    no_grad: dict[str, str]  # parameter -> why it gets no gradient

    def meta(self) -> str:
        d = asdict(self)
        del d["model"]
        return json.dumps(d)


def graph_key(graph: Graph, spec: OptimizerSpec | None, opset: int | None) -> str:
    """Hash of everything the compiled model depends on: ops, wiring, shapes, dtypes, attributes
    (eps, theta, constant values...), outputs, the optimizer and the toolchain versions."""
    import onnxruntime

    from .. import __version__

    h = hashlib.sha256()
    h.update(f"{CACHE_FORMAT}|{__version__}|onnx {onnx.__version__}|ort {onnxruntime.__version__}|{spec}|{opset}".encode())
    for n in graph.nodes():
        attrs = {k: (v.tobytes().hex() if isinstance(v, np.ndarray) else v) for k, v in sorted(n.attrs.items())}
        h.update(f"{n.op}|{n.inputs}|{n.ty}|{attrs!r};".encode())
    h.update(repr(graph.outputs()).encode())
    return h.hexdigest()


def compile_program(forward: Graph, spec: OptimizerSpec | None, opset: int | None = None) -> TrainProgram:
    """Autodiff + optimizer update + export of ``forward`` (whose output 0 is a ``[1]`` loss)."""
    g = forward.toposort()  # a copy to extend
    if not g.outputs() or g.node(g.outputs()[0]).ty.shape != (1,):
        shape = list(g.node(g.outputs()[0]).ty.shape) if g.outputs() else None
        raise ValueError(f"build_session: output 0 must be the [1] loss to minimise, got {shape}")
    loss = g.outputs()[0]
    params = dict(g.leaves("parameter"))
    res = gradients(g, loss, list(params.values()))
    grads = {n: res.grads[nid] for n, nid in params.items() if res.grads[nid] is not None}
    no_grad = {n: res.why_none(nid) for n, nid in params.items() if res.grads[nid] is None}
    if spec is None:
        extra = {f"grad.{n}": gid for n, gid in grads.items()}
    else:
        up = append_update(g, params, grads, spec)
        extra = {f"{n}.next": nid for n, nid in up.next_values.items()}
    n_out = len(g.outputs())
    g.set_outputs(g.outputs() + list(extra.values()))
    g = g.toposort()  # drops gradient nodes nothing needs (e.g. of the labels)
    ids = g.outputs()
    g.set_outputs(ids[:n_out])
    extra = dict(zip(extra, ids[n_out:], strict=True))
    model, _ = to_model(g, opset=opset, params_as_inputs=True, extra_outputs=extra, model_name="meganeura_train_step")
    leaves = {n.attrs["name"]: n for n in g.nodes() if n.op in ("input", "input_u32", "parameter")}
    hyper = [n for n in leaves if n.startswith("opt.")]
    moments = [n for n in leaves if n.startswith(("adam_m.", "adam_v.")) and leaves[n].op == "input"]
    data = {
        n: (list(v.ty.shape), v.ty.dtype.value) for n, v in leaves.items() if v.op != "parameter" and n not in hyper and n not in moments
    }
    outputs = {f"output_{k}": list(g.node(nid).ty.shape) for k, nid in enumerate(g.outputs())}
    outputs.update({name: list(g.node(nid).ty.shape) for name, nid in extra.items() if name.startswith("grad.")})
    in_model = {n: list(v.ty.shape) for n, v in leaves.items() if v.op == "parameter"}
    return TrainProgram(model, data, in_model, [n for n in grads if n in in_model], moments, hyper, outputs, no_grad)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _cached_program(forward: Graph, spec: OptimizerSpec | None, opset: int | None, path: Path) -> TrainProgram:
    key = graph_key(forward, spec, opset)
    if path.is_file():
        try:
            model = onnx.load_model(str(path))
            props = {p.key: p.value for p in model.metadata_props}
            if props.get("meganeura.key") == key:
                meta = json.loads(props["meganeura.program"])
                return TrainProgram(model, **meta)
        except Exception:  # noqa: BLE001 - an unreadable cache is rebuilt, never trusted
            pass
    prog = compile_program(forward, spec, opset)
    onnx.helper.set_model_props(prog.model, {"meganeura.key": key, "meganeura.program": prog.meta()})
    _write_atomic(path, prog.model.SerializeToString())
    return prog


class TrainingSession(Session):
    """A Session whose ``step()`` runs forward + backward + the optimizer update.

    Build it with :func:`build_session`. Beyond the inference Session's methods: optimizer setters,
    :meth:`read_grad` (gradients-only mode), checkpoints and the optimizer step count.
    """

    def __init__(
        self,
        graph: Graph,
        *,
        device: str = "cpu",
        providers: Sequence | None = None,
        optimizer: str | None = None,
        clip: bool = False,
        parameters: Mapping[str, np.ndarray] | None = None,
        seed: int = 0,
        opset: int | None = None,
        use_custom_ops: bool = True,
        rewrite: bool = True,
        cache_path: str | os.PathLike | None = None,
    ) -> None:
        names = set(graph.parameters())
        unknown = set(parameters or {}) - names
        if unknown:
            raise ValueError(f"build_session: parameters {sorted(unknown)} are not in the graph (it has {sorted(names)})")
        values = default_parameters(graph, seed, skip=set(parameters or {}))  # on the user's graph: init reads matmul fan-in
        values.update({k: np.asarray(v, np.float32) for k, v in (parameters or {}).items()})
        self._forward, self.report = optimize(graph) if rewrite else (graph, OptimizeReport(len(graph), len(graph)))
        self._build = {"device": device, "providers": providers, "use_custom_ops": use_custom_ops}
        self._opset = opset
        self._cache_path = Path(cache_path) if cache_path is not None else None
        self._programs: dict[OptimizerSpec | None, TrainProgram] = {}
        self._hyper_values = dict(DEFAULT_HYPER)
        self._clip = clip
        self._wanted: OptimizerSpec | None = OptimizerSpec(optimizer, clip) if optimizer else None
        self._opt_steps = 0
        self._written: dict[str, float] = {}
        self._carry: dict[str, np.ndarray] = dict(values)
        self._compile(self._wanted)

    # -- compiling ------------------------------------------------------------------------------
    def _program(self, spec: OptimizerSpec | None) -> TrainProgram:
        if spec not in self._programs:
            if self._cache_path is not None:
                self._programs[spec] = _cached_program(self._forward, spec, self._opset, self._cache_path)
            else:
                self._programs[spec] = compile_program(self._forward, spec, self._opset)
        return self._programs[spec]

    def _compile(self, spec: OptimizerSpec | None) -> None:
        """(Re)build the ORT session for ``spec``, carrying parameters, moments and inputs over."""
        if hasattr(self, "_prog"):  # a recompile: copy the live values to the host once
            self._carry.update(
                {n: self._values[n].numpy().copy() for n in self._types if self._kinds[n] in ("parameter", "optimizer", "input")}
            )
        prog = self._program(spec)
        carry = self._carry
        updated = prog.trainable if spec is not None else []  # gradients-only: parameters stay put
        state = {n: (f"{n}.next", carry[n]) for n in updated}
        state.update({m: (f"{m}.next", carry.get(m, np.zeros(prog.params[m.split(".", 1)[1]], np.float32))) for m in prog.moments})
        persistent = {n: carry[n] for n in prog.params if n not in updated}
        inputs = {n: TensorType(tuple(shape), DType(dt)) for n, (shape, dt) in prog.inputs.items()}
        inputs.update({h: TensorType((1,)) for h in prog.hyper})
        super().__init__(
            prog.model,
            inputs=inputs,
            persistent=persistent,
            state=state,
            outputs=list(prog.outputs),
            output_types={n: TensorType(tuple(s)) for n, s in prog.outputs.items()},
            parameter_names=list(prog.params),
            **self._build,
        )
        for m in prog.moments:
            self._kinds[m] = "optimizer"
        for h in prog.hyper:
            self._kinds[h] = "hyper"
        for n in prog.inputs:
            if n in carry:
                self._values[n].update_inplace(np.ascontiguousarray(carry[n]))
        self._prog, self._spec, self._written, self._carry = prog, spec, {}, {}

    # -- optimizer settings ---------------------------------------------------------------------
    def set_learning_rate(self, lr: float) -> None:
        """Use SGD with learning rate ``lr`` for the updates fused into the next ``step()``."""
        self._wanted = OptimizerSpec("sgd", self._clip)
        self._hyper_values["lr"] = float(lr)

    def set_adam(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8) -> None:
        """Use Adam (PyTorch's formula, bias-corrected) for the updates fused into the next ``step()``."""
        self._wanted = OptimizerSpec("adam", self._clip)
        self._hyper_values.update(lr=float(lr), beta1=float(beta1), beta2=float(beta2), eps=float(epsilon))

    def set_adamw(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, weight_decay: float = 0.01) -> None:
        """Use AdamW (decoupled weight decay, ``torch.optim.AdamW``'s formula). An extra of this port."""
        self._wanted = OptimizerSpec("adamw", self._clip)
        self._hyper_values.update(
            lr=float(lr), beta1=float(beta1), beta2=float(beta2), eps=float(epsilon), weight_decay=float(weight_decay)
        )

    def set_grad_clip(self, max_norm: float | None) -> None:
        """Clip the global gradient L2 norm to ``max_norm`` before the update (None: no clipping)."""
        self._clip = max_norm is not None
        if max_norm is not None:
            self._hyper_values["max_grad_norm"] = float(max_norm)
        if self._wanted is not None:
            self._wanted = OptimizerSpec(self._wanted.kind, self._clip)

    @property
    def optimizer_step(self) -> int:
        """Optimizer updates applied so far (Adam's t); saved in checkpoints."""
        return self._opt_steps

    # -- running --------------------------------------------------------------------------------
    def step(self) -> None:
        """Forward, backward and (if an optimizer is set) the update, in one ORT run."""
        if self._wanted != self._spec:
            self._compile(self._wanted)
        if self._spec is not None:
            self._opt_steps += 1
            values = {**self._hyper_values, "step": float(self._opt_steps)}
            for h in self._prog.hyper:
                v = values[h[4:]]
                if self._written.get(h) != v:
                    self._values[h].update_inplace(np.array([v], np.float32))
                    self._written[h] = v
        super().step()

    def read_grad(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Gradient of the loss wrt parameter ``name`` from the last ``step()`` (no optimizer set)."""
        if name in self._prog.no_grad:
            raise ValueError(f"read_grad: parameter {name!r} gets no gradient: {self._prog.no_grad[name]}")
        if f"grad.{name}" not in self._outputs:
            if self._spec is not None:
                raise RuntimeError(f"read_grad: gradients are outputs only without an optimizer; this session runs {self._spec.kind}")
            raise KeyError(f"read_grad: no parameter named {name!r}; the session has {list(self._prog.params)}")
        return self._read(self._outputs[f"grad.{name}"], out, f"gradient of {name!r}")

    def parameter_names(self) -> list[str]:
        return list(self._prog.params)

    # -- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, path: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> None:
        """Parameters, Adam moments and the step count to a safetensors file (atomic write).
        ``metadata``: extra string entries for the file's metadata (e.g. the epoch)."""
        params = {n: self.read_param(n) for n in self._prog.params}
        moments = {m: self._values[m].numpy().copy() for m in self._prog.moments}
        kind = self._spec.kind if self._spec else "none"
        save_checkpoint(
            path,
            Checkpoint(
                params,
                {m[7:]: v for m, v in moments.items() if m.startswith("adam_m.")},
                {m[7:]: v for m, v in moments.items() if m.startswith("adam_v.")},
                self._opt_steps,
                {**(metadata or {}), "optimizer": kind},
            ),
        )

    def load_checkpoint(self, path: str | os.PathLike) -> dict[str, str]:
        """Restore parameters, Adam moments and the step count; the graph must match (names and
        shapes). Returns the file's other metadata."""
        ckpt = load_checkpoint(path)
        check_compatible(ckpt, {n: tuple(s) for n, s in self._prog.params.items()}, f"load_checkpoint({str(path)!r})")
        for n, v in ckpt.params.items():
            self.set_parameter(n, v)
        moments = {f"adam_m.{n}": v for n, v in ckpt.adam_m.items()} | {f"adam_v.{n}": v for n, v in ckpt.adam_v.items()}
        for m in self._prog.moments:
            self._values[m].update_inplace(np.ascontiguousarray(moments.get(m, np.zeros(self._types[m].shape, np.float32)), np.float32))
        self._carry.update(moments)  # kept for a later recompile to Adam
        self._opt_steps = ckpt.step
        return ckpt.metadata


def build_session(graph: Graph, device: str = "cpu", *, optimizer: str | None = None, backend: str = "native", **kwargs) -> TrainingSession:
    """A training session for ``graph`` (output 0 = the ``[1]`` loss) on ``device`` ("cpu"/"cuda").

    ``optimizer`` ("sgd", "adam", "adamw") compiles that update into the model now; set its
    hyper-parameters with ``set_learning_rate`` / ``set_adam`` / ``set_adamw``. Other keywords:
    ``providers``, ``parameters`` (initial values by name; the rest use the default init with
    ``seed``), ``clip``, ``opset``, ``use_custom_ops``, ``rewrite``.

    ``backend="ort-training"`` trains through onnxruntime-training's artifacts instead
    (:mod:`meganeura_onnx.runtime.ort_training`; CPU, AdamW or SGD fixed at build time, its own venv:
    ``make ort-training``); it takes ``parameters``, ``seed`` and ``artifacts_dir``.
    """
    if backend == "ort-training":
        from .ort_training import build_ort_training_session

        return build_ort_training_session(graph, device=device, optimizer=optimizer or "adamw", **kwargs)  # type: ignore[return-value]
    if backend != "native":
        raise ValueError(f"build_session: backend must be 'native' or 'ort-training', got {backend!r}")
    return TrainingSession(graph, device=device, optimizer=optimizer, **kwargs)


def build_session_cached(graph: Graph, cache_path: str | os.PathLike, device: str = "cpu", **kwargs) -> TrainingSession:
    """Like :func:`build_session`, reusing the train-step ONNX model stored at ``cache_path`` when
    its key (a hash of the graph's ops, wiring, shapes and attributes, the optimizer and the
    toolchain versions) matches; otherwise it compiles and (atomically) stores the model there."""
    return TrainingSession(graph, device=device, cache_path=cache_path, **kwargs)


def build_session_with_report(graph: Graph, device: str = "cpu", **kwargs) -> tuple[TrainingSession, OptimizeReport]:
    """Like :func:`build_session`, also returning what the rewrite pass did."""
    s = build_session(graph, device, **kwargs)
    return s, s.report
