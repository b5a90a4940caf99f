"""Training sessions: forward graph -> e-graph optimizer -> autodiff -> optimizer update -> e-graph
optimizer -> ONE ONNX model.

The train-step model's inputs are the data inputs, the parameters, the optimizer state
(``adam_m.<p>``, ``adam_v.<p>``) and the hyper-parameters (``opt.lr``, ``opt.beta1``, ...,
``opt.step`` as ``[1]`` inputs; ``opt.step`` is state that the model advances itself, so a step
replayed as a CUDA graph needs no host write); its outputs are the loss (output 0, ``output_0``
unless named), the graph's other outputs, and the next value of every parameter and state tensor
(``<name>.next``, ``opt.step.next`` too). With no
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
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx

from ..export import to_model
from ..export.precision import HALF_TYPE, PrecisionReport, lower_precision
from ..graph import Graph
from ..init import default_parameters
from ..ir import DType, TensorType
from ..ops.table import CUSTOM_DOMAIN
from ..transforms.autodiff import gradients
from ..transforms.egraph import table_rules
from ..transforms.optimizer import OptimizerSpec, append_update
from ..transforms.rewrite import Limits, OptimizeReport, optimize
from .checkpoint import Checkpoint, check_compatible, load_checkpoint, save_checkpoint
from .custom_ops import custom_op_library
from .half import check_precision
from .liveness import recompute_late_reads, reorder_for_memory
from .positions import position_rules
from .safetensors_file import write_atomic
from .schedules import LossScaler
from .session import Session
from .values import checked_parameters, parameter_array

DEFAULT_HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "max_grad_norm": 1.0}
CACHE_FORMAT = "meganeura-train-model-5"  # 5: Concat recomputed; 4: RMSNormGrad with dweight, reshapes folded; 3: memory-aware order, SwiGLU recomputed
TRAIN_SESSION_OPTIONS = {
    # ORT runs the nodes in the model's order (reorder_for_memory) instead of its own depth-first
    # order, which computes every weight gradient after the whole backward pass and so keeps every
    # saved activation (and the [rows, vocab] loss gradient) alive to the end.
    "execution_order": "PRIORITY_BASED",
    # ORT's memory pattern allocates, from the second run on, one block for all intermediates
    # beside the arena chunks the first run left: the arena then holds about twice the peak.
    "enable_mem_pattern": False,
}


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
    report: OptimizeReport | None = None  # the train-step graph's optimization (None: loaded from a cache)
    counters: list[str] = field(default_factory=list)  # opt.step: state the model advances (opt.step.next)

    def meta(self) -> str:
        d = asdict(self)
        del d["model"], d["report"]
        return json.dumps(d)


def graph_key(graph: Graph, spec: OptimizerSpec | None, opset: int | None, optimize: bool = True, loss_scaling: bool = False) -> str:
    """Hash of everything the compiled model depends on: ops, wiring, shapes, dtypes, attributes
    (eps, theta, constant values...), outputs, the optimizer, the opset, whether the e-graph optimizer
    runs (and its rules and limits) and the toolchain versions."""
    import onnxruntime

    from .. import __version__

    h = hashlib.sha256()
    h.update(f"{CACHE_FORMAT}|{__version__}|onnx {onnx.__version__}|ort {onnxruntime.__version__}|{spec}|{opset}".encode())
    if loss_scaling:
        h.update(b"|loss scaling")
    if optimize:
        h.update(f"|optimize {Limits()}|{[(r.name, r.lhs, r.rhs) for r in table_rules()]}".encode())
    for n in graph.nodes():
        attrs = {k: (v.tobytes().hex() if isinstance(v, np.ndarray) else v) for k, v in sorted(n.attrs.items())}
        h.update(f"{n.op}|{n.inputs}|{n.ty}|{attrs!r};".encode())
    h.update(repr(graph.named_outputs()).encode())
    return h.hexdigest()


LOSS_SCALE_CHECK = "loss_scale.check"
"""Output of a loss-scaled train step: the sum of every unscaled gradient, finite iff all are."""


def compile_program(
    forward: Graph, spec: OptimizerSpec | None, opset: int | None = None, optimize_graph: bool = True, loss_scaling: bool = False
) -> TrainProgram:
    """Autodiff + optimizer update (+ the e-graph optimizer over the whole train step) + export of
    ``forward`` (whose output 0 is a ``[1]`` loss).

    ``loss_scaling``: differentiate ``loss * opt.loss_scale`` (an input) and divide the gradients by
    it before the update, so small fp16 gradients do not flush to zero; the output
    :data:`LOSS_SCALE_CHECK` is non-finite when a gradient overflowed (the session then drops the step).
    """
    g = forward.toposort()  # a copy to extend
    if not g.outputs() or g.node(g.outputs()[0]).ty.shape != (1,):
        shape = list(g.node(g.outputs()[0]).ty.shape) if g.outputs() else None
        raise ValueError(f"build_session: output 0 must be the [1] loss to minimise, got {shape}")
    loss = g.outputs()[0]
    params = dict(g.leaves("parameter"))
    scale = g.state_input("opt.loss_scale", [1]) if loss_scaling else None
    res = gradients(g, loss if scale is None else g.mul_scalar(loss, scale), list(params.values()))
    grads = {n: res.grads[nid] for n, nid in params.items() if res.grads[nid] is not None}
    no_grad = {n: res.why_none(nid) for n, nid in params.items() if res.grads[nid] is None}
    check = {}
    if scale is not None:
        inv = g.recip(scale)
        grads = {n: g.mul_scalar(gid, inv) for n, gid in grads.items()}
        total = None
        for gid in grads.values():  # inf or nan anywhere makes the sum non-finite
            total = g.sum_all(gid) if total is None else g.add(total, g.sum_all(gid))
        check = {LOSS_SCALE_CHECK: total}
    if spec is None:
        extra = {f"grad.{n}": gid for n, gid in grads.items()} | check
    else:
        up = append_update(g, params, grads, spec)
        extra = {f"{n}.next": nid for n, nid in up.next_values.items()} | check
    named = g.named_outputs()
    g.set_outputs({**named, **extra})
    g = g.toposort()  # drops gradient nodes nothing needs (e.g. of the labels)
    report = None
    if optimize_graph:  # the backward and the update have their own patterns (and shared subterms)
        g, report = optimize(g, stage="train step")
        g = g.toposort()
    kept = g.named_outputs()
    g.set_outputs({name: kept[name] for name in named})
    extra = {name: kept[name] for name in extra}
    model, _ = to_model(g, opset=opset, params_as_inputs=True, extra_outputs=extra, model_name="meganeura_train_step")
    # Nodes that free memory (weight-gradient MatMuls releasing saved activations) run as soon as
    # they can; the session makes ORT follow this order (TRAIN_SESSION_OPTIONS). Then the backward
    # pass recomputes SwiGLU's output instead of keeping it from the forward pass.
    if recompute_late_reads(reorder_for_memory(model)):
        reorder_for_memory(model)
    leaves = {n.attrs["name"]: n for n in g.nodes() if n.op in ("input", "input_u32", "parameter")}
    counters = [n for n in leaves if n.startswith("opt.") and f"{n}.next" in extra]
    hyper = [n for n in leaves if n.startswith("opt.") and n not in counters]
    moments = [n for n in leaves if n.startswith(("adam_m.", "adam_v.", "grad_acc.")) and leaves[n].op == "input"]
    data = {
        n: (list(v.ty.shape), v.ty.dtype.value)
        for n, v in leaves.items()
        if v.op != "parameter" and n not in hyper and n not in moments and n not in counters
    }
    outputs = {name: list(g.node(nid).ty.shape) for name, nid in g.named_outputs().items()}
    outputs.update({name: list(g.node(nid).ty.shape) for name, nid in extra.items() if name.startswith("grad.") or name in check})
    in_model = {n: list(v.ty.shape) for n, v in leaves.items() if v.op == "parameter"}
    return TrainProgram(model, data, in_model, [n for n in grads if n in in_model], moments, hyper, outputs, no_grad, report, counters)


def update_runs_last(model: onnx.ModelProto, params: set[str]) -> bool:
    """True when ``model`` has one AdamUpdate node and every other node reading one of ``params``
    is an ancestor of it (so it runs before the update in any order ORT picks)."""
    nodes = list(model.graph.node)
    adam = [i for i, n in enumerate(nodes) if n.op_type == "AdamUpdate" and n.domain == CUSTOM_DOMAIN]
    if len(adam) != 1:
        return False
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    ancestors, stack = set(), [adam[0]]
    while stack:
        for name in nodes[stack.pop()].input:
            i = producer.get(name)
            if i is not None and i not in ancestors:
                ancestors.add(i)
                stack.append(i)
    return all(i in ancestors or i == adam[0] or not params.intersection(n.input) for i, n in enumerate(nodes))


def _cached_program(
    forward: Graph, spec: OptimizerSpec | None, opset: int | None, path: Path, optimize_graph: bool, loss_scaling: bool = False
) -> TrainProgram:
    key = graph_key(forward, spec, opset, optimize_graph, loss_scaling)
    if path.is_file():
        try:
            model = onnx.load_model(str(path))
            props = {p.key: p.value for p in model.metadata_props}
            if props.get("meganeura.key") == key:
                meta = json.loads(props["meganeura.program"])
                return TrainProgram(model, **meta)
        except Exception:  # noqa: BLE001 - an unreadable cache is rebuilt, never trusted
            pass
    prog = compile_program(forward, spec, opset, optimize_graph, loss_scaling)
    onnx.helper.set_model_props(prog.model, {"meganeura.key": key, "meganeura.program": prog.meta()})
    write_atomic(path, prog.model.SerializeToString())
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
        optimize: bool = True,
        cache_path: str | os.PathLike | None = None,
        check_finite: bool = False,
        fused_optimizer: bool | None = None,
        precision: str = "fp32",
        loss_scale: float = 2.0**16,
        loss_scale_growth_interval: int = 2000,
        cuda_graph: bool = False,
        merge_projections: bool = True,
    ) -> None:
        if cuda_graph and device != "cuda":
            raise ValueError(f"build_session: cuda_graph=True needs device='cuda', got device={device!r}")
        self._precision = check_precision(precision, device, providers, "build_session")
        self._scaler = LossScaler(loss_scale, loss_scale_growth_interval) if precision == "fp16" else None
        self._precision_reports: dict[OptimizerSpec | None, PrecisionReport] = {}
        given = checked_parameters(parameters, graph.parameters(), "build_session")
        values = default_parameters(graph, seed, skip=set(given))  # on the user's graph: init reads matmul fan-in
        values.update(given)
        self._optimize = optimize
        self._forward, self._forward_report = _optimize_forward(graph, merge_projections) if optimize else (graph, None)
        self._build = {
            "device": device,
            "providers": providers,
            "use_custom_ops": use_custom_ops,
            "check_finite": check_finite,
            "precision": precision,
            "cuda_graph": cuda_graph,
        }
        self._opset = opset
        self._cache_path = Path(cache_path) if cache_path is not None else None
        self._programs: dict[OptimizerSpec | None, TrainProgram] = {}
        self._hyper_values = dict(DEFAULT_HYPER)
        self._clip = clip
        self._accum, self._micro = 1, 0  # gradient accumulation: micro-batches per update, position in the window
        # One multi-tensor AdamUpdate node (our CPU or CUDA kernel; its function body without the
        # library) instead of ~13 elementwise nodes per parameter; fused_optimizer=False opts out.
        self._fused = True if fused_optimizer is None else bool(fused_optimizer)
        self._wanted: OptimizerSpec | None = self._spec_for(optimizer) if optimizer else None
        self._opt_steps = 0
        self._written: dict[str, float] = {}
        self._carry: dict[str, np.ndarray] = dict(values)
        self._compile(self._wanted)

    @property
    def report(self) -> OptimizeReport | None:
        """What the e-graph optimizer did to the forward graph and to the current train step
        (:class:`~meganeura_onnx.transforms.rewrite.OptimizeReport`; ``None`` with ``optimize=False``)."""
        if self._forward_report is None:
            return None
        stages = [self._forward_report] + ([self._prog.report] if self._prog.report is not None else [])
        return OptimizeReport.combine(stages)

    # -- compiling ------------------------------------------------------------------------------
    def _program(self, spec: OptimizerSpec | None) -> TrainProgram:
        if spec not in self._programs:
            scaling = self._scaler is not None
            if self._cache_path is not None:
                prog = _cached_program(self._forward, spec, self._opset, self._cache_path, self._optimize, scaling)
            else:
                prog = compile_program(self._forward, spec, self._opset, self._optimize, scaling)
            if self._precision in HALF_TYPE:  # fp32 master weights and optimizer state: only compute changes
                device = "cuda" if self._build["providers"] is None and self._build["device"] == "cuda" else "cpu"
                kernels = self._build["use_custom_ops"] and custom_op_library(device) is not None
                model, self._precision_reports[spec] = lower_precision(prog.model, self._precision, device=device, custom_kernels=kernels)
                prog = replace(prog, model=model)
            self._programs[spec] = prog
        return self._programs[spec]

    def _compile(self, spec: OptimizerSpec | None) -> None:
        """(Re)build the ORT session for ``spec``, carrying parameters, moments and inputs over."""
        if hasattr(self, "_prog"):  # a recompile: copy the live values to the host once
            self._carry.update(
                {
                    n: self._values[n].numpy().copy()
                    for n in self._types
                    if self._kinds[n] in ("parameter", "optimizer", "input")
                    and n in self._values  # (a symbolic input not set yet has none)
                }
            )
        prog = self._program(spec)
        carry = self._carry
        if prog.moments and not any(m in carry for m in prog.moments):
            self._opt_steps = 0  # Adam starts from zero moments: its bias correction restarts at t = 1
        updated = prog.trainable if spec is not None else []  # gradients-only: parameters stay put
        state = {n: (f"{n}.next", carry[n]) for n in updated}
        state.update({m: (f"{m}.next", carry.get(m, np.zeros(prog.params[m.split(".", 1)[1]], np.float32))) for m in prog.moments})
        state.update({c: (f"{c}.next", np.array([self._opt_steps + 1], np.float32)) for c in prog.counters})
        persistent = {n: carry[n] for n in prog.params if n not in updated}
        inplace = [*updated, *prog.moments] if self._updates_in_place(prog, spec) else []
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
            precisions=self._precision_reports[spec].nodes if spec in self._precision_reports else (),
            inplace_state=inplace,
            inplace_kernels={(CUSTOM_DOMAIN, "AdamUpdate")},
            position_rules=position_rules(self._forward),  # token ids checked on upload: no ScatterAdd read-back
            session_options=TRAIN_SESSION_OPTIONS,
            **self._build,
        )
        for m in prog.moments:
            self._kinds[m] = "optimizer"
        for h in prog.hyper:
            self._kinds[h] = "hyper"
        for c in prog.counters:
            self._kinds[c] = "counter"
        for n in prog.inputs:
            if n in carry:
                if n in self._values:
                    self._values[n].update_inplace(np.ascontiguousarray(carry[n]))
                else:  # symbolic dims: set again as set_input would (binds its sizes)
                    self._write(n, carry[n], self._types[n].dtype, "build_session")
        self._prog, self._spec, self._written, self._carry = prog, spec, {}, {}

    def _updates_in_place(self, prog: TrainProgram, spec: OptimizerSpec | None) -> bool:
        """Whether the AdamUpdate kernel may write p', m', v' over p, m, v (one buffer each instead
        of two swapped: for SmolLM2-135M 1.6 GB less). Only when nothing needs the old values after
        the step (no ``check_finite``, no fp16 step that may be dropped, no accumulation gate) and
        every other reader of a parameter feeds the update, so ORT runs it before the update.

        Under ``cuda_graph=True`` too: ORT's first ``run`` of a graph executes the model more than
        once (regular runs, then capture and replay) inside the one call, so the session keeps the
        values before that call, puts them back after it and replays the captured graph once
        (``Session._run``)."""
        if spec is None or not spec.fused or spec.accumulate or self._build["check_finite"] or self._scaler is not None:
            return False
        return update_runs_last(prog.model, set(prog.trainable))

    # -- optimizer settings ---------------------------------------------------------------------
    def _spec_for(self, kind: str) -> OptimizerSpec:
        accumulate = self._accum > 1
        return OptimizerSpec(kind, self._clip, fused=self._fused and kind != "sgd", accumulate=accumulate, device_step=True)

    def set_grad_accumulation(self, steps: int) -> None:
        """Average the gradients of ``steps`` consecutive ``step()`` calls (micro-batches) and update
        the parameters once, on the last of them (1: update every step). The accumulators are
        session state (``grad_acc.<param>``); ``optimizer_step`` counts updates, not micro-batches."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"set_grad_accumulation: steps must be a positive int, got {steps!r}")
        self._accum, self._micro = steps, 0
        if self._wanted is not None:
            self._wanted = self._spec_for(self._wanted.kind)

    @staticmethod
    def _hyper(what: str, **values: float) -> dict[str, float]:
        """Hyper-parameters checked: real finite numbers (not bool) in their ranges."""
        ranges = {
            "lr": (0.0, None, "lr >= 0"),
            "beta1": (0.0, 1.0, "0 <= beta1 < 1"),
            "beta2": (0.0, 1.0, "0 <= beta2 < 1"),
            "epsilon": (None, None, "epsilon > 0"),
            "weight_decay": (0.0, None, "weight_decay >= 0"),
            "max_norm": (None, None, "max_norm > 0"),
        }
        out = {}
        for name, v in values.items():
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise TypeError(f"{what}: {name} must be a number, got {type(v).__name__} {v!r}")
            v = float(v)
            low, high, rule = ranges[name]
            positive = name in ("epsilon", "max_norm")
            if not math.isfinite(v) or (low is not None and v < low) or (high is not None and v >= high) or (positive and v <= 0):
                raise ValueError(f"{what}: {name} must be finite with {rule}, got {v}")
            out[name] = v
        return out

    def set_learning_rate(self, lr: float) -> None:
        """Use SGD with learning rate ``lr`` (finite, >= 0) for the updates fused into the next ``step()``."""
        h = self._hyper("set_learning_rate", lr=lr)
        self._wanted = self._spec_for("sgd")
        self._hyper_values["lr"] = h["lr"]

    def set_adam(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8) -> None:
        """Use Adam (PyTorch's formula, bias-corrected) for the updates fused into the next ``step()``.
        ``lr >= 0``, ``0 <= beta < 1``, ``epsilon > 0``, all finite."""
        h = self._hyper("set_adam", lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon)
        self._wanted = self._spec_for("adam")
        self._hyper_values.update(lr=h["lr"], beta1=h["beta1"], beta2=h["beta2"], eps=h["epsilon"])

    def set_adamw(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, weight_decay: float = 0.01) -> None:
        """Use AdamW (decoupled weight decay, ``torch.optim.AdamW``'s formula). An extra of this port.
        Ranges as :meth:`set_adam`, and ``weight_decay >= 0``."""
        h = self._hyper("set_adamw", lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon, weight_decay=weight_decay)
        self._wanted = self._spec_for("adamw")
        self._hyper_values.update(lr=h["lr"], beta1=h["beta1"], beta2=h["beta2"], eps=h["epsilon"], weight_decay=h["weight_decay"])

    def set_grad_clip(self, max_norm: float | None) -> None:
        """Clip the global gradient L2 norm to ``max_norm`` (finite, > 0) before the update (None: no clipping)."""
        if max_norm is not None:
            self._hyper_values["max_grad_norm"] = self._hyper("set_grad_clip", max_norm=max_norm)["max_norm"]
        self._clip = max_norm is not None
        if self._wanted is not None:
            self._wanted = self._spec_for(self._wanted.kind)

    @property
    def optimizer_step(self) -> int:
        """Optimizer updates applied so far (Adam's t); saved in checkpoints. Switching from an
        optimizer without moments (SGD, none) to Adam/AdamW restarts it at 0, as the moments do."""
        return self._opt_steps

    # -- running --------------------------------------------------------------------------------
    def step(self) -> None:
        """Forward, backward and (if an optimizer is set) the update, in one ORT run.

        A step that fails changes nothing: parameters, optimizer state and the step count stay
        (with the in-place Adam update, :attr:`inplace_state`, unless the update kernel itself fails:
        it runs last; ``check_finite=True`` keeps two buffers per tensor and the guarantee whole).
        """
        if self._wanted is not self._spec and self._wanted != self._spec:  # (_compile makes them the same object)
            self._compile(self._wanted)
        apply = self._spec is not None and (not self._spec.accumulate or (self._micro + 1) % self._accum == 0)
        values = {**self._hyper_values, "step": float(self._opt_steps + 1)}
        values.update(apply=float(apply), accum_scale=1.0 / self._accum)
        if self._scaler is not None:
            values["loss_scale"] = self._scaler.scale
        for h in self._prog.hyper:
            v = values[h[4:]]
            if self._written.get(h) != v:
                self._values[h].update_inplace(np.array([v], np.float32))
                self._written[h] = v
        self._overflowed = False
        super().step()  # raises before swapping anything if the run fails
        if self._overflowed:  # fp16 gradients overflowed: nothing was applied, nothing is counted
            return
        if self._spec is not None:
            self._micro = (self._micro + 1) % self._accum if self._spec.accumulate else 0
            self._opt_steps += apply

    def _reset_counters(self) -> None:
        """Write the host's step count to the device counter (``opt.step``: the next update's t)."""
        for c in self._prog.counters:
            self._values[c].update_inplace(np.array([self._opt_steps + 1], np.float32))

    def _accept_step(self) -> bool:
        # Dropping a step relies on its update having gone to the spare buffers: with loss scaling,
        # no parameter or optimizer buffer may be updated in place (aliased).
        if self._scaler is None:
            return True
        check = float(self._outputs[LOSS_SCALE_CHECK].numpy().reshape(-1)[0])
        self._overflowed = not self._scaler.update(math.isfinite(check))
        if self._overflowed and self._aliased:
            raise RuntimeError(
                f"step: fp16 gradients overflowed but {sorted(self._aliased)[:3]}... were updated in place; "
                "loss-scaled sessions must not alias parameter or optimizer buffers"
            )
        return not self._overflowed

    @property
    def precision(self) -> str:
        """The compute precision: fp32, tf32, bf16 or fp16 (parameters and optimizer state are float32 in all)."""
        return self._precision

    @property
    def loss_scale(self) -> float | None:
        """fp16: the current dynamic loss scale (None for other precisions)."""
        return None if self._scaler is None else self._scaler.scale

    @property
    def skipped_steps(self) -> int:
        """fp16: steps whose gradients overflowed and were dropped (never applied, never counted
        in ``optimizer_step``); 0 for other precisions."""
        return 0 if self._scaler is None else self._scaler.skipped

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
        shapes) and the parameters must be finite. Everything is validated before anything is
        written (no half-load). Returns the file's other metadata."""
        what = f"load_checkpoint({str(path)!r})"
        ckpt = load_checkpoint(path)
        check_compatible(ckpt, {n: tuple(s) for n, s in self._prog.params.items()}, what)
        params = {n: parameter_array(n, v, self._types[n], what) for n, v in ckpt.params.items()}
        moments = {f"adam_m.{n}": v for n, v in ckpt.adam_m.items()} | {f"adam_v.{n}": v for n, v in ckpt.adam_v.items()}
        adam = [m for m in self._prog.moments if not m.startswith("grad_acc.")]  # accumulators restart at 0
        if adam and moments and set(adam) - set(moments):
            raise ValueError(f"{what}: the checkpoint lacks Adam moments {sorted(set(adam) - set(moments))}")
        live = {m: np.ascontiguousarray(moments.get(m, np.zeros(self._types[m].shape, np.float32)), np.float32) for m in self._prog.moments}
        # Validated: now write.
        for n, v in params.items():
            self._values[n].update_inplace(v)
        for m, v in live.items():
            self._values[m].update_inplace(v)
        self._carry.update(moments)  # kept for a later recompile to Adam
        self._opt_steps = ckpt.step if moments or not adam else 0
        self._reset_counters()
        self._micro = 0
        return ckpt.metadata


