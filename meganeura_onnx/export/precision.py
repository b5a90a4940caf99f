"""Mixed precision as a lowering decision: an ONNX-to-ONNX pass that runs chosen ops in float16 or
bfloat16 and everything numerically sensitive in float32.

The IR knows F32 and U32 only; precision is decided here, on the exported model (an inference
model or a whole train step), per ONNX node:

- **half compute** (:data:`HALF_COMPUTE`): GEMM-shaped ops whose ORT CUDA kernels take fp16/bf16
  and accumulate in float32. Their float inputs are cast to half and their output is half.
- **layout** (:data:`LAYOUT`): ops that only move values (Reshape, Transpose, Gather, ...). They
  are exact in any type, so they run in half when all their float inputs already are half, and
  in float32 otherwise: a cast is not added just to move data.
- **everything else** stays float32: reductions, Softmax/LogSoftmax, normalisations, Exp/Log/Sqrt/Pow,
  losses, elementwise arithmetic and the optimizer update. A half input is cast back to float32.
- ``com.meganeura`` custom ops compute in half only where the op table says their kernels take it
  (``OpDef.half_types``, registered by the CPU and the CUDA library alike) and the kernel library
  runs them; elsewhere (function bodies) they run in float32 with casts around them. An argument
  the schema declares ``"float32"`` (FlashAttention's log-sum-exp, the sparse cross entropy's loss
  terms and log-sum-exp) stays float32 in a half op.

On a device without a half kernel for a half-compute op (ORT's CPU EP has no fp16/bf16 MatMul or
Gemm, and no bf16 arithmetic at all) the op is *emulated*: its inputs are rounded through the half
type and cast back, the op runs in float32, and its output is rounded to half. The numbers are
those of a half kernel with float32 accumulation; the speed is not.

Every cast is made once per (tensor, type) and reused by all consumers. Graph outputs keep float32
unless named in ``half_outputs`` (KV-cache state stored in half) or, with ``outputs_as_made``, made in
half by their node (fp16 logits: no Cast to float32 per step; the session reads them as float32);
graph inputs named in ``half_inputs`` are declared half (weights and caches stored in half).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto, helper

from ..ops import OPS
from ..ops.table import CUSTOM_DOMAIN, CustomOp

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
"""``precision=`` values of the session builders: fp32 (strict), tf32 (fp32 storage, TF32 tensor-core
MatMul on CUDA), bf16 and fp16 (half compute where listed below, float32 elsewhere)."""

HALF_TYPE = {"bf16": "bfloat16", "fp16": "float16"}
ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}

HALF_COMPUTE: dict[str, tuple[frozenset[str], str]] = {
    "MatMul": (
        frozenset({"float16", "bfloat16"}),
        "cuBLAS GEMM on tensor cores; ORT's half GEMM accumulates in float32 (CUBLAS_COMPUTE_32F)",
    ),
    "Gemm": (frozenset({"float16", "bfloat16"}), "same cuBLAS path as MatMul, float32 accumulation"),
    "Conv": (frozenset({"float16"}), "cuDNN convolution, float32 accumulation; ORT's CUDA Conv has no bf16 kernel"),
}
"""Standard ONNX ops computed in half on CUDA: type -> (half types ORT's CUDA EP has kernels for, why)."""

LAYOUT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Concat", "Split", "Gather"})
"""Ops that move values without arithmetic: exact in any type, with fp16 and bf16 kernels on ORT's
CPU and CUDA EPs (probed on onnxruntime 1.32; Expand has no bf16 CPU kernel, so it is not here)."""

TYPE_AGNOSTIC = frozenset({"Shape", "Size"})
"""Ops that read only the shape of their input: fed whichever version of a tensor exists, no cast."""

DEVICES = ("cpu", "cuda")


@dataclass
class PrecisionReport:
    """Which precision each node of the lowered model computes in."""

    dtype: str
    """The half type of the pass (``"float16"`` or ``"bfloat16"``)."""
    nodes: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(node name, domain, op_type, precision) of every node of the input model, in order. The
    precision is ``"float32"``, the half type, or ``"<half> (emulated)"`` (rounded through half,
    computed in float32 where the device has no half kernel)."""
    casts: int = 0
    """Cast nodes the pass added."""
    half_inputs: list[str] = field(default_factory=list)
    """Graph inputs declared in the half type (weights, KV caches)."""
    half_outputs: list[str] = field(default_factory=list)
    """Graph outputs declared in the half type (the next values of half state; with ``outputs_as_made``
    also those their node makes in half)."""

    def by_precision(self) -> dict[str, dict[str, int]]:
        """precision -> {op_type (``domain.op`` for custom ops): node count}."""
        out: dict[str, dict[str, int]] = {}
        for _, domain, op, prec in self.nodes:
            key = f"{domain}.{op}" if domain else op
            out.setdefault(prec, {})
            out[prec][key] = out[prec].get(key, 0) + 1
        return out

    def __str__(self) -> str:
        lines = [f"precision {self.dtype}: {self.casts} casts added, {len(self.half_inputs)} inputs stored in {self.dtype}"]
        for prec, ops in sorted(self.by_precision().items()):
            lines.append(f"  {prec}: " + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())))
        return "\n".join(lines)


def _custom_op(op_type: str) -> CustomOp | None:
    return next((d.custom for d in OPS.values() if d.custom is not None and d.custom.name == op_type), None)


def _float32_args(node: onnx.NodeProto) -> tuple[set[int], set[int]]:
    """Input and output positions of a custom-op node that are float32 whatever type the op runs in
    (``TensorArg.dtype == "float32"``: FlashAttention's and SparseCrossEntropy's log-sum-exp)."""
    custom = _custom_op(node.op_type) if node.domain == CUSTOM_DOMAIN else None
    if custom is None:
        return set(), set()
    ins = list(custom.inputs) + list(custom.variadic_inputs) * max(1, len(node.input))
    outs = list(custom.outputs) + list(custom.variadic_outputs) * max(1, len(node.output))
    return (
        {k for k, (_, a) in enumerate(zip(node.input, ins, strict=False)) if a.dtype == "float32"},
        {k for k, (_, a) in enumerate(zip(node.output, outs, strict=False)) if a.dtype == "float32"},
    )


def custom_half_types(op_type: str) -> frozenset[str]:
    """``half_types`` of the op-table entry that lowers to ``com.meganeura.<op_type>``."""
    return next((d.half_types for d in OPS.values() if d.custom is not None and d.custom.name == op_type), frozenset())


def _float_tensors(model: onnx.ModelProto) -> dict[str, bool]:
    """tensor name -> whether it is float32, for every tensor of the main graph whose type is known
    (graph inputs, initializers, shape inference, and the op table for custom-op outputs)."""
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=False)
    g = inferred.graph
    types: dict[str, bool] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type == TensorProto.FLOAT
    for init in g.initializer:
        types[init.name] = init.data_type == TensorProto.FLOAT
    for node in g.node:
        if node.domain == CUSTOM_DOMAIN:
            custom = _custom_op(node.op_type)
            if custom is not None:
                outs = list(custom.outputs) + list(custom.variadic_outputs) * max(1, len(node.output))
                for name, arg in zip(node.output, outs, strict=False):
                    types.setdefault(name, arg.dtype in ("float", "float32"))
        elif node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    types.setdefault(node.output[0], a.t.data_type == TensorProto.FLOAT)
    return types


class _Lowering:
    """The pass's state: each tensor's versions by element type, the new node list, the report."""

    def __init__(
        self, model: onnx.ModelProto, dtype: str, device: str, half_outputs: Collection[str], custom_kernels: bool, outputs_as_made: bool
    ) -> None:
        self.half = dtype
        # outputs whose type the node that makes them decides (half_outputs' types are the caller's)
        self.free_outputs = {o.name for o in model.graph.output} - set(half_outputs) if outputs_as_made else set()
        self.custom_kernels = custom_kernels
        self.half_onnx = ONNX_TYPE[dtype]
        self.device = device
        self.is_float = _float_tensors(model)
        self.versions: dict[str, dict[str, str]] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.casts = 0
        self.wanted_out = {o.name: (dtype if o.name in half_outputs else "float32") for o in model.graph.output}

    def float_inputs(self, node: onnx.NodeProto) -> list[int]:
        return [k for k, t in enumerate(node.input) if t and self.is_float.get(t, False)]

    def origin(self, tensor: str) -> str:
        """The type ``tensor`` was made in (float32 for tensors the pass has not seen: initializers)."""
        return next(iter(self.versions.get(tensor, {"float32": tensor})))

    def as_type(self, tensor: str, to: str) -> str:
        """The version of ``tensor`` in type ``to``, cast (once) from the version it was made in."""
        have = self.versions.setdefault(tensor, {"float32": tensor})
        if to not in have:
            name = f"{tensor}.{'f32' if to == 'float32' else to}"
            self.nodes.append(helper.make_node("Cast", [have[self.origin(tensor)]], [name], name=f"{name}/Cast", to=ONNX_TYPE[to]))
            self.casts += 1
            have[to] = name
        return have[to]

    def rounded(self, tensor: str) -> str:
        """``tensor`` rounded to the half type, as float32 (what an emulated half op reads)."""
        if self.origin(tensor) == self.half:
            return self.as_type(tensor, "float32")
        have = self.versions.setdefault(tensor, {"float32": tensor})
        if "rounded" not in have:
            name = f"{tensor}.rounded"
            self.nodes.append(
                helper.make_node("Cast", [self.as_type(tensor, self.half)], [name], name=f"{name}/Cast", to=TensorProto.FLOAT)
            )
            self.casts += 1
            have["rounded"] = name
        return have["rounded"]

    def produce(self, node: onnx.NodeProto, out_type: str, float32_outputs: Collection[int] = ()) -> None:
        """Record ``node``'s float outputs as made in ``out_type`` (those at ``float32_outputs`` in
        float32); a graph output wanted in the other type is written under another name and cast to its own."""
        for k, t in enumerate(node.output):
            if not t or not self.is_float.get(t, False):
                continue
            made = "float32" if k in float32_outputs else out_type
            if t in self.free_outputs:
                self.wanted_out[t] = made
            want = self.wanted_out.get(t)
            if want is None or want == made:
                self.versions[t] = {made: t}
            else:
                inner = f"{t}.{'f32' if made == 'float32' else made}"
                node.output[k] = inner
                self.versions[t] = {made: inner}
                self.nodes.append(helper.make_node("Cast", [inner], [t], name=f"{t}/Cast", to=ONNX_TYPE[want]))
                self.casts += 1
                self.versions[t][want] = t

    def mode(self, node: onnx.NodeProto) -> str:
        """ "half", "emulated", "follow", "agnostic" or "float32" for ``node``."""
        if node.domain in ("", "ai.onnx"):
            if node.op_type in HALF_COMPUTE:
                native = self.device == "cuda" and self.half in HALF_COMPUTE[node.op_type][0]
                return "half" if native else "emulated"
            if node.op_type in TYPE_AGNOSTIC:
                return "agnostic"
            if node.op_type in LAYOUT:
                ins = self.float_inputs(node)
                if ins and all(self.origin(node.input[k]) == self.half for k in ins):
                    return "follow"
            return "float32"
        if node.domain == CUSTOM_DOMAIN and _custom_runs_half(node.op_type, self.half, self.device, self.custom_kernels):
            # An op writing a state buffer in place (CacheWrite) runs in half only on a buffer stored
            # in half: a cast in front would make the in-place write a copy of the whole cache.
            custom = _custom_op(node.op_type)
            names = custom.input_names()
            written = [names.index(i) for i in (custom.inplace_input, *(i for i, _ in custom.inplace_pairs)) if i is not None]
            if any(k < len(node.input) and self.origin(node.input[k]) != self.half for k in written):
                return "float32"
            return "half"
        return "float32"

    def lower(self, node: onnx.NodeProto) -> str:
        mode = self.mode(node)
        node = onnx.NodeProto.FromString(node.SerializeToString())
        ins = self.float_inputs(node)
        if mode == "agnostic":
            for k in ins:
                node.input[k] = self.as_type(node.input[k], self.origin(node.input[k]))
            self.nodes.append(node)
            return "float32"
        in_type = self.half if mode in ("half", "follow") else "float32"
        float32_ins, float32_outs = _float32_args(node) if mode == "half" else (set(), set())
        for k in ins:  # emulated: rounded through half, computed in float32
            if mode == "emulated":
                node.input[k] = self.rounded(node.input[k])
            else:
                node.input[k] = self.as_type(node.input[k], "float32" if k in float32_ins else in_type)
        self.nodes.append(node)
        if mode == "emulated":
            tmp = [(k, t) for k, t in enumerate(node.output) if t and self.is_float.get(t, False)]
            for k, t in tmp:
                node.output[k] = f"{t}.acc"
                rounded = helper.make_node("Cast", [f"{t}.acc"], [t], name=f"{t}/round", to=self.half_onnx)
                self.nodes.append(rounded)
                self.casts += 1
                self.produce(rounded, self.half)
            return f"{self.half} (emulated)"
        self.produce(node, in_type, float32_outs)
        return in_type


def lower_precision(
    model: onnx.ModelProto,
    precision: str,
    *,
    device: str = "cpu",
    half_inputs: Collection[str] = (),
    half_outputs: Collection[str] = (),
    custom_kernels: bool = True,
    outputs_as_made: bool = False,
) -> tuple[onnx.ModelProto, PrecisionReport]:
    """``model`` with the ops of :data:`HALF_COMPUTE` (and custom ops whose kernels take it) in
    ``precision`` (``"bf16"``/``"fp16"``), the rest in float32, as described in the module docstring.

    ``device`` ("cpu"/"cuda") says which half kernels exist. ``half_inputs``: float32 graph inputs
    re-declared in the half type (the caller stores them so). ``half_outputs``: graph outputs left in
    the half type (the next value of a half state input); every other output stays float32, unless
    ``outputs_as_made``: then an output keeps the type its node makes it in (a half LM head's logits
    stay half instead of a Cast to float32 after it; ``report.half_outputs`` lists them).
    ``custom_kernels``: whether our kernel library runs the custom ops (without it their function
    bodies run, in float32). Returns the new model and a :class:`PrecisionReport`.
    """
    if precision not in HALF_TYPE:
        raise ValueError(f"lower_precision: precision must be one of {sorted(HALF_TYPE)}, got {precision!r}")
    if device not in DEVICES:
        raise ValueError(f"lower_precision: device must be one of {DEVICES}, got {device!r}")
    dtype = HALF_TYPE[precision]
    graph_inputs = {i.name: i for i in model.graph.input}
    unknown = sorted(set(half_inputs) - set(graph_inputs))
    if unknown:
        raise ValueError(f"lower_precision: half_inputs {unknown} are not inputs of the model")
    unknown = sorted(set(half_outputs) - {o.name for o in model.graph.output})
    if unknown:
        raise ValueError(f"lower_precision: half_outputs {unknown} are not outputs of the model")
    state = _Lowering(model, dtype, device, half_outputs, custom_kernels, outputs_as_made)
    for name in half_inputs:
        if graph_inputs[name].type.tensor_type.elem_type != TensorProto.FLOAT:
            raise ValueError(f"lower_precision: half input {name!r} must be float32 in the model")
        state.versions[name] = {dtype: name}
    report = PrecisionReport(dtype, half_inputs=sorted(half_inputs))
    for node in model.graph.node:
        report.nodes.append((node.name, node.domain, node.op_type, state.lower(node)))
    report.half_outputs = sorted(n for n, t in state.wanted_out.items() if t == dtype)
    for out in model.graph.output:  # an output that is a graph input (or not yet in its type)
        if state.is_float.get(out.name, False) and out.name not in {n for node in state.nodes for n in node.output}:
            raise ValueError(f"lower_precision: output {out.name!r} is not computed by a node; it cannot change type")
    new = onnx.ModelProto.FromString(model.SerializeToString())
    del new.graph.node[:]
    new.graph.node.extend(state.nodes)
    del new.graph.value_info[:]  # stale types; ORT infers them again
    for vi in list(new.graph.input) + list(new.graph.output):
        want = dtype if vi.name in half_inputs or vi.name in report.half_outputs else None
        if want is not None:
            vi.type.tensor_type.elem_type = ONNX_TYPE[want]
    report.casts = state.casts
    return new, report


def _custom_runs_half(op_type: str, dtype: str, device: str, custom_kernels: bool) -> bool:
    # half_types is what the kernels of both libraries (CPU and CUDA) register
    # (tests/test_custom_op_schema.py holds them to it): no device condition.
    return custom_kernels and dtype in custom_half_types(op_type)


def half_storage_inputs(
    model: onnx.ModelProto, precision: str, device: str, candidates: Collection[str], custom_kernels: bool = True
) -> set[str]:
    """The ``candidates`` (float32 graph inputs: weights, KV caches) worth storing in half: those
    every consumer of which would read them in half anyway (a half-compute op, a layout op, or a
    custom op whose kernels take the type on ``device``). A tensor read by anything in float32 (a
    norm scale, a bias) stays float32, as does one whose consumers run emulated on ``device`` only
    when a custom op reads it (a KV cache needs the native kernel to be updated in place)."""
    dtype = HALF_TYPE[precision]
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for t in node.input:
            consumers.setdefault(t, []).append(node)

    def reads_half(node: onnx.NodeProto) -> bool:
        if node.domain in ("", "ai.onnx"):
            return node.op_type in HALF_COMPUTE or node.op_type in LAYOUT
        return node.domain == CUSTOM_DOMAIN and _custom_runs_half(node.op_type, dtype, device, custom_kernels)

    return {name for name in candidates if consumers.get(name) and all(reads_half(n) for n in consumers[name])}
