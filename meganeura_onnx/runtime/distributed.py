"""Data-parallel training over ``torch.distributed``: one process per GPU (or CPU worker), one
ONNX Runtime session per process, gradients averaged between the steps' two halves.

Design (gradient model + update model, the all-reduce in between):

1. The **gradient model** is the native engine's gradients-only train step (forward + backward,
   no optimizer); its gradient outputs and the loss are bound at their offsets in ONE flat device
   buffer ``grads.flat = [grad_1, ..., grad_k, loss]``, so ORT writes them there (no Concat).
2. That buffer is viewed as a ``torch.Tensor`` through DLPack (no copy; ``torch.from_dlpack`` over
   the ``OrtValue``) and averaged in place over the process group: ONE ``all_reduce`` call for all
   gradients and the loss (or a few, with ``bucket_mb``), NCCL on CUDA, gloo on CPU.
3. The **update model** (SGD/Adam/AdamW, optional global-norm clipping: the same update graph as
   the one-model train step) reads its gradients at the same offsets (no Split) and updates
   parameters and moments, which stay on the device and alternate between two buffer sets as in :class:`~.training.TrainingSession`.

Every rank applies the same update to the same averaged gradients from the same start (rank 0's
parameters are broadcast at construction), so the parameters stay identical on every rank; rank 0
alone writes checkpoints. A rank feeds its own shard of the global batch, all shards the same size:
then the average of the per-rank mean losses is the global mean loss and the averaged gradient is
the global batch's gradient.

Trade-offs, against a ``com.meganeura`` all-reduce custom op inside the one-model step: two ORT runs
per step and a host synchronisation around the collective (ORT and torch use different CUDA
streams) and the all-reduce is not overlapped with the backward pass. In
exchange it needs no C++/NCCL build, works identically on CPU (gloo, tested in CI) and CUDA, and
uses torch's well-kept process groups, rendezvous and NCCL communicator. CUDA-graph capture and
mixed precision are not offered on this path.

``torch`` is imported lazily (``pip install 'meganeura-onnx[dist]'``).
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ..export import to_model
from ..graph import Graph
from ..init import default_parameters
from ..ir import DType, TensorType
from ..transforms.optimizer import OptimizerSpec, append_update
from ..transforms.rewrite import optimize as optimize_graph
from . import custom_ops
from .checkpoint import Checkpoint, check_compatible, load_checkpoint, save_checkpoint
from .ort_session import providers_for
from .positions import PositionChecks, position_rules, skip_kernel_position_checks
from .training import DEFAULT_HYPER, compile_program
from .values import NUMPY, host_array

FLAT = "grads.flat"
INSTALL_HINT = (
    "data-parallel training needs PyTorch for torch.distributed: pip install 'meganeura-onnx[dist]' (a CUDA build of torch for NCCL)"
)


def _torch() -> Any:
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return torch


@dataclass(frozen=True)
class DistContext:
    """Where this process sits: global ``rank`` of ``world_size``, ``local_rank`` on its host."""

    rank: int
    world_size: int
    local_rank: int
    backend: str

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes checkpoints, exports and prints."""
        return self.rank == 0


def launched_by_torchrun() -> bool:
    """True inside a process started by ``torchrun`` / ``torch.distributed.run``."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_distributed(device: str = "cpu") -> DistContext:
    """Join the process group described by torchrun's environment (``env://`` rendezvous):
    NCCL for ``device="cuda"`` (this process uses GPU ``LOCAL_RANK``), gloo for ``"cpu"``.
    Outside torchrun: a one-process context without a process group."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"init_distributed: device must be 'cpu' or 'cuda', got {device!r}")
    backend = "nccl" if device == "cuda" else "gloo"
    if not launched_by_torchrun():
        return DistContext(0, 1, 0, backend)
    torch = _torch()
    dist = torch.distributed
    local_rank = int(os.environ["LOCAL_RANK"])
    if device == "cuda":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast (SHARP) buffers
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"init_distributed: LOCAL_RANK {local_rank} but torch sees {torch.cuda.device_count()} CUDA devices")
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        kw = {}
        if device == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:  # torch >= 2.3
            kw["device_id"] = torch.device("cuda", local_rank)  # binds the communicator (and barrier) to this GPU
        dist.init_process_group(backend, **kw)
    return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, dist.get_backend())


