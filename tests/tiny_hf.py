"""The tiny Hugging Face LLaMA (GQA, 2 layers) that the parity tests save and load: one definition."""

from __future__ import annotations

from pathlib import Path


def save_tiny_llama(folder: Path, seed: int = 0, **overrides) -> tuple[object, Path]:
    """A randomly initialised ``LlamaForCausalLM`` saved with ``save_pretrained`` into ``folder``;
    returns the model (eval mode, CPU, float32) and its safetensors file."""
    import torch
    import transformers

    torch.manual_seed(seed)
    kw = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=0.1,  # logits with some spread, so greedy choices are not near-ties
    )
    kw.update(overrides)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).eval()
    model.save_pretrained(folder)
    return model, Path(folder) / "model.safetensors"
