"""What a session holds and runs: its buffers, their memory, and its execution plan (nodes, the
provider of each, how each custom op runs and each op's precision)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import TensorType
from .half import HALF_ITEMSIZE


@dataclass
class MemorySummary:
    """Bytes held by the session's buffers (Meganeura's MemorySummary)."""

    total_buffer_bytes: int
    adam_state_bytes: int
    num_buffers: int
    largest_buffer_bytes: int

    def __str__(self) -> str:
        mb = 1e6
        return f"{self.num_buffers} buffers, {self.total_buffer_bytes / mb:.1f} MB total ({self.adam_state_bytes / mb:.1f} MB adam state), largest {self.largest_buffer_bytes / mb:.1f} MB"


@dataclass
class Buffer:
    name: str
    ty: TensorType
    kind: str  # "input", "parameter", "state", "output", "optimizer"
    storage: str = "float32"
    """Element type of the device buffer: float32 (or uint32 for U32 buffers), float16 or bfloat16."""

    @property
    def size_bytes(self) -> int:
        return self.ty.num_elements() * HALF_ITEMSIZE if self.storage != "float32" else self.ty.size_bytes()


@dataclass
class ExecutionPlan:
    """What the session runs: ONNX nodes, buffers, providers and which provider runs which node."""

    providers: list[str]
    nodes: list[tuple[str, str, str]]  # (name, domain, op_type) of the model as exported
    buffers: list[Buffer]
    placement: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(node name, domain, op_type, provider) of every node ORT runs, after function inlining."""
    custom_op_library: str | None = None
    precision: str = "fp32"
    """The session's ``precision=`` (fp32, tf32, bf16, fp16)."""
    precisions: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(node name, domain, op_type, precision) of every exported node under bf16/fp16: ``float32``,
    ``float16``/``bfloat16``, or ``"<half> (emulated)"`` (rounded through half, computed in float32
    where the device has no half kernel). Empty for fp32/tf32 (everything float32)."""

    def precision_of(self, op_type: str, domain: str = "") -> set[str]:
        """Precisions the nodes of ``op_type`` compute in (``{"float32"}`` under fp32/tf32)."""
        if not self.precisions:
            return {"float32"} if any(op == op_type and dom == domain for _, dom, op in self.nodes) else set()
        return {p for _, dom, op, p in self.precisions if op == op_type and dom == domain}

    def kernels(self) -> dict[str, str]:
        """How each exported com.meganeura op runs: "kernel" (the library's) or "function" (inlined body)."""
        exported = sorted({op for _, dom, op in self.nodes if dom == "com.meganeura"})
        as_kernel = {op for _, dom, op, _ in self.placement if dom == "com.meganeura"}
        return {op: "kernel" if op in as_kernel else "function" for op in exported}

    def providers_of(self, op_type: str, domain: str = "") -> set[str]:
        """Providers that run nodes of ``op_type`` (e.g. ``providers_of("Rope", "com.meganeura")``)."""
        return {ep for _, dom, op, ep in self.placement if op == op_type and dom == domain}

    def __str__(self) -> str:
        by_ep: dict[str, int] = {}
        for *_, ep in self.placement:
            by_ep[ep] = by_ep.get(ep, 0) + 1
        lines = [f"ExecutionPlan: {len(self.nodes)} ONNX nodes, {len(self.buffers)} buffers, providers {self.providers}"]
        lines += [f"  {ep}: {n} nodes" for ep, n in sorted(by_ep.items())]
        lines += [f"  com.meganeura.{op}: {how}" for op, how in self.kernels().items()]
        by_prec: dict[str, set[str]] = {}
        for _, dom, op, prec in self.precisions:
            by_prec.setdefault(prec, set()).add(f"{dom}.{op}" if dom else op)
        lines.append(f"  precision {self.precision}" + ("" if by_prec else ": every op in float32" if self.precision == "fp32" else ""))
        lines += [f"    {prec}: {', '.join(sorted(ops))}" for prec, ops in sorted(by_prec.items())]
        return "\n".join(lines)
