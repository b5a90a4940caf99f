"""Optimizer update graphs: SGD, Adam and AdamW (+ gradient-norm clipping) appended to a Graph.

Hyper-parameters are ``[1]`` F32 graph inputs named ``opt.<name>`` (``opt.lr``, ``opt.beta1``,
``opt.beta2``, ``opt.eps``, ``opt.step``, ``opt.weight_decay``, ``opt.max_grad_norm``), so a session
changes them without rebuilding. Adam moments are inputs ``adam_m.<param>`` / ``adam_v.<param>``.
The update follows PyTorch's ``torch.optim`` formulas exactly (so parity tests can compare):

- SGD:   p' = p - lr * g
- Adam:  m' = b1 m + (1 - b1) g;  v' = b2 v + (1 - b2) g^2;
         p' = p - lr / (1 - b1^t) * m' / (sqrt(v') / sqrt(1 - b2^t) + eps)      (t = opt.step, from 1)
- AdamW: p is first decayed, p <- p * (1 - lr * weight_decay), then the Adam update.
- clip (any optimizer): g <- g * min(1, max_grad_norm / (||g||_2 + 1e-6)), the norm taken over all
  gradients together (``torch.nn.utils.clip_grad_norm_``).

With ``accumulate=True`` (gradient accumulation over K micro-batches) each parameter gets a state
input ``grad_acc.<param>`` and two more hyper-parameters: ``opt.accum_scale`` (1/K) and ``opt.apply``
(1 on the K-th micro-batch, else 0). The update uses g = (grad_acc + grad) * accum_scale; every
updated value is gated, ``new * apply + old * (1 - apply)`` (exactly ``new`` or ``old``), and
``grad_acc' = (grad_acc + grad) * (1 - apply)``. The K-1 other micro-batches compute the update
and keep the old values: one elementwise pass more per tensor, no second model or host round trip.

With ``fused=True`` the Adam/AdamW update of every parameter is ONE ``com.meganeura.AdamUpdate``
node (``ops/optim.py``: our multi-tensor kernel, or its function body, which is the same formula).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..ir import NodeId

KINDS = ("sgd", "adam", "adamw")


@dataclass(frozen=True)
class OptimizerSpec:
    """Which update graph to build: ``kind`` in sgd/adam/adamw, and whether to clip the gradient norm."""

    kind: str
    clip: bool = False
    fused: bool = False
    """Adam/AdamW as one multi-tensor ``AdamUpdate`` node instead of ~13 ONNX nodes per parameter."""
    accumulate: bool = False
    """Gradient accumulation: ``grad_acc.<p>`` state, ``opt.accum_scale`` and ``opt.apply`` inputs."""
    device_step: bool = False
    """Adam's ``opt.step`` is state the model advances itself (``opt.step.next`` = step + 1, or
    + apply with accumulation), so a session writes it only when it resets it: replaying the step
    (a CUDA graph) needs no host copy for it."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"optimizer must be one of {KINDS}, got {self.kind!r}")

    @property
    def hyper_parameters(self) -> tuple[str, ...]:
        names = ("lr",) if self.kind == "sgd" else ("lr", "beta1", "beta2", "eps", "step")
        if self.kind == "adamw":
            names += ("weight_decay",)
        return names + (("max_grad_norm",) if self.clip else ()) + (("accum_scale", "apply") if self.accumulate else ())

    @property
    def uses_moments(self) -> bool:
        return self.kind != "sgd"


@dataclass
class UpdateGraph:
    """What :func:`append_update` added: hyper-parameter inputs, state inputs and the next values."""

    hyper: dict[str, NodeId] = field(default_factory=dict)
    """``opt.<name>`` -> input node."""
    state: dict[str, NodeId] = field(default_factory=dict)
    """``adam_m.<param>`` / ``adam_v.<param>`` -> input node."""
    next_values: dict[str, NodeId] = field(default_factory=dict)
    """parameter or state name -> node holding its value after the step."""


def _pow(g, base: NodeId, exponent: NodeId) -> NodeId:
    return g.exp(g.mul(exponent, g.log(base)))  # base in (0, 1): the betas


