"""Checkpoints and weight files."""

from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint

__all__ = ["Checkpoint", "load_checkpoint", "save_checkpoint"]
