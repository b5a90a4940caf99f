"""Schedules of a training run: the learning rate per optimizer update, and fp16's dynamic loss scale."""

from __future__ import annotations

import math


class LossScaler:
    """Dynamic loss scaling (``torch.amp.GradScaler``'s rule): the loss is multiplied by ``scale``
    before the backward pass; a step whose gradients overflow is dropped and halves the scale;
    ``growth_interval`` steps in a row without overflow double it."""

    def __init__(self, scale: float, growth_interval: int) -> None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"build_session: loss_scale must be a finite number > 0, got {scale!r}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"build_session: loss_scale_growth_interval must be a positive int, got {growth_interval!r}")
        self.scale, self.growth_interval = float(scale), growth_interval
        self.good, self.skipped = 0, 0

    def update(self, finite: bool) -> bool:
        """Record one step; returns whether it is applied (its gradients were finite)."""
        if not finite:
            self.skipped += 1
            self.good = 0
            self.scale = max(self.scale / 2.0, 2.0**-24)
            return False
        self.good += 1
        if self.good >= self.growth_interval:
            self.scale, self.good = min(self.scale * 2.0, 2.0**64), 0
        return True


LR_SCHEDULES = ("constant", "cosine", "linear")


def scheduled_lr(schedule: str, base_lr: float, step: int, total_steps: int, warmup: int = 0) -> float:
    """The learning rate of optimizer update ``step`` (0-based) of ``total_steps``: a linear warm-up
    from 0 over ``warmup`` updates, then constant, or a cosine / linear decay to 0 at ``total_steps``.
    The same multipliers as transformers' ``get_{constant,cosine,linear}_schedule_with_warmup``."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr schedule must be one of {LR_SCHEDULES}, got {schedule!r}")
    if step < warmup:
        return base_lr * step / max(1, warmup)
    if schedule == "constant":
        return base_lr
    progress = (step - warmup) / max(1, total_steps - warmup)
    if schedule == "linear":
        return base_lr * max(0.0, 1.0 - progress)
    return base_lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
