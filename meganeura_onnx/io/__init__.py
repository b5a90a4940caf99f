"""Weights in and out: Hugging Face safetensors loading (:mod:`meganeura_onnx.io.hf`) and training
checkpoints in Meganeura's layout (re-exported from :mod:`meganeura_onnx.runtime.checkpoint`, where
``Session.save_checkpoint`` uses them: imports flow runtime -> io, never back)."""

from ..runtime.checkpoint import Checkpoint, check_compatible, load_checkpoint, save_checkpoint
from .hf import LoadReport, WeightLoadError, checkpoint_shapes, hf_parameters, load_safetensors, parameters_from_file, read_safetensors

__all__ = [
    "Checkpoint",
    "LoadReport",
    "WeightLoadError",
    "check_compatible",
    "checkpoint_shapes",
    "hf_parameters",
    "load_checkpoint",
    "load_safetensors",
    "parameters_from_file",
    "read_safetensors",
    "save_checkpoint",
]