def leave_distributed() -> None:
    """Inside torchrun: wait for every rank, then leave the process group. A rank that exits while
    another still talks to it (rank 0 writing a checkpoint), or a gloo group left to interpreter
    shutdown, can end a process with "terminate called" from gloo's threads. Outside torchrun: nothing."""
    if not launched_by_torchrun():
        return
    dist = _torch().distributed
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


@dataclass(frozen=True)
class FlatSlot:
    """Where one parameter's gradient sits in ``grads.flat``."""

    name: str
    shape: tuple[int, ...]
    offset: int
    size: int


def flat_layout(trainable: Sequence[str], shapes: Mapping[str, Sequence[int]]) -> list[FlatSlot]:
    """Where each gradient sits in ``grads.flat`` (``trainable`` order; the loss follows the last
    one). The gradient model's ``grad.<p>`` outputs and the update model's ``grad.<p>`` inputs are
    bound at these offsets of the one buffer: no Concat or Split node. (ORT's CUDA Concat and Split
    build a host table with one int64 per element along the axis, a gigabyte for a 135M-parameter
    flat axis, and copy it to the device on every run.)"""
    slots, offset = [], 0
    for name in trainable:
        size = int(np.prod(shapes[name], dtype=np.int64))
        slots.append(FlatSlot(name, tuple(shapes[name]), offset, size))
        offset += size
    return slots


def update_model(slots: Sequence[FlatSlot], spec: OptimizerSpec, opset: int | None = None) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """The optimizer update alone: inputs the parameters, their moments, ``opt.*`` and the
    gradients ``grad.<p>`` (bound into ``grads.flat``); outputs ``<name>.next``. Returns (model,
    moment names, hyper names)."""
    g = Graph()
    params = {s.name: g.parameter(s.name, list(s.shape)) for s in slots}
    grads = {s.name: g.state_input(f"grad.{s.name}", list(s.shape)) for s in slots}
    up = append_update(g, params, grads, spec)
    names = list(up.next_values)
    g.set_outputs([up.next_values[n] for n in names])
    model, _ = to_model(g, opset=opset, params_as_inputs=True, model_name="meganeura_update_step")
    rename = {f"output_{k}": f"{n}.next" for k, n in enumerate(names)}
    for node in model.graph.node:
        node.input[:] = [rename.get(i, i) for i in node.input]
        node.output[:] = [rename.get(o, o) for o in node.output]
    for out in model.graph.output:
        out.name = rename.get(out.name, out.name)
    moments = [n for n in up.state]
    return model, moments, list(up.hyper)


def nodes_per_provider(sess: ort.InferenceSession) -> dict[str, int]:
    """How many nodes of ``sess`` each execution provider runs (ORT's assignment record; the
    session needs ``session.record_ep_graph_assignment_info``)."""
    counts: dict[str, int] = {}
    for sub in sess.get_provider_graph_assignment_info():
        counts[sub.ep_name] = counts.get(sub.ep_name, 0) + len(sub.get_nodes())
    return counts


def check_on_cuda(sess: ort.InferenceSession, what: str) -> None:
    """Refuse a session that asked for CUDA but got none of it, or whose nodes ORT placed mostly
    on the CPU: each such node copies its device inputs to the host and back on every run."""
    providers = sess.get_providers()
    counts = nodes_per_provider(sess)
    on_cuda, total = counts.get("CUDAExecutionProvider", 0), sum(counts.values())
    if "CUDAExecutionProvider" not in providers or (total and on_cuda * 2 < total):
        raise RuntimeError(
            f"DataParallelSession: the {what!r} session should run on CUDAExecutionProvider, but ORT gives it providers "
            f"{providers} and runs its nodes as {counts}"
        )


