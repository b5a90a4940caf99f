"""A small LLaMA-style block built with the Graph API (model-file contract: ``build(**kw) -> Graph``).

Embedding, RMSNorm, RoPE on q and k, causal attention with grouped-query heads (4 query heads
over 2 KV heads), a SwiGLU MLP, a final norm, an LM head and the cross-entropy loss as output 0.
Both backends' tests build it from this file, so the native engine and onnxruntime-training train
exactly the same graph.
"""

from __future__ import annotations

from meganeura_onnx import Graph


def build(seq: int = 8, vocab: int = 32, dim: int = 32, heads: int = 4, kv_heads: int = 2, ffn: int = 64, theta: float = 10000.0) -> Graph:
    """One decoder block over `seq` tokens; labels are one-hot `[seq, vocab]`."""
    hd = dim // heads
    g = Graph()
    tok = g.input_u32("tokens", [seq])
    labels = g.input("labels", [seq, vocab])
    emb = g.parameter("model.embed_tokens.weight", [vocab, dim])
    x = g.embedding(tok, emb)
    h = g.rms_norm(x, g.parameter("model.layers.0.input_layernorm.weight", [dim]), 1e-5)
    q = g.matmul(h, g.parameter("model.layers.0.self_attn.q_proj.weight", [dim, heads * hd]))
    k = g.matmul(h, g.parameter("model.layers.0.self_attn.k_proj.weight", [dim, kv_heads * hd]))
    v = g.matmul(h, g.parameter("model.layers.0.self_attn.v_proj.weight", [dim, kv_heads * hd]))
    q = g.rope(q, theta, hd)
    k = g.rope(k, theta, hd)
    a = g.causal_attention(q, k, v, heads, kv_heads, hd)
    x = g.add(x, g.matmul(a, g.parameter("model.layers.0.self_attn.o_proj.weight", [heads * hd, dim])))
    h = g.rms_norm(x, g.parameter("model.layers.0.post_attention_layernorm.weight", [dim]), 1e-5)
    gate = g.matmul(h, g.parameter("model.layers.0.mlp.gate_proj.weight", [dim, ffn]))
    up = g.matmul(h, g.parameter("model.layers.0.mlp.up_proj.weight", [dim, ffn]))
    x = g.add(x, g.matmul(g.swiglu(gate, up), g.parameter("model.layers.0.mlp.down_proj.weight", [ffn, dim])))
    x = g.rms_norm(x, g.parameter("model.norm.weight", [dim]), 1e-5)
    logits = g.matmul(x, g.parameter("lm_head.weight", [dim, vocab]))
    g.set_outputs([g.cross_entropy_loss(logits, labels)])
    return g
