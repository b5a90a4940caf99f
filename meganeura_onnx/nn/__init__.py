"""Layers as plain objects holding NodeIds, with Hugging Face parameter names.

``Linear.new(g, "model.layers.0.mlp.up_proj", 576, 1536, bias=False)`` adds the parameter
``model.layers.0.mlp.up_proj.weight`` (``[out, in]``, HF's layout) and ``.forward(g, x)`` applies it,
so a safetensors checkpoint loads by name (:mod:`meganeura_onnx.io.hf`).
"""

from .bert import BertAttention, BertConfig, BertEmbeddings, BertIntermediate, BertLayer, BertOutput, BertResidualOutput, BertSelfAttention
from .layers import Embedding, LayerNorm, Linear, RmsNorm, join
from .llama import KvCache, LlamaAttention, LlamaConfig, LlamaDecoderLayer, LlamaMLP, PastKv

__all__ = [
    "BertAttention",
    "BertConfig",
    "BertEmbeddings",
    "BertIntermediate",
    "BertLayer",
    "BertOutput",
    "BertResidualOutput",
    "BertSelfAttention",
    "Embedding",
    "KvCache",
    "LayerNorm",
    "Linear",
    "LlamaAttention",
    "LlamaConfig",
    "LlamaDecoderLayer",
    "LlamaMLP",
    "PastKv",
    "RmsNorm",
    "join",
]
