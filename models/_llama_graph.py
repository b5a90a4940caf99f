"""The LLaMA family's graphs (``logits``, ``train``, ``prefill``, ``decode``, ``past``) on the Graph API;
the model file :mod:`meganeura_onnx.models.llama` documents them and runs them."""

from __future__ import annotations

import numpy as np

from meganeura_onnx import Graph, NodeId
from meganeura_onnx.nn import Embedding, KvCache, Linear, LlamaConfig, LlamaDecoderLayer, PastKv, RmsNorm
from meganeura_onnx.nn.llama import linear_class


class LlamaForCausalLM:
    """``model.embed_tokens``, ``model.layers.N``, ``model.norm`` and ``lm_head`` (tied to the
    embeddings when ``tie_word_embeddings``) as layer objects on one graph. ``in_out``: the
    projections and the LM head store their weights ``[in, out]`` (:class:`InOutLinear`); a tied LM
    head then has a parameter of its own, ``lm_head.weight`` ``[hidden, vocab]``, that holds the
    embedding table transposed (:func:`to_in_out` fills it): ONNX Runtime's one-row product on the
    CPU reads a 576 x 49152 table ``[in, out]`` in ~6 ms of CPU time, the ``[out, in]`` table as
    ``Gemm(transB=1)`` in ~10 ms, at the price of a second copy of the table (113 MB for SmolLM2-135M)."""

    def __init__(self, g: Graph, cfg: LlamaConfig, in_out: bool = False) -> None:
        self.cfg = cfg
        self.embed_tokens = Embedding.new(g, "model.embed_tokens", cfg.vocab_size, cfg.hidden_size)
        self.layers = [LlamaDecoderLayer.new(g, f"model.layers.{i}", cfg, in_out) for i in range(cfg.num_hidden_layers)]
        self.norm = RmsNorm.new(g, "model.norm", cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.tie_word_embeddings and not in_out:
            self.lm_head = Linear.tied("lm_head", self.embed_tokens)
        else:
            self.lm_head = linear_class(in_out).new(g, "lm_head", cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(
        self,
        g: Graph,
        input_ids: NodeId,
        caches: list[KvCache] | list[PastKv] | None = None,
        last_row: NodeId | None = None,
        fused_attention: bool = False,
    ) -> NodeId:
        """``fused_attention`` (no caches): fused attention kernels forward and backward (training)."""
        h = self.embed_tokens.forward(g, input_ids)
        for i, layer in enumerate(self.layers):
            h = layer.forward(g, h, caches[i] if caches else None, fused_attention)
        if last_row is not None:
            h = g.embedding(last_row, h)  # gather one row: the LM head then runs on [1, hidden]
        return self.lm_head.forward(g, self.norm.forward(g, h))


def build_graph(
    cfg: LlamaConfig,
    mode: str = "logits",
    seq: int = 16,
    max_seq: int = 256,
    batch: int | None = None,
    in_out_weights: bool = False,
    greedy: bool = False,
) -> Graph:
    """The ``logits`` (``seq`` rows), ``train`` (``seq`` rows, output 0 the loss), ``prefill`` (chunk of
    ``seq`` rows) or ``decode`` graph; output 0 is the logits except in ``train``.

    ``batch=B`` (``prefill``/``decode`` only): ``B`` sequences with caches of their own, each at its own
    position: ``input_ids [B*rows]`` (sequence-major; ``[B, rows]`` where ``seq`` is a symbolic name), ``kv_pos [B]``, caches ``[B, max_seq, kv_dim]``;
    a prefill's ``last_row [B]`` holds flat row indexes (``b*seq + row``) and its logits are ``[B, vocab]``.

    ``in_out_weights`` (``prefill``/``decode``): projection weights stored ``[in, out]`` under their HF
    names (:func:`to_in_out` converts HF-layout arrays), and a tied model's LM head reads a parameter of
    its own, ``lm_head.weight`` (the embedding transposed); :class:`LlamaRunner` uses it on the CPU.

    ``greedy`` (``decode`` only): outputs ``logits``, ``next_token`` (each row's argmax, U32 like
    ``input_ids``), ``next_pos`` (``kv_pos + 1``) and ``next_log``: the input ``token_log [n, max_seq + 1]``
    with each row's token written at its ``next_pos`` (one ``greedy_step`` op: one kernel);
    :class:`LlamaRunner` feeds them back into ``input_ids``, ``kv_pos`` and ``token_log`` on the device.
    """
    if greedy and mode != "decode":
        raise ValueError(f"build: greedy is for mode 'decode', got mode={mode!r}")
    if batch is not None and (mode not in ("prefill", "decode") or not isinstance(batch, int) or batch < 1):
        raise ValueError(f"build: batch must be a positive int, with mode 'prefill' or 'decode'; got batch={batch!r}, mode={mode!r}")
    if in_out_weights and mode not in ("prefill", "decode"):
        raise ValueError(f"build: in_out_weights is for mode 'prefill' or 'decode', got mode={mode!r}")
    g = Graph()
    model = LlamaForCausalLM(g, cfg, in_out_weights)
    if mode in ("logits", "train"):
        # train: fused attention kernels (flash_attention), and next-token cross-entropy over U32 token ids [seq].
        logits = model.forward(g, g.input_u32("input_ids", [seq]), fused_attention=mode == "train")
        g.set_outputs([g.sparse_cross_entropy_loss(logits, g.input_u32("labels", [seq]))] if mode == "train" else [logits])
        return g
    if mode == "past":
        return _past_graph(g, model, cfg)
    if mode not in ("prefill", "decode"):
        raise ValueError(f"build: mode must be 'logits', 'train', 'prefill', 'decode' or 'past', got {mode!r}")
    rows = 1 if mode == "decode" else seq
    if isinstance(rows, int) and rows > max_seq:  # seq may name a symbolic dim: any chunk length
        raise ValueError(f"build: a {mode} chunk of {rows} rows does not fit a KV cache of {max_seq} positions")
    n = 1 if batch is None else batch
    if isinstance(rows, int):
        ids = g.input_u32("input_ids", [n * rows])
    else:  # symbolic rows: [rows] alone, or [batch, rows] flattened sequence-major
        ids = g.input_u32("input_ids", [rows]) if batch is None else g.flatten_ids(g.input_u32("input_ids", [n, rows]))
    kv_pos = g.input_u32("kv_pos", [n])
    last = g.input_u32("last_row", [n]) if mode == "prefill" else None
    layers = range(cfg.num_hidden_layers)
    caches = [KvCache.new(g, f"model.layers.{i}.self_attn", max_seq, cfg.kv_dim, kv_pos, batch) for i in layers]
    logits = model.forward(g, ids, caches, last)
    if greedy:
        token, pos, log = g.greedy_step(logits, kv_pos, g.input_u32("token_log", [n, max_seq + 1]))
        g.set_outputs({"logits": logits, "next_token": token, "next_pos": pos, "next_log": log})
    else:
        g.set_outputs([logits])
    return g


def in_out_names(graph: Graph) -> list[str]:
    """The parameters of ``graph`` that an ``in_out_weights`` build stores ``[in, out]``."""
    names = []
    for node in graph.nodes():
        if node.op == "matmul":
            w = graph.node(node.inputs[1])
            if w.op == "parameter":
                names.append(w.attrs["name"])
    return names


def to_in_out(graph: Graph, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF-layout (``[out, in]``) parameters for an ``in_out_weights`` graph: its matmul weights
    transposed; a tied model's ``lm_head.weight`` (absent from its HF parameters) is the embedding
    table transposed."""
    flip = set(in_out_names(graph))
    out = {k: np.ascontiguousarray(v.T) if k in flip else v for k, v in params.items()}
    if TIED_HEAD in flip and TIED_HEAD not in params and EMBED in params:
        out[TIED_HEAD] = np.ascontiguousarray(np.asarray(params[EMBED]).T)
    return out


EMBED, TIED_HEAD = "model.embed_tokens.weight", "lm_head.weight"


BATCH, SEQ, PAST, TOTAL = "batch_size", "sequence_length", "past_sequence_length", "total_sequence_length"


def _past_graph(g: Graph, model: LlamaForCausalLM, cfg: LlamaConfig) -> Graph:
    """The ``past`` graph (see the module docstring); inputs are created in the ecosystem's order."""
    ids = g.input_u32("input_ids", [BATCH, SEQ])
    mask = g.input_u32("attention_mask", [BATCH, TOTAL])
    positions = g.input_u32("position_ids", [BATCH, SEQ])
    shape = [BATCH, cfg.num_key_value_heads, PAST, cfg.head_dim]
    pasts = [
        PastKv(g.input(f"past_key_values.{i}.key", shape), g.input(f"past_key_values.{i}.value", shape), mask, positions)
        for i in range(cfg.num_hidden_layers)
    ]
    logits = model.forward(g, g.flatten_ids(ids), pasts)
    outputs = {"logits": g.reshape(logits, [BATCH, SEQ, cfg.vocab_size])}
    for i, p in enumerate(pasts):
        outputs[f"present.{i}.key"], outputs[f"present.{i}.value"] = p.present_k, p.present_v
    g.set_outputs(outputs)
    return g
