"""``scheduled_lr`` follows transformers' schedules with warm-up (the reference implementation)."""

from __future__ import annotations

import pytest
import torch
import transformers

from meganeura_onnx.runtime.schedules import scheduled_lr

SCHEDULES = {
    "constant": lambda opt, warmup, total: transformers.get_constant_schedule_with_warmup(opt, warmup),
    "cosine": transformers.get_cosine_schedule_with_warmup,
    "linear": transformers.get_linear_schedule_with_warmup,
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_scheduled_lr_matches_transformers_schedules_with_warmup(name):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    sched = SCHEDULES[name](opt, 4, 20)
    for step in range(24):  # past the end too: the decays stay at 0
        assert scheduled_lr(name, 0.5, step, 20, 4) == pytest.approx(opt.param_groups[0]["lr"], abs=1e-12), step
        opt.step()
        sched.step()


def test_scheduled_lr_rejects_an_unknown_schedule():
    with pytest.raises(ValueError, match=r"lr schedule must be one of \('constant', 'cosine', 'linear'\), got 'step'"):
        scheduled_lr("step", 0.1, 0, 10)
