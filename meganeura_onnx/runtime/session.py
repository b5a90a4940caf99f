"""``Session``: a Graph compiled to an ONNX Runtime session (Meganeura's Session API in Python).

Every buffer the session owns is an ``OrtValue`` on the session's device, bound once with
IOBinding. State that lives across ``step()`` calls (KV caches written by ``cache_write``, and in
training the parameters and optimizer state) is a graph input paired with a graph output of the
same shape: two buffers are swapped after each step, so nothing crosses to the host unless read.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from ..ir import DType, TensorType
from ..ops import OPS
from .half import HalfBuffers, is_half
from .host_block import huge_page_copies
from .ort_session import check_capturable, open_ort_session, providers_for
from .plan import Buffer, ExecutionPlan, MemorySummary
from .positions import PositionChecks, PositionRule, skip_kernel_position_checks
from .sizes import SymbolSizes
from .values import NUMPY, first_non_finite, host_array, parameter_array


class Session:
    """A compiled model with device-resident buffers. Build it with :func:`build_inference_session`
    (or ``build_session`` for training) rather than directly."""

    def __init__(
        self,
        model: onnx.ModelProto,
        *,
        inputs: Mapping[str, TensorType],
        persistent: Mapping[str, np.ndarray],
        state: Mapping[str, tuple[str, np.ndarray]],
        outputs: Sequence[str],
        output_types: Mapping[str, TensorType],
        parameter_names: Sequence[str] = (),
        device: str = "cpu",
        providers: Sequence | None = None,
        use_custom_ops: bool = True,
        inplace_state: Sequence[str] = (),
        inplace_kernels: Collection[tuple[str, str]] = (),
        cuda_graph: bool = False,
        position_rules: Mapping[str, Sequence[PositionRule]] | None = None,
        check_finite: bool = False,
        half_storage: Mapping[str, str] | None = None,
        precision: str = "fp32",
        precisions: Sequence[tuple[str, str, str, str]] = (),
        session_config: Mapping[str, str] | None = None,
        session_options: Mapping[str, object] | None = None,
    ) -> None:
        self.check_finite = bool(check_finite)
        # Buffers stored in float16/bfloat16 (name -> type): written and read as float32 through
        # a Cast on the device (runtime/half.py).
        self._half = dict(half_storage or {})
        self._precision, self._precisions = precision, list(precisions)
        if cuda_graph and device != "cuda":
            raise ValueError(f"cuda_graph=True needs device='cuda', got device={device!r}")
        self._providers, self._device = providers_for(device, providers, cuda_graph, tf32=precision == "tf32")
        kinds = set(self._half.values())
        self._halfbuf = HalfBuffers(kinds.pop(), self._device, self._providers) if kinds else None
        # U32 inputs read as positions (runtime/positions.py): checked here, on upload against the
        # static shapes' limit (set_input_u32: input name, value and limit) and before each step with
        # symbolic shapes against that step's; so the kernels need not read them back (a stream sync
        # per op on CUDA, and none is allowed inside a captured CUDA graph): check_positions=0.
        rules = dict(position_rules or {})
        self._positions = PositionChecks(rules, [n for n, ty in inputs.items() if ty.is_static()])
        skip_kernel_position_checks(model, rules)
        self._model = model
        self._ort, self.custom_op_library_path = open_ort_session(
            model, self._providers, self._device, precision, cuda_graph, use_custom_ops, session_config, session_options
        )
        self._cuda_graph = bool(cuda_graph)
        if cuda_graph:
            check_capturable(self._ort)
        self._inputs = dict(inputs)
        self._parameter_names = list(parameter_names)
        self._pairs = {name: out for name, (out, _) in state.items()}
        self._aliased = self._aliased_state(inplace_state, inplace_kernels)
        # Inputs with symbolic dims get their buffer at set_input; outputs whose shape depends on
        # them are (re)allocated when a step runs with sizes that differ from the last ones.
        symbolic = {name: ty for name, ty in inputs.items() if not ty.is_static()}
        self._sizes = SymbolSizes(symbolic) if symbolic else None
        self._bound_sizes: dict[str, int] | None = None
        self._rebind = False
        if symbolic and cuda_graph:
            raise ValueError(f"cuda_graph=True replays fixed buffer shapes; inputs {sorted(symbolic)} have symbolic dimensions")
        self._output_names = list(outputs)
        # Outputs that are also state (a session's ``feedback``): after a step, the input's buffer.
        self._fed_back = {out: name for name, out in self._pairs.items() if out in self._output_names}
        self._allocate(inputs, symbolic, persistent, state, output_types)
        # set_input's fast path (a training loop calls it per step): static float32 inputs stored as
        # float32 -> their shape. A C-contiguous float32 array of exactly that shape passes every
        # check of host_array unchanged, so it is copied straight into the buffer.
        self._plain_f32 = {n: ty.shape for n, ty in inputs.items() if ty.is_static() and ty.dtype is DType.F32 and n not in self._half}
        self._bind()
        self._run_options, self._queued_options = _run_options(cuda_graph)  # (CUDA graphs per binding)
        self._runs = [0, 0]  # runs per binding: ORT captures a binding's graph on a run after the first
        self._share_plans: dict[tuple[int, bool, bool], tuple[weakref.ref, list[str]]] = {}

    def _aliased_state(self, inplace_state: Sequence[str], inplace_kernels: Collection[tuple[str, str]]) -> set[str]:
        """The state inputs bound as ONE buffer for input and output. With our in-place CacheWrite
        kernel running, a KV cache is such a buffer (a decode step writes one row, never copies the
        cache); otherwise two buffers swap. ``inplace_kernels``: more (domain, op) kernels that may
        write their outputs over their inputs (training: AdamUpdate, when the caller checked it runs
        after every other reader)."""
        inplace_ops = {
            (d.custom.domain, d.custom.name) for d in OPS.values() if d.custom and (d.custom.inplace_input or d.custom.inplace_pairs)
        }
        inplace_ops |= set(inplace_kernels)
        inplace_kernel = any(
            (n.domain, n.op_type) in inplace_ops for sub in self._ort.get_provider_graph_assignment_info() for n in sub.get_nodes()
        )
        return {n for n in inplace_state if n in self._pairs} if inplace_kernel else set()

    def _allocate(
        self,
        inputs: Mapping[str, TensorType],
        symbolic: Mapping[str, TensorType],
        persistent: Mapping[str, np.ndarray],
        state: Mapping[str, tuple[str, np.ndarray]],
        output_types: Mapping[str, TensorType],
    ) -> None:
        """Device buffers of the static inputs, parameters, constants, state (and its spares) and
        static outputs; symbolic inputs only get their type here."""
        self._types: dict[str, TensorType] = {}
        self._values: dict[str, ort.OrtValue] = {}
        self._kinds: dict[str, str] = {}
        self._spare: dict[str, ort.OrtValue] = {}
        for name, ty in inputs.items():
            if name in symbolic:
                self._types[name], self._kinds[name] = ty, "input"
            else:
                self._alloc(name, ty, "input", np.zeros(ty.shape, NUMPY[ty.dtype]))
        # On the CPU the float32 parameters and constants share one block advised for huge pages (host_block).
        packed = {n: np.asarray(v, np.float32) for n, v in persistent.items() if n not in self._half} if self._device == "cpu" else {}
        packed = huge_page_copies(packed) if packed else {}
        for name, value in persistent.items():
            kind = "parameter" if name in self._parameter_names else "constant"
            if name in packed:
                self._types[name], self._kinds[name] = TensorType(value.shape), kind
                self._values[name] = ort.OrtValue.ortvalue_from_numpy(packed[name], self._device, 0)
            else:
                self._alloc(name, TensorType(value.shape), kind, value)
        for name, (_out, value) in state.items():
            ty = TensorType(value.shape, DType.U32 if value.dtype == np.uint32 else DType.F32)
            kind = "parameter" if name in self._parameter_names else "state"
            self._alloc(name, ty, kind, value)
            self._spare[name] = self._values[name] if name in self._aliased else self._new_value(name, np.zeros(value.shape, value.dtype))
        self._outputs: dict[str, ort.OrtValue] = {}
        for name, ty in output_types.items():
            if name not in self._pairs.values() and ty.is_static():
                self._outputs[name] = self._new_value(name, np.zeros(ty.shape, NUMPY[ty.dtype]))
        self._output_types = dict(output_types)

    # -- buffers ----------------------------------------------------------------------------------
    def _device_value(self, arr: np.ndarray) -> ort.OrtValue:
        # A CPU OrtValue made from a numpy array shares its memory: copy, or steps would write into
        # the caller's arrays (e.g. the ``parameters=`` given to build_session).
        return ort.OrtValue.ortvalue_from_numpy(np.array(arr, order="C", copy=True), self._device, 0)

    def _new_value(self, name: str, arr: np.ndarray) -> ort.OrtValue:
        """A device buffer for ``name`` holding ``arr``, in the half type when ``name`` is stored so."""
        return self._halfbuf.new(arr) if name in self._half else self._device_value(arr)

    def _update(self, name: str, arr: np.ndarray) -> None:
        """Overwrite buffer ``name`` in place with the float32/uint32 ``arr``."""
        if name in self._half:
            self._halfbuf.write(self._values[name], arr)
        else:
            self._values[name].update_inplace(arr)

    def _alloc(self, name: str, ty: TensorType, kind: str, value: np.ndarray) -> None:
        self._types[name] = ty
        self._kinds[name] = kind
        self._values[name] = self._new_value(name, np.asarray(value, NUMPY[ty.dtype]).reshape(ty.shape))

    def _bind(self) -> None:
        """Build two IOBindings once: [0] reads the current state buffers and writes the spares,
        [1] the other way round. ``step()`` alternates them, so no buffer is re-bound per step."""
        self._bindings = []
        for flip in (False, True):
            binding = self._ort.io_binding()
            for name, value in self._values.items():
                binding.bind_ortvalue_input(name, self._spare[name] if flip and name in self._pairs else value)
            for name, value in self._outputs.items():
                binding.bind_ortvalue_output(name, value)
            for name, out in self._pairs.items():
                binding.bind_ortvalue_output(out, self._values[name] if flip else self._spare[name])
            self._bindings.append(binding)
        self._parity = 0
        self._swapped = [n for n in self._pairs if n not in self._aliased]

    def _write(self, name: str, data: object, dtype: DType, what: str) -> None:
        if self._sizes is not None and name in self._sizes.types:
            return self._write_symbolic(name, data, dtype, what)
        arr = host_array(name, data, self._types[name], dtype, what)
        if dtype is DType.U32:
            self._positions.upload(name, arr, what)
        self._update(name, arr)

    def _write_symbolic(self, name: str, data: object, dtype: DType, what: str) -> None:
        ty, found = self._types[name], {}
        if ty.dtype is dtype:  # (a dtype mismatch is reported by host_array below)
            shape, found = self._sizes.shape_of(name, data, what)
            ty = TensorType(shape, dtype)
        arr = host_array(name, data, ty, dtype, what)
        if dtype is DType.U32:
            self._positions.upload(name, arr, what)
        self._sizes.commit(name, found)
        held = self._values.get(name)
        if held is not None and tuple(held.shape()) == arr.shape:
            held.update_inplace(arr)
        else:  # a new size: a new device buffer, bound before the next step
            self._values[name] = self._device_value(arr)
            self._rebind = True

    def _prepare_sizes(self) -> None:
        """Before a step with symbolic inputs: check their sizes agree and, when they changed since
        the last step, allocate outputs of the new shapes and rebuild the IOBindings."""
        sizes = self._sizes.resolve()
        if sizes != self._bound_sizes:
            for name, ty in self._output_types.items():
                if name in self._pairs.values() or ty.is_static():
                    continue
                shape = ty.resolve(sizes).shape
                if name not in self._outputs or tuple(self._outputs[name].shape()) != shape:
                    self._outputs[name] = self._new_value(name, np.zeros(shape, NUMPY[ty.dtype]))
            self._bound_sizes, self._rebind = sizes, True
        if self._rebind:
            self._bind()
            self._rebind = False

    def _type_of(self, name: str) -> TensorType:
        """The concrete type of the buffer held under ``name`` (symbolic dims at their current sizes)."""
        ty = self._types.get(name) or self._output_types[name]
        value = self._values[name] if name in self._values else self._outputs.get(name)
        return ty if ty.is_static() or value is None else TensorType(tuple(value.shape()), ty.dtype)

    def _names_of(self, kinds: tuple[str, ...]) -> list[str]:
        return [n for n, k in self._kinds.items() if k in kinds]

    def _check_name(self, name: str, kinds: tuple[str, ...], what: str) -> None:
        if name not in self._kinds or self._kinds[name] not in kinds:
            raise KeyError(f"{what}: no {'/'.join(kinds)} named {name!r}; the session has {self._names_of(kinds)}")

    # -- data in ----------------------------------------------------------------------------------
    def set_input(self, name: str, data: object) -> None:
        """Upload F32 data into the named input (flat or shaped; the element count must match).

        A KV-cache input (one written by ``cache_write``) can be set too, e.g. to reset it.
        """
        shape = self._plain_f32.get(name)
        if shape is not None and type(data) is np.ndarray and data.dtype == np.float32 and data.shape == shape and data.flags.c_contiguous:
            self._values[name].update_inplace(data)
            return
        self._check_name(name, ("input", "state"), "set_input")
        self._write(name, data, DType.F32, "set_input")

    def set_input_u32(self, name: str, data: object) -> None:
        """Upload U32 data (token ids, positions) into the named ``input_u32``."""
        self._check_name(name, ("input", "state"), "set_input_u32")
        self._write(name, data, DType.U32, "set_input_u32")

    def set_parameter(self, name: str, data: object) -> None:
        """Overwrite a parameter (e.g. load pretrained weights): flat or of its exact shape, finite."""
        self._check_name(name, ("parameter",), "set_parameter")
        self._update(name, parameter_array(name, data, self._types[name], "set_parameter"))

    # -- running ----------------------------------------------------------------------------------
    def step(self) -> None:
        """Run the model once with the current inputs; state buffers are swapped afterwards.

        A step that fails (an ORT error, or a non-finite value found with ``check_finite=True``)
        swaps nothing: parameters and optimizer state keep their values (the results went to the
        spare buffers). Only KV caches updated in place by the CacheWrite kernel may already hold
        the new rows.

        With symbolic dimensions, a step whose sizes differ from the previous step's allocates
        output buffers of the new shapes and rebuilds the two IOBindings (a device allocation per
        output); steps at unchanged sizes re-bind nothing.
        """
        if self._sizes is not None:
            self._prepare_sizes()
            self._sizes.end_step()
            self._positions.before_step(self._bound_sizes)  # positions vs this step's sizes (a prefill's row count)
        if self.check_finite:
            self._check_finite(self._names_of(("input",)), "input", self._values)
        self._run()
        if self.check_finite:
            self._check_finite(self._output_names, "output", self._outputs)
            self._check_finite(self._finite_checked_state(), "update of", self._spare)
        if not self._accept_step():  # (a training step with an fp16 overflow): nothing swapped
            return
        self._swap()

    def _swap(self) -> None:
        """After an accepted step: the swapped state's new values become current (the other binding)."""
        for name in self._swapped:
            self._values[name], self._spare[name] = self._spare[name], self._values[name]
        self._parity ^= 1 if self._swapped else 0

    def steps(self, count: int) -> None:
        """Run ``count`` steps back to back, waiting only for the last one (for steps that need no uploads
        in between: ``feedback`` makes their inputs, e.g. greedy decoding). On CUDA the host queues a step
        while the device runs the previous one; elsewhere (and with ``check_finite``, symbolic sizes, or
        a class with its own ``step``, e.g. training's) it is ``count`` calls of :meth:`step`."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"steps: count must be a positive int, got {count!r}")
        plain = type(self).step is Session.step and type(self)._accept_step is Session._accept_step
        done = 0
        while done < count and (not plain or self._device != "cuda" or self.check_finite or self._sizes is not None or self._capturing()):
            self.step()
            done += 1
        if done == count:
            return
        self._bindings[self._parity].synchronize_inputs()  # host writes before the first step
        for _ in range(count - done):
            parity = self._parity
            self._ort.run_with_iobinding(self._bindings[parity], self._queued_options[parity])
            self._runs[parity] += 1
            self._swap()
        self._bindings[self._parity].synchronize_outputs()

    def _capturing(self) -> bool:
        """Whether a step would still capture a CUDA graph (ORT's first run of each binding)."""
        return self._cuda_graph and min(self._runs if self._swapped else self._runs[:1]) == 0

    def _run(self) -> None:
        parity = self._parity
        binding = self._bindings[parity]
        if self._device == "cuda":
            # Host writes (update_inplace) copy from pageable memory on CUDA's default stream and may
            # return before the data landed; ORT computes on its own non-blocking stream. Wait for
            # them (a device sync, microseconds once the previous step finished) before the run.
            binding.synchronize_inputs()
        # ORT's first run of a CUDA graph executes the model several times inside the one call (regular
        # runs, then capture and replay). Swapped state makes that idempotent; parameters and moments
        # that the Adam kernel updates in place would get the update once per execution: keep their
        # values, put them back afterwards and replay the captured graph once (the first step only).
        kept = {}
        if self._cuda_graph and self._runs[parity] == 0:
            kept = {n: np.array(self._values[n].numpy(), copy=True) for n in self._aliased if self._kinds[n] != "state"}
        try:
            self._ort.run_with_iobinding(binding, self._run_options[parity])
            if kept:
                for name, value in kept.items():
                    self._values[name].update_inplace(value)
                binding.synchronize_inputs()
                self._ort.run_with_iobinding(binding, self._run_options[parity])
        except Exception as e:
            if self._cuda_graph and self._runs[parity] <= 1:  # the run that captures (or warms up for) the graph
                raise RuntimeError(
                    f"step (cuda_graph=True): ONNX Runtime failed to capture the step as a CUDA graph "
                    f"(a kernel that synchronises or copies to the host?): {e}; build the session without cuda_graph"
                ) from e
            raise
        self._runs[parity] += 1

    def _accept_step(self) -> bool:
        """Whether the step just run is kept (its new state swapped in); training sessions with
        dynamic loss scaling reject the steps whose gradients overflowed."""
        return True

    def _finite_checked_state(self) -> list[str]:
        return [n for n in self._pairs if self._kinds[n] in ("parameter", "optimizer") and n not in self._aliased]

    def _check_finite(self, names: Sequence[str], what: str, values: Mapping[str, ort.OrtValue]) -> None:
        for name in names:
            bad = first_non_finite(self._read(values[name], None, name))
            if bad is not None:
                raise FloatingPointError(f"step (check_finite): {what} {name!r} is not finite: {bad}; nothing was updated")

    @property
    def position_limits(self) -> dict[str, int]:
        """U32 inputs used as positions or row indices (KV-cache positions, token ids) -> the largest
        value ``set_input_u32`` accepts."""
        return dict(self._positions.limits)

    @property
    def inplace_state(self) -> set[str]:
        """State buffers bound as input AND output (updated in place by the CacheWrite kernel)."""
        return set(self._aliased)

    def end_profiling(self) -> str:
        """Stop ONNX Runtime's profiling of this session and return its JSON trace file (one event per
        node run, with its op type and duration); the session must have been built with
        ``session_options={"enable_profiling": True}``."""
        if not self._ort.get_session_options().enable_profiling:
            raise RuntimeError("end_profiling: the session was built without session_options={'enable_profiling': True}")
        return self._ort.end_profiling()

    def wait(self) -> None:
        """Block until the last step finished. ``step()`` is synchronous under ORT, so this returns
        at once; it exists so Meganeura programs port unchanged."""

    def share_buffers(self, other: Session, *, parameters: bool = True, state: bool = True) -> list[str]:
        """Bind ``other``'s device buffers for the parameters and/or state (KV caches) that both
        sessions have under the same name and type; no data is copied. Returns the names shared.

        Two graphs of one model (e.g. a prefill graph and a one-token decode graph) then use one
        copy of the weights, and a decode session continues from the caches the prefill session
        just wrote. Shared parameters stay shared (``set_parameter`` on either updates both). State
        buffers are swapped after every step, so call this again after switching sessions.
        """
        if self._device != other._device:
            raise ValueError(f"share_buffers: sessions are on different devices ({self._device} and {other._device})")
        shared = self._shareable(other, parameters, state)
        before = [(self._values[n], self._spare.get(n)) for n in shared]
        for name in shared:
            self._values[name] = other._values[name]
            if name in self._pairs:
                if name in self._aliased:  # updated in place: one buffer is input and output
                    self._spare[name] = self._values[name]
                elif other._spare[name] is not other._values[name]:
                    self._spare[name] = other._spare[name]
                elif self._spare[name] is self._values[name]:  # other works in place, this session swaps
                    self._spare[name] = self._new_value(name, np.zeros(self._types[name].shape, NUMPY[self._types[name].dtype]))
        # Rebinding all inputs costs ~1.5 ms of Python per call on a 30-layer model: skip it when
        # every buffer is already the one bound (caches updated in place, weights shared before).
        if any(v is not self._values[n] or sp is not self._spare.get(n) for n, (v, sp) in zip(shared, before, strict=True)):
            self._bind()
        return list(shared)

    def _shareable(self, other: Session, parameters: bool, state: bool) -> list[str]:
        """The names :meth:`share_buffers` binds from ``other``: same kind, type and storage. Worked
        out once per session pair (kinds and types of parameters and state never change), because a
        prefill shares the caches twice per call and comparing all ~340 buffers of a 30-layer model
        each time cost ~0.6-0.9 ms of Python per call."""
        key = (id(other), parameters, state)
        known = self._share_plans.get(key)
        if known is not None and known[0]() is other:
            return known[1]
        kinds = ("parameter",) * parameters + ("state",) * state
        names = [
            name
            for name, kind in self._kinds.items()
            if kind in kinds
            and other._kinds.get(name) == kind
            and other._types[name] == self._types[name]
            and other._half.get(name) == self._half.get(name)
        ]
        self._share_plans[key] = (weakref.ref(other), names)
        return names

    # -- data out ---------------------------------------------------------------------------------
    def num_outputs(self) -> int:
        return len(self._output_names)

    def output_names(self) -> list[str]:
        """The graph's output names in order (``set_outputs({"loss": ..., "logits": ...})``; ``output_<k>`` for a list)."""
        return list(self._output_names)

    def read_output(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """The output called ``name`` as a numpy array (or copied into ``out``)."""
        if name not in self._output_names:
            raise KeyError(f"read_output: no output named {name!r}; the session has {self._output_names}")
        return self._read_output(name, out, "read_output", f"output {name!r}")

    def read_output_by_index(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        """Output ``index`` (0 = primary) as a numpy array, or copied into ``out`` when given."""
        if not isinstance(index, int) or not 0 <= index < len(self._output_names):
            raise IndexError(f"read_output_by_index: index {index!r} out of range; the session has {len(self._output_names)} outputs")
        return self._read_output(self._output_names[index], out, "read_output_by_index", f"output {index}")

    def _read_output(self, name: str, out: np.ndarray | None, what: str, label: str) -> np.ndarray:
        if name in self._fed_back:  # swapped in after the step: it is now its input's value
            return self._read(self._values[self._fed_back[name]], out, label)
        if name not in self._outputs:  # a symbolic shape: the buffer comes with the first step
            raise RuntimeError(f"{what}: {label} has symbolic shape {list(self._output_types[name].shape)}; run step() first")
        return self._read(self._outputs[name], out, label)

    def read_loss(self) -> float:
        """Output 0 as a float when it is a scalar ``[1]`` (a loss), else 0.0 as in Meganeura."""
        if not self._output_names or self._output_types[self._output_names[0]].elements() != 1:
            return 0.0
        return float(self.read_output_by_index(0).reshape(-1)[0])

    def read_param(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Current value of a parameter (copied from the device)."""
        self._check_name(name, ("parameter",), "read_param")
        return self._read(self._values[name], out, f"parameter {name!r}")

    get_parameter = read_param

    def read_state(self, name: str) -> np.ndarray:
        """Current value of a state buffer (a KV cache) by its input name."""
        self._check_name(name, ("state",), "read_state")
        return self._read(self._values[name], None, f"state {name!r}")

    def _read(self, value: ort.OrtValue, out: np.ndarray | None, what: str) -> np.ndarray:
        # On CPU OrtValue.numpy() is a view of the device buffer: the next step (or the session's
        # end) would change what the caller holds, so hand out a copy. Half buffers come back as float32.
        arr = self._halfbuf.read(value) if is_half(value) else np.array(value.numpy(), copy=True)
        if out is None:
            return arr
        if not isinstance(out, np.ndarray):
            raise TypeError(f"{what}: out must be a numpy array, got {type(out).__name__}")
        if not out.flags.writeable:
            raise ValueError(f"{what}: out is read-only")
        if out.size != arr.size or (out.ndim > 1 and out.shape != arr.shape):
            raise ValueError(
                f"{what} has shape {list(arr.shape)} ({arr.size} elements); out has shape {list(out.shape)} (give that shape or a flat array)"
            )
        if not np.can_cast(arr.dtype, out.dtype, casting="same_kind"):
            raise TypeError(f"{what} is {arr.dtype}; out is {out.dtype}")
        # Any memory layout (Fortran order, strided views): fill element by element in C order.
        out[...] = arr.reshape(out.shape)
        return out

    # -- inspection -------------------------------------------------------------------------------
    def parameter_names(self) -> list[str]:
        """Names of the session's parameters, in graph order."""
        return [n for n in self._parameter_names if self._kinds.get(n) == "parameter"]

    def parameter_shape(self, name: str) -> tuple[int, ...]:
        """Shape of a parameter by name."""
        self._check_name(name, ("parameter",), "parameter_shape")
        return self._types[name].shape

    def buffers(self) -> list[Buffer]:
        """Every device buffer the session holds (symbolic shapes at their current sizes)."""
        bufs = [Buffer(n, self._type_of(n), self._kinds[n], self._half.get(n, "float32")) for n in self._types if n in self._values]
        bufs += [
            Buffer(f"{n} (spare)", self._types[n], self._kinds[n], self._half.get(n, "float32"))
            for n in self._spare
            if n not in self._aliased
        ]
        bufs += [Buffer(n, self._type_of(n), "output") for n in self._outputs]
        return bufs

    def plan(self) -> ExecutionPlan:
        placement = [
            (n.name, n.domain, n.op_type, sub.ep_name) for sub in self._ort.get_provider_graph_assignment_info() for n in sub.get_nodes()
        ]
        nodes = [(n.name, n.domain, n.op_type) for n in self._model.graph.node]
        return ExecutionPlan(
            self._ort.get_providers(), nodes, self.buffers(), placement, self.custom_op_library_path, self._precision, self._precisions
        )

    def memory_summary(self) -> MemorySummary:
        sizes = [b.size_bytes for b in self.buffers()]
        adam = sum(b.size_bytes for b in self.buffers() if b.kind == "optimizer")
        return MemorySummary(sum(sizes), adam, len(sizes), max(sizes, default=0))

    def onnx_model(self) -> onnx.ModelProto:
        """The ONNX model this session runs (its position ops marked ``check_positions=0`` where the
        Session validates the positions itself: :mod:`meganeura_onnx.runtime.positions`)."""
        return self._model


def _run_options(cuda_graph: bool) -> tuple[list[ort.RunOptions | None], list[ort.RunOptions]]:
    """Per binding parity: the options of ``step()``'s runs and of ``steps()``' queued ones (those skip ORT's
    end-of-run synchronisation). A captured CUDA graph replays fixed addresses; swapped state (training's
    parameters and moments, fed-back inputs) alternates between two IOBindings: a graph each (``gpu_graph_id``)."""
    step_options: list[ort.RunOptions | None] = [None, None]
    queued = []
    for parity in (0, 1):
        options = ort.RunOptions()
        if cuda_graph:
            step_options[parity] = ort.RunOptions()
            step_options[parity].add_run_config_entry("gpu_graph_id", str(parity + 1))
            options.add_run_config_entry("gpu_graph_id", str(parity + 1))
        options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        queued.append(options)
    return step_options, queued
