"""The tiny Hugging Face LLaMA (GQA, 2 layers) that the parity tests save and load: one definition."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from meganeura_onnx.models.llama import PRESETS

# models/llama.py's "tiny" preset at the sizes the parity tests were written for.
TINY_HF_CONFIG = replace(PRESETS["tiny"], vocab_size=128, intermediate_size=96, max_position_embeddings=256)


def save_tiny_llama(folder: Path, seed: int = 0, **overrides) -> tuple[object, Path]:
    """A randomly initialised ``LlamaForCausalLM`` of ``TINY_HF_CONFIG`` with ``overrides`` (fields of
    our ``LlamaConfig``, or other ``transformers.LlamaConfig`` arguments) saved with
    ``save_pretrained`` into ``folder``; returns the model (eval mode, CPU, float32) and its
    safetensors file."""
    import torch
    import transformers

    ours = {f.name for f in fields(TINY_HF_CONFIG)}
    config = replace(TINY_HF_CONFIG, **{k: v for k, v in overrides.items() if k in ours})
    # Unset token ids keep transformers' defaults, as a hand-written config would.
    # initializer_range: logits with some spread, so greedy choices are not near-ties.
    kw = {"initializer_range": 0.1, **{k: v for k, v in config.to_dict().items() if v is not None}}
    kw.update({k: v for k, v in overrides.items() if k not in ours})
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).eval()
    model.save_pretrained(folder)
    return model, Path(folder) / "model.safetensors"