def append_update(g, params: Mapping[str, NodeId], grads: Mapping[str, NodeId], spec: OptimizerSpec) -> UpdateGraph:
    """Append the update of every parameter in ``grads`` (name -> gradient node) to ``g``."""
    up = UpdateGraph()
    for name in spec.hyper_parameters:
        up.hyper[f"opt.{name}"] = g.state_input(f"opt.{name}", [1])
    h = {name: up.hyper[f"opt.{name}"] for name in spec.hyper_parameters}
    grads = dict(grads)
    if spec.accumulate:
        keep = g.affine(h["apply"], -1.0, 1.0)  # 1 - apply
        for name, gr in list(grads.items()):
            acc = up.state[f"grad_acc.{name}"] = g.input(f"grad_acc.{name}", g.node(params[name]).ty.shape)
            total = g.add(acc, gr)
            up.next_values[f"grad_acc.{name}"] = g.mul_scalar(total, keep)
            grads[name] = g.mul_scalar(total, h["accum_scale"])
    _update(g, params, grads, spec, h, up)
    if spec.device_step and spec.uses_moments:
        up.next_values["opt.step"] = g.add(h["step"], h["apply"]) if spec.accumulate else g.affine(h["step"], 1.0, 1.0)
    if spec.accumulate:  # keep the old values except on the K-th micro-batch
        old = {**params, **up.state}
        for key, new in list(up.next_values.items()):
            if not key.startswith(("grad_acc.", "opt.")):
                up.next_values[key] = g.add(g.mul_scalar(new, h["apply"]), g.mul_scalar(old[key], keep))
    return up


def _update(g, params: Mapping[str, NodeId], grads: dict, spec: OptimizerSpec, h: dict, up: UpdateGraph) -> None:
    if spec.clip:
        sq = [g.sum_all(g.mul(gr, gr)) for gr in grads.values()]
        total = sq[0]
        for s in sq[1:]:
            total = g.add(total, s)
        coef = g.minimum(g.scalar(1.0), g.div(h["max_grad_norm"], g.affine(g.sqrt(total), 1.0, 1e-6)))
        grads = {n: g.mul_scalar(gr, coef) for n, gr in grads.items()}

    if spec.kind == "sgd":
        for name, gr in grads.items():
            up.next_values[name] = g.sub(params[name], g.mul_scalar(gr, h["lr"]))
        return

    if spec.fused:
        _append_fused_adam(g, params, grads, spec, h, up)
        return
    one_minus_b1, one_minus_b2 = g.affine(h["beta1"], -1.0, 1.0), g.affine(h["beta2"], -1.0, 1.0)
    bc1 = g.affine(_pow(g, h["beta1"], h["step"]), -1.0, 1.0)
    bc2 = g.affine(_pow(g, h["beta2"], h["step"]), -1.0, 1.0)
    step_size = g.div(h["lr"], bc1)
    inv_sqrt_bc2 = g.recip(g.sqrt(bc2))
    decay = g.affine(g.mul(h["lr"], h["weight_decay"]), -1.0, 1.0) if spec.kind == "adamw" else None
    for name, gr in grads.items():
        shape = g.node(params[name]).ty.shape
        m = up.state[f"adam_m.{name}"] = g.state_input(f"adam_m.{name}", shape)
        v = up.state[f"adam_v.{name}"] = g.state_input(f"adam_v.{name}", shape)
        m2 = g.add(g.mul_scalar(m, h["beta1"]), g.mul_scalar(gr, one_minus_b1))
        v2 = g.add(g.mul_scalar(v, h["beta2"]), g.mul_scalar(g.mul(gr, gr), one_minus_b2))
        denom = g.add_scalar(g.mul_scalar(g.sqrt(v2), inv_sqrt_bc2), h["eps"])
        p = params[name] if decay is None else g.mul_scalar(params[name], decay)
        up.next_values[name] = g.sub(p, g.mul_scalar(g.div(m2, denom), step_size))
        up.next_values[f"adam_m.{name}"] = m2
        up.next_values[f"adam_v.{name}"] = v2


def _append_fused_adam(g, params: Mapping[str, NodeId], grads: Mapping[str, NodeId], spec: OptimizerSpec, h: dict, up: UpdateGraph) -> None:
    from ..ops.optim import HYPER

    wd = h["weight_decay"] if spec.kind == "adamw" else g.scalar(0.0)  # p * (1 - lr * 0) == p exactly
    ins = [h[k] for k in HYPER[:-1]] + [wd]
    names = list(grads)
    for name in names:
        shape = g.node(params[name]).ty.shape
        m = up.state[f"adam_m.{name}"] = g.state_input(f"adam_m.{name}", shape)
        v = up.state[f"adam_v.{name}"] = g.state_input(f"adam_v.{name}", shape)
        ins += [params[name], grads[name], m, v]
    for k, name in enumerate(names):
        for part, key in enumerate((name, f"adam_m.{name}", f"adam_v.{name}")):
            up.next_values[key] = g.apply("adam_update", *ins, index=k, part=part)
