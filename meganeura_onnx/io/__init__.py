"""Weights in and out: Hugging Face safetensors loading (:mod:`meganeura_onnx.io.hf`)."""

from .hf import LoadReport, WeightLoadError, checkpoint_shapes, hf_parameters, load_safetensors, read_safetensors

__all__ = ["LoadReport", "WeightLoadError", "checkpoint_shapes", "hf_parameters", "load_safetensors", "read_safetensors"]
