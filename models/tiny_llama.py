"""A LLaMA-style decoder (embedding, RMSNorm, RoPE, causal GQA attention, SwiGLU MLP, tied-free LM
head, cross-entropy) as a Graph, plus the same model in PyTorch for parity tests and benchmarks.

Layout: activations are 2-D ``[rows, features]`` with ``rows = batch * seq``; each block of ``seq``
rows is one sequence (attention ops take ``batch=``, RoPE restarts per sequence through the
positions input of each block, see below). Weights use Hugging Face names and ``[out, in]`` layout
(``matmul_bt``), so HF LLaMA checkpoints (e.g. SmolLM2) load unchanged.

Model-file contract (``meganeura train``): ``build(**kw) -> Graph`` with the loss as output 0.
Labels are next-token ids ``[rows]`` (U32, ``sparse_cross_entropy_loss``); ``ignore_index`` marks
rows that are not counted (padding).
"""

from __future__ import annotations

from meganeura_onnx import Graph


def build(
    vocab: int = 32,
    hidden: int = 32,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 64,
    layers: int = 1,
    seq: int = 8,
    batch: int = 1,
    theta: float = 10000.0,
    eps: float = 1e-5,
    ignore_index: int | None = None,
    fused_attention: bool = True,
) -> Graph:
    """The decoder with the mean cross entropy over next-token ids (U32 ``labels [rows]``) as output 0.

    ``fused_attention``: causal attention as one fused kernel forward and backward (``flash_attention``,
    which keeps each row's log-sum-exp instead of the ``seq x seq`` probabilities); False builds the
    decomposed ``causal_attention`` (the same function)."""
    hd = hidden // heads
    rows = batch * seq
    g = Graph()
    tokens = g.input_u32("input_ids", [rows])
    labels = g.input_u32("labels", [rows])
    h = g.embedding(tokens, g.parameter("model.embed_tokens.weight", [vocab, hidden]))
    for i in range(layers):
        p = f"model.layers.{i}."
        x = g.rms_norm(h, g.parameter(p + "input_layernorm.weight", [hidden]), eps)
        q = g.matmul_bt(x, g.parameter(p + "self_attn.q_proj.weight", [heads * hd, hidden]))
        k = g.matmul_bt(x, g.parameter(p + "self_attn.k_proj.weight", [kv_heads * hd, hidden]))
        v = g.matmul_bt(x, g.parameter(p + "self_attn.v_proj.weight", [kv_heads * hd, hidden]))
        q, k = _rope(g, q, theta, hd, batch, seq), _rope(g, k, theta, hd, batch, seq)
        a = g.causal_attention(q, k, v, heads, kv_heads, hd, batch=batch, fused=fused_attention)
        h = g.add(h, g.matmul_bt(a, g.parameter(p + "self_attn.o_proj.weight", [hidden, heads * hd])))
        x = g.rms_norm(h, g.parameter(p + "post_attention_layernorm.weight", [hidden]), eps)
        gate = g.matmul_bt(x, g.parameter(p + "mlp.gate_proj.weight", [intermediate, hidden]))
        up = g.matmul_bt(x, g.parameter(p + "mlp.up_proj.weight", [intermediate, hidden]))
        h = g.add(h, g.matmul_bt(g.swiglu(gate, up), g.parameter(p + "mlp.down_proj.weight", [hidden, intermediate])))
    h = g.rms_norm(h, g.parameter("model.norm.weight", [hidden]), eps)
    logits = g.matmul_bt(h, g.parameter("lm_head.weight", [vocab, hidden]))
    g.set_outputs([g.sparse_cross_entropy_loss(logits, labels, ignore_index=ignore_index)])
    return g