class DataParallelSession:
    """A training session whose step averages gradients over the ranks of a process group.

    Build one per process, after torchrun started the processes (``init_distributed`` joins the
    group unless a ``context`` is given; outside torchrun it runs alone, world size 1). ``graph``
    is the per-rank graph: its batch is this rank's shard. The API follows
    :class:`~meganeura_onnx.runtime.training.TrainingSession`: ``set_input``/``set_input_u32``,
    ``set_learning_rate``/``set_adam``/``set_adamw``/``set_grad_clip``, ``step``, ``read_loss``
    (the mean over all ranks), ``read_param``, ``read_grad`` (the averaged gradient of the last
    step), ``save_checkpoint`` (writes on rank 0 only), ``load_checkpoint`` (every rank reads).
    ``bucket_mb`` splits the all-reduce into buckets of that many MB (default: one call).
    ``merge_projections`` as for ``build_session``.
    """

    def __init__(
        self,
        graph: Graph,
        *,
        device: str = "cpu",
        optimizer: str = "adam",
        clip: bool = False,
        parameters: Mapping[str, np.ndarray] | None = None,
        seed: int = 0,
        opset: int | None = None,
        use_custom_ops: bool = True,
        optimize: bool = True,
        context: DistContext | None = None,
        bucket_mb: float | None = None,
        fused_optimizer: bool | None = None,
        merge_projections: bool = True,
    ) -> None:
        names = set(graph.parameters())
        unknown = set(parameters or {}) - names
        if unknown:
            raise ValueError(f"DataParallelSession: parameters {sorted(unknown)} are not in the graph (it has {sorted(names)})")
        if bucket_mb is not None and not bucket_mb > 0:
            raise ValueError(f"DataParallelSession: bucket_mb must be > 0 or None, got {bucket_mb!r}")
        self.context = context or init_distributed(device)
        self._torch = _torch() if self.context.world_size > 1 else None  # one process: no torch needed
        values = default_parameters(graph, seed, skip=set(parameters or {}))
        values.update({k: np.asarray(v, np.float32) for k, v in (parameters or {}).items()})
        forward = optimize_graph(graph, merge_projections=merge_projections)[0] if optimize else graph
        prog = compile_program(forward, None, opset)
        symbolic = {n: shape for n, (shape, _) in prog.inputs.items() if not all(isinstance(d, int) for d in shape)}
        if symbolic:
            raise ValueError(f"DataParallelSession: inputs need static shapes (each rank's shard of the batch), got {symbolic}")
        self._prog, self._opset, self._bucket_mb = prog, opset, bucket_mb
        loss = next(iter(prog.outputs))  # output 0: "output_0" unless the graph names its outputs
        self._slots, self._loss_name = flat_layout(prog.trainable, prog.params), loss
        self._providers, self._device = providers_for(device)
        if self._device == "cuda":  # GPU LOCAL_RANK of this host
            self._providers = [
                (p[0], {**p[1], "device_id": str(self.context.local_rank)}) if isinstance(p, tuple) else p for p in self._providers
            ]
        self._opts = ort.SessionOptions()
        # Which provider runs which node: checked below (a session on the wrong device fails here).
        self._opts.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        # The two sessions run in turn: an idle pool's spinning threads would steal the cores of
        # the other session's run (measured on CPU: a split step cost grad + update + 70%).
        self._opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if self._device == "cpu" and self.context.world_size > 1:  # share the host's cores between its ranks
            per_host = int(os.environ.get("LOCAL_WORLD_SIZE", self.context.world_size))
            self._opts.intra_op_num_threads = max(1, (os.cpu_count() or 1) // per_host)
        self.custom_op_library_path = custom_ops.register(self._opts, self._device) if use_custom_ops else None
        # As Session: U32 inputs read as positions or row indices (token ids: the embedding and its
        # ScatterAdd gradient) are checked on upload, so the kernels do not read them back.
        rules = position_rules(forward)
        self._positions = PositionChecks(rules, list(prog.inputs))
        skip_kernel_position_checks(prog.model, rules)
        self._grad_sess = self._session(prog.model)
        values = self._broadcast({n: values[n] for n in prog.params})
        trainable = set(prog.trainable)
        self._params = [{n: self._value(values[n]) for n in prog.trainable} for _ in range(2)]
        self._frozen = {n: self._value(values[n]) for n in prog.params if n not in trainable}
        self._inputs = {n: self._value(np.zeros(shape, NUMPY[DType(dt)])) for n, (shape, dt) in prog.inputs.items()}
        self._outputs = {
            n: self._value(np.zeros(s, np.float32)) for n, s in prog.outputs.items() if n != loss and not n.startswith("grad.")
        }
        total = self._slots[-1].offset + self._slots[-1].size if self._slots else 0
        self._flat = self._value(np.zeros(total + 1, np.float32))
        self._flat_t = self._torch.from_dlpack(self._flat) if self._torch is not None else None  # no copy: ORT's buffer
        self._grad_bindings = [self._bind_gradients(k) for k in (0, 1)]
        self._moments: list[dict[str, ort.OrtValue]] = [{}, {}]
        self._hyper: dict[str, ort.OrtValue] = {}
        self._hyper_values, self._written = dict(DEFAULT_HYPER), {}
        # As TrainingSession: Adam/AdamW as one multi-tensor AdamUpdate node (CPU or CUDA kernel) by default.
        self._fused = True if fused_optimizer is None else bool(fused_optimizer)
        self._clip, self._spec = clip, None
        self._wanted = self._spec_for(optimizer)
        self._parity, self._opt_steps = 0, 0
        self._accum, self._micro, self._acc = 1, 0, None  # gradient accumulation (set_grad_accumulation)
        self.phase_ms: dict[str, float] | None = None  # {} turns on per-phase timing (see step)
        self._build_update(self._wanted)

    def _session(self, model: onnx.ModelProto) -> ort.InferenceSession:
        sess = ort.InferenceSession(model.SerializeToString(), self._opts, providers=self._providers)
        if self._device == "cuda":
            check_on_cuda(sess, model.graph.name)
        return sess

    def placement(self) -> dict[str, dict[str, int]]:
        """Nodes per execution provider of each session: ``{"gradient": {...}, "update": {...}}``."""
        return {"gradient": nodes_per_provider(self._grad_sess), "update": nodes_per_provider(self._update_sess)}

    # -- buffers ----------------------------------------------------------------------------------
    def _value(self, arr: np.ndarray) -> ort.OrtValue:
        # Always a copy: a CPU OrtValue made from a numpy array shares its memory.
        device_id = self.context.local_rank if self._device == "cuda" else 0
        return ort.OrtValue.ortvalue_from_numpy(np.array(arr, order="C", copy=True), self._device, device_id)

    def _broadcast(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Rank 0's initial parameters on every rank (one broadcast of all of them)."""
        if self.context.world_size == 1 or not values:
            return values
        torch = self._torch
        flat = np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in values.values()])
        t = torch.from_numpy(flat)
        if self._device == "cuda":
            t = t.to(torch.device("cuda", self.context.local_rank))
        torch.distributed.broadcast(t, src=0)
        flat, out, at = t.cpu().numpy(), {}, 0
        for n, v in values.items():
            out[n] = flat[at : at + v.size].reshape(v.shape).copy()
            at += v.size
        return out

    def _bind_gradients(self, k: int) -> ort.IOBinding:
        b = self._grad_sess.io_binding()
        for n, v in {**self._inputs, **self._frozen, **self._params[k]}.items():
            b.bind_ortvalue_input(n, v)
        self._bind_flat(b.bind_output, loss=True)
        for n, v in self._outputs.items():
            b.bind_ortvalue_output(n, v)
        return b

    def _bind_flat(self, bind: Any, loss: bool) -> None:
        """Bind every ``grad.<p>`` (and the loss) at its offset in ``grads.flat``."""
        device_id = self.context.local_rank if self._device == "cuda" else 0
        base = self._flat.data_ptr()
        for s in self._slots:
            bind(f"grad.{s.name}", self._device, device_id, np.float32, list(s.shape), base + 4 * s.offset)
        if loss:
            total = self._slots[-1].offset + self._slots[-1].size if self._slots else 0
            bind(self._loss_name, self._device, device_id, np.float32, [1], base + 4 * total)

    def _build_update(self, spec: OptimizerSpec) -> None:
        """(Re)build the update model for ``spec``; parameters and moments carry over."""
        model, moments, hyper = update_model(self._slots, spec, self._opset)
        sess = self._session(model)
        shapes = {s.name: s.shape for s in self._slots}
        for m in moments:
            for k in (0, 1):
                self._moments[k].setdefault(m, self._value(np.zeros(shapes[m.split(".", 1)[1]], np.float32)))
        for h in hyper:
            self._hyper.setdefault(h, self._value(np.zeros(1, np.float32)))
        bindings = []
        for k in (0, 1):
            b = sess.io_binding()
            for n in self._params[k]:
                b.bind_ortvalue_input(n, self._params[k][n])
                b.bind_ortvalue_output(f"{n}.next", self._params[1 - k][n])
            for m in moments:
                b.bind_ortvalue_input(m, self._moments[k][m])
                b.bind_ortvalue_output(f"{m}.next", self._moments[1 - k][m])
            for h in hyper:
                b.bind_ortvalue_input(h, self._hyper[h])
            self._bind_flat(b.bind_input, loss=False)
            bindings.append(b)
        self._update_sess, self._update_bindings, self._moment_names, self._hyper_names = sess, bindings, moments, hyper
        self._update_model = model
        self._spec, self._written = spec, {}

    # -- data in ----------------------------------------------------------------------------------
    def _write(self, name: str, data: object, dtype: DType, what: str) -> None:
        if name not in self._inputs:
            raise KeyError(f"{what}: no input named {name!r}; the session has {list(self._inputs)}")
        shape, dt = self._prog.inputs[name]
        arr = host_array(name, data, TensorType(tuple(shape), DType(dt)), dtype, what)
        if dtype is DType.U32:
            self._positions.upload(name, arr, what)
        self._inputs[name].update_inplace(arr)

    def set_input(self, name: str, data: object) -> None:
        """Upload this rank's shard of F32 input ``name``."""
        self._write(name, data, DType.F32, "set_input")

    def set_input_u32(self, name: str, data: object) -> None:
        """Upload this rank's shard of U32 input ``name`` (token ids)."""
        self._write(name, data, DType.U32, "set_input_u32")

    def set_parameter(self, name: str, data: object) -> None:
        """Overwrite a parameter on this rank (give every rank the same value)."""
        value = self._param_value(name, "set_parameter")

        value.update_inplace(host_array(name, data, TensorType(tuple(self._prog.params[name])), DType.F32, "set_parameter"))

    # -- optimizer settings (as TrainingSession) ------------------------------------------------
    def _spec_for(self, kind: str) -> OptimizerSpec:
        return OptimizerSpec(kind, self._clip, fused=self._fused and kind != "sgd")

    def set_learning_rate(self, lr: float) -> None:
        """Use SGD with learning rate ``lr``."""
        self._wanted = self._spec_for("sgd")
        self._hyper_values["lr"] = float(lr)

    def set_adam(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8) -> None:
        """Use Adam (PyTorch's formula)."""
        self._wanted = self._spec_for("adam")
        self._hyper_values.update(lr=float(lr), beta1=float(beta1), beta2=float(beta2), eps=float(epsilon))

    def set_adamw(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, weight_decay: float = 0.01) -> None:
        """Use AdamW (``torch.optim.AdamW``'s formula)."""
        self._wanted = self._spec_for("adamw")
        self._hyper_values.update(
            lr=float(lr), beta1=float(beta1), beta2=float(beta2), eps=float(epsilon), weight_decay=float(weight_decay)
        )

    def set_grad_clip(self, max_norm: float | None) -> None:
        """Clip the global norm of the averaged gradient to ``max_norm`` (None: no clipping)."""
        self._clip = max_norm is not None
        if max_norm is not None:
            self._hyper_values["max_grad_norm"] = float(max_norm)
        self._wanted = self._spec_for(self._wanted.kind)

    def set_grad_accumulation(self, steps: int) -> None:
        """Sum the gradients of ``steps`` consecutive ``step()`` calls (micro-batches) on each rank,
        then average them over the micro-batches and the ranks in ONE all-reduce and update once,
        on the last of them. ``optimizer_step`` counts updates; ``read_loss`` after an update is the
        mean over its micro-batches and ranks (after another micro-batch: that one's, this rank's)."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"set_grad_accumulation: steps must be a positive int, got {steps!r}")
        if steps > 1 and self._flat_view() is None:
            raise ImportError(f"set_grad_accumulation on CUDA: {INSTALL_HINT}")
        self._accum, self._micro = steps, 0

    def _flat_view(self) -> Any:
        """``grads.flat`` as an in-place-writable array: torch over DLPack, or numpy on CPU."""
        if self._flat_t is None and self._device == "cpu":
            self._flat_t = self._flat.numpy()  # a CPU OrtValue's numpy() is a view of its buffer
        elif self._flat_t is None:
            try:
                self._torch = _torch()
            except ImportError:
                return None
            self._flat_t = self._torch.from_dlpack(self._flat)
        return self._flat_t

    @property
    def optimizer_step(self) -> int:
        """Optimizer updates applied so far (Adam's t); saved in checkpoints."""
        return self._opt_steps

    # -- running ----------------------------------------------------------------------------------
    def step(self) -> None:
        """Gradients of this rank's shard, averaged over all ranks, then the update (on every rank)."""
        if self._wanted != self._spec:
            self._build_update(self._wanted)
        if self._accum > 1 and not self._accumulate():
            return
        self._opt_steps += 1
        t0 = time.perf_counter()
        values = {**self._hyper_values, "step": float(self._opt_steps)}
        for h in self._hyper_names:
            if self._written.get(h) != values[h[4:]]:
                self._hyper[h].update_inplace(np.array([values[h[4:]]], np.float32))
                self._written[h] = values[h[4:]]
        k = self._parity
        t1 = time.perf_counter()
        if self._accum == 1:
            self._grad_sess.run_with_iobinding(self._grad_bindings[k])  # returns after ORT's stream finished
        t2 = time.perf_counter()
        self._average_gradients(self._grad_bindings[k])
        t3 = time.perf_counter()
        self._update_sess.run_with_iobinding(self._update_bindings[k])
        t4 = time.perf_counter()
        self._parity ^= 1
        if self.phase_ms is not None:  # summed over the steps since phase_ms was set to {}
            for name, ms in (("hyper_upload", t1 - t0), ("gradient_run", t2 - t1), ("all_reduce", t3 - t2), ("update_run", t4 - t3)):
                self.phase_ms[name] = self.phase_ms.get(name, 0.0) + ms * 1e3

    def _accumulate(self) -> bool:
        """One micro-batch: its gradients (and loss) into the running sum. True on the window's
        last micro-batch, with ``grads.flat`` then holding the window's mean."""
        self._grad_sess.run_with_iobinding(self._grad_bindings[self._parity])
        flat = self._flat_view()
        if self._device == "cuda":
            self._grad_bindings[self._parity].synchronize_outputs()
        if self._acc is None or len(self._acc) != len(flat):
            self._acc = flat.clone() if hasattr(flat, "clone") else flat.copy()
        elif self._micro == 0:
            self._acc[:] = flat
        else:
            self._acc += flat
        self._micro += 1
        last = self._micro == self._accum
        if last:
            flat[:] = self._acc
            flat *= 1.0 / self._accum
            self._micro = 0
        if self._device == "cuda":
            self._torch.cuda.current_stream().synchronize()  # before ORT writes grads.flat again
        return last

    def _average_gradients(self, binding: ort.IOBinding) -> None:
        if self.context.world_size == 1:
            return
        torch, flat = self._torch, self._flat_t
        if self._device == "cuda":
            binding.synchronize_outputs()  # ORT's stream finished writing grads.flat
        if self._bucket_mb is None:
            torch.distributed.all_reduce(flat)
        else:
            size = max(1, int(self._bucket_mb * 2**20) // 4)
            works = [torch.distributed.all_reduce(flat[i : i + size], async_op=True) for i in range(0, flat.numel(), size)]
            for w in works:
                w.wait()
        flat.mul_(1.0 / self.context.world_size)  # gloo has no AVG: sum, then scale
        if self._device == "cuda":
            torch.cuda.current_stream().synchronize()  # the update runs on ORT's stream, not torch's

    # -- data out ---------------------------------------------------------------------------------
    def _flat_host(self) -> np.ndarray:
        return np.array(self._flat.numpy() if self._device == "cpu" else self._flat_view().cpu().numpy(), copy=True)

    def read_loss(self) -> float:
        """The last step's loss, averaged over the ranks (the global batch's mean loss)."""
        if self._device == "cuda" and self._flat_t is not None:
            return float(self._flat_t[-1].item())
        return float(self._flat.numpy()[-1])

    def read_grad(self, name: str) -> np.ndarray:
        """The gradient of ``name`` averaged over the ranks, from the last step."""
        slot = next((s for s in self._slots if s.name == name), None)
        if slot is None:
            why = self._prog.no_grad.get(name)
            raise KeyError(
                f"read_grad: {name!r} "
                + (f"gets no gradient: {why}" if why else f"is not a parameter; the session has {self.parameter_names()}")
            )
        return self._flat_host()[slot.offset : slot.offset + slot.size].reshape(slot.shape).copy()

    def num_outputs(self) -> int:
        return 1 + len(self._outputs)

    def read_output_by_index(self, index: int) -> np.ndarray:
        """Output 0: the averaged loss ``[1]``; others: this rank's value of the graph's output."""
        if not isinstance(index, int) or not 0 <= index < self.num_outputs():
            raise IndexError(f"read_output_by_index: index {index!r} out of range; the session has {self.num_outputs()} outputs")
        if index == 0:
            return np.array([self.read_loss()], np.float32)
        return np.array(self._outputs[list(self._outputs)[index - 1]].numpy(), copy=True)

    def _param_value(self, name: str, what: str) -> ort.OrtValue:
        if name in self._frozen:
            return self._frozen[name]
        if name not in self._params[self._parity]:
            raise KeyError(f"{what}: no parameter named {name!r}; the session has {self.parameter_names()}")
        return self._params[self._parity][name]

    def read_param(self, name: str) -> np.ndarray:
        """Current value of a parameter (identical on every rank)."""
        return np.array(self._param_value(name, "read_param").numpy(), copy=True)

    def parameter_names(self) -> list[str]:
        return list(self._prog.params)

    def onnx_models(self) -> tuple[onnx.ModelProto, onnx.ModelProto]:
        """The (gradient, update) ONNX models this session runs."""
        return self._prog.model, self._update_model

    # -- checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self, path: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> bool:
        """Rank 0 writes parameters, moments and the step count (atomically); other ranks return
        at once (their state is identical). Returns whether this rank wrote."""
        if not self.context.is_main:
            return False
        moments = {m: self._moments[self._parity][m].numpy().copy() for m in self._moment_names}
        ckpt = Checkpoint(
            {n: self.read_param(n) for n in self._prog.params},
            {m[7:]: v for m, v in moments.items() if m.startswith("adam_m.")},
            {m[7:]: v for m, v in moments.items() if m.startswith("adam_v.")},
            self._opt_steps,
            {**(metadata or {}), "optimizer": self._spec.kind if self._spec else "none", "world_size": str(self.context.world_size)},
        )
        save_checkpoint(path, ckpt)
        return True

    def load_checkpoint(self, path: str | os.PathLike) -> dict[str, str]:
        """Every rank restores parameters, moments and the step count from ``path`` (a file all
        ranks can read). Returns the file's other metadata."""
        ckpt = load_checkpoint(path)
        check_compatible(ckpt, {n: tuple(s) for n, s in self._prog.params.items()}, f"load_checkpoint({str(Path(path))!r})")
        for n, v in ckpt.params.items():
            self.set_parameter(n, v)
        saved = {f"adam_m.{n}": v for n, v in ckpt.adam_m.items()} | {f"adam_v.{n}": v for n, v in ckpt.adam_v.items()}
        for m, value in self._moments[self._parity].items():
            value.update_inplace(np.ascontiguousarray(saved.get(m, np.zeros(value.shape(), np.float32)), np.float32))
        self._opt_steps = ckpt.step
        return ckpt.metadata
