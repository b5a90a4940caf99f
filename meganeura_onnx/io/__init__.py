"""Weights in and out: Hugging Face safetensors loading (:mod:`meganeura_onnx.io.hf`) and training
checkpoints in Meganeura's layout (:mod:`meganeura_onnx.io.checkpoint`)."""

from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .hf import LoadReport, WeightLoadError, checkpoint_shapes, hf_parameters, load_safetensors, read_safetensors

__all__ = [
    "Checkpoint",
    "LoadReport",
    "WeightLoadError",
    "checkpoint_shapes",
    "hf_parameters",
    "load_checkpoint",
    "load_safetensors",
    "read_safetensors",
    "save_checkpoint",
]