def data(seq: int = 8, vocab: int = 32, test_fraction: float = 0.1) -> dict:
    """Next-character windows of a small English text shipped with scikit-learn (its datasets'
    descriptions, ~80 KB of reStructuredText) for ``meganeura train``.

    Characters are tokens: the ``vocab - 1`` most frequent get ids 1.., every other character id 0.
    The text is cut into non-overlapping windows of ``seq + 1`` tokens; one example is one window
    (``input_ids`` = its first ``seq`` tokens, ``labels`` = the next token at each position, both
    U32 ``[N, seq]``), so batches are shuffled window by window, never token by token. The last
    ``test_fraction`` of the windows (the end of the text) is the test set.
    """
    from collections import Counter
    from importlib import resources

    import numpy as np

    descr = resources.files("sklearn.datasets") / "descr"
    text = "".join(f.read_text(encoding="utf-8") for f in sorted(descr.iterdir(), key=lambda f: f.name) if f.name.endswith(".rst"))
    ids = {c: i + 1 for i, (c, _) in enumerate(Counter(text).most_common(vocab - 1))}
    tokens = np.array([ids.get(c, 0) for c in text], dtype=np.uint32)
    windows = tokens[: len(tokens) // (seq + 1) * (seq + 1)].reshape(-1, seq + 1)
    split = int(len(windows) * (1 - test_fraction))
    pick = {"input_ids": windows[:, :-1], "labels": windows[:, 1:]}
    return {"train": {k: v[:split] for k, v in pick.items()}, "test": {k: v[split:] for k, v in pick.items()}}


def _rope(g: Graph, x: int, theta: float, hd: int, batch: int, seq: int) -> int:
    # Positions restart at 0 in every sequence: rope's `batch` attribute (rows r -> r % seq).
    if batch == 1:
        return g.rope(x, theta, hd)
    return g.apply("rope", x, theta=theta, head_dim=hd, offset_static=0, period=seq)


def torch_model(
    params: dict,
    vocab: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    layers: int,
    theta: float = 10000.0,
    eps: float = 1e-5,
    device: str = "cpu",
):
    """``(tensors, loss_fn)``: the same model in PyTorch; ``loss_fn(input_ids [B, S] long, labels)``
    with labels one-hot ``[B*S, V]`` (our contract) or class indices ``[B*S]`` (F.cross_entropy)."""
    import torch

    hd = hidden // heads
    w = {k: torch.nn.Parameter(torch.tensor(v, device=device)) for k, v in params.items()}
    inv_freq = torch.pow(torch.tensor(theta, dtype=torch.float32), torch.arange(hd // 2, dtype=torch.float32) * -2.0 / hd).to(device)

    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rope(x):  # x [B, n, S, hd], HF rotate-half
        ang = torch.arange(x.shape[2], dtype=torch.float32, device=device)[:, None] * inv_freq[None, :]
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def loss_fn(ids, labels):
        b, s = ids.shape
        h = w["model.embed_tokens.weight"][ids]  # [B, S, D]
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), 1)
        for i in range(layers):
            p = f"model.layers.{i}."
            x = rms(h, w[p + "input_layernorm.weight"])
            q = (x @ w[p + "self_attn.q_proj.weight"].T).view(b, s, heads, hd).transpose(1, 2)
            k = (x @ w[p + "self_attn.k_proj.weight"].T).view(b, s, kv_heads, hd).transpose(1, 2)
            v = (x @ w[p + "self_attn.v_proj.weight"].T).view(b, s, kv_heads, hd).transpose(1, 2)
            q, k = rope(q), rope(k)
            rep = heads // kv_heads
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            scores = (q @ k.transpose(-1, -2)) / hd**0.5
            a = torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v
            h = h + a.transpose(1, 2).reshape(b, s, heads * hd) @ w[p + "self_attn.o_proj.weight"].T
            x = rms(h, w[p + "post_attention_layernorm.weight"])
            m = torch.nn.functional.silu(x @ w[p + "mlp.gate_proj.weight"].T) * (x @ w[p + "mlp.up_proj.weight"].T)
            h = h + m @ w[p + "mlp.down_proj.weight"].T
        logits = (rms(h, w["model.norm.weight"]) @ w["lm_head.weight"].T).reshape(b * s, -1)
        if labels.dim() == 1:
            return torch.nn.functional.cross_entropy(logits, labels)
        return -(labels * torch.log_softmax(logits, -1)).sum() / (b * s)

    return w, loss_fn