def build_session(graph: Graph, device: str = "cpu", *, optimizer: str | None = None, backend: str = "native", **kwargs) -> TrainingSession:
    """A training session for ``graph`` (output 0 = the ``[1]`` loss) on ``device`` ("cpu"/"cuda").

    ``optimizer`` ("sgd", "adam", "adamw") compiles that update into the model now; set its
    hyper-parameters with ``set_learning_rate`` / ``set_adam`` / ``set_adamw``. Other keywords:
    ``providers``, ``parameters`` (initial values by name, checked like ``set_parameter``; the rest
    use the default init with ``seed``), ``clip``, ``opset``, ``use_custom_ops``, ``optimize``
    (default True: the e-graph optimizer runs over the forward graph and again over the train step;
    False skips it), ``merge_projections`` (default True, with ``optimize``: products sharing their left
    operand, LLaMA's q/k/v and gate/up, run as one product against their weights concatenated in the
    graph, so the backward has one dX and one dW product per group, :mod:`meganeura_onnx.transforms.merge_projections`;
    False keeps them separate), ``check_finite`` (every ``step()`` raises ``FloatingPointError`` naming the first
    non-finite input, output or parameter update, and then changes nothing).

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
    its key (a hash of the graph's ops, wiring, shapes and attributes, the optimizer, the opset, the
    e-graph optimizer's setting, rules and limits, and the toolchain versions) matches; otherwise it compiles and (atomically) stores the model there."""
    return TrainingSession(graph, device=device, cache_path=cache_path, **kwargs)


def _optimize_forward(graph: Graph, merge_projections: bool = True) -> tuple[Graph, OptimizeReport]:
    return optimize(graph, stage="forward", merge_projections=merge_projections)


def build_session_with_report(graph: Graph, device: str = "cpu", **kwargs) -> tuple[TrainingSession, OptimizeReport | None]:
    """Like :func:`build_session`, also returning what the e-graph optimizer did (``None`` with
    ``optimize=False``)."""
    s = build_session(graph, device, **kwargs)
    return s, s.report
