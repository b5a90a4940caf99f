"""``meganeura train --nproc-per-node N``: start N ranks through torchrun and give each its part.

The command re-runs itself under ``python -m torch.distributed.run --standalone`` (a local
rendezvous on a free port) with the same options; inside torchrun each rank trains the per-rank
graph (``batch = --batch-size / N``) on its shard of every global batch. All ranks draw the same
seeded shuffle, so the shards of one step are disjoint and together form the global batch that a
one-process run with the same ``--batch-size`` would take. Rank 0 evaluates, reports, writes the
checkpoint and exports.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import click
import numpy as np


def _argv(ctx: click.Context) -> list[str]:
    """The command line that gives ``ctx``'s parsed values back (without ``--nproc-per-node``)."""
    args: list[str] = []
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        if p.name == "nproc_per_node" or value is None:
            continue
        if isinstance(p, click.Argument):
            args.append(str(value))
        elif isinstance(p, click.Option) and p.is_flag:
            args += [p.opts[0]] if value else []
        elif isinstance(p, click.Option) and p.multiple:
            for v in value:
                args += [p.opts[0], str(v)]
        else:
            args += [p.opts[0], str(value)]
    return args


def _check_batch(batch_size: int | None, world: int) -> None:
    if batch_size is not None and batch_size % world:
        raise click.BadParameter(f"the global batch {batch_size} must be divisible by the {world} processes", param_hint="--batch-size")


def launch_torchrun(ctx: click.Context, nproc: int, batch_size: int | None) -> int:
    """Run this ``train`` command in ``nproc`` processes under torchrun; returns its exit status.
    ``batch_size``: the global batch when ``build`` takes one (checked here, before any start)."""
    _check_batch(batch_size, nproc)
    try:
        import torch.distributed.run  # noqa: F401
    except ImportError as e:
        raise click.UsageError("--nproc-per-node needs PyTorch (torch.distributed): pip install 'meganeura-onnx[dist]'") from e
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += ["-m", "meganeura_onnx.cli.main", "train", *_argv(ctx)]
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast
    try:
        return subprocess.run(cmd, env=env).returncode
    except KeyboardInterrupt:  # the ranks got the SIGINT too and write the checkpoint (rank 0)
        return 130


@dataclass
class DataParallelRun:
    """This rank's place in a torchrun job, and how it cuts each global batch."""

    context: Any  # runtime.distributed.DistContext
    device: str

    @property
    def world_size(self) -> int:
        return self.context.world_size

    @property
    def is_main(self) -> bool:
        return self.context.is_main

    def session(self, graph: Any, **kwargs: Any) -> Any:
        from meganeura_onnx.runtime.distributed import DataParallelSession

        return DataParallelSession(graph, device=self.device, context=self.context, **kwargs)

    def close(self) -> None:
        """After the last step of every rank: leave the process group cleanly."""
        from meganeura_onnx.runtime.distributed import leave_distributed

        leave_distributed()

    def shard(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """This rank's rows of a global batch (equal, contiguous shards)."""
        out = {}
        for name, v in batch.items():
            local = len(v) // self.world_size
            out[name] = v[self.context.rank * local : (self.context.rank + 1) * local]
        return out


def data_parallel_run(device: str, batch_size: int | None) -> DataParallelRun | None:
    """Join torchrun's process group when this process is one of its ranks, else None.
    ``batch_size`` (the global batch, when ``build`` takes one) must split evenly."""
    from meganeura_onnx.runtime.distributed import init_distributed, launched_by_torchrun

    if not launched_by_torchrun():
        return None
    _check_batch(batch_size, int(os.environ["WORLD_SIZE"]))
    return DataParallelRun(init_distributed(device), device)
