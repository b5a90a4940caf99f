"""onnxruntime-genai's ``genai_config.json`` for a LLaMA-family decoder exported in the ecosystem's
``past`` layout (inputs ``input_ids``/``attention_mask``/``position_ids`` and
``past_key_values.{i}.key/.value``, outputs ``logits`` and ``present.{i}.key/.value``)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from ..export import export_onnx
from ..graph import Graph
from ..nn import LlamaConfig
from .hf import parameters_from_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def export_genai_folder(
    graph: Graph,
    cfg: LlamaConfig,
    raw: dict,
    out_dir: str | Path,
    weights: str | Path | None,
    *,
    allow_missing: bool = False,
    seed: int = 0,
    opset: int | None = None,
    dim_names: Mapping[str, str] | None = None,
) -> list[Path]:
    """``graph`` (a decoder in the ``past`` layout) as ``out_dir/model.onnx`` (+ ``model.onnx.data``) with
    int64 index inputs and the weights from ``weights`` (parameters it lacks take the default init
    when ``allow_missing``, with a note on stderr), beside :func:`write_genai_files`'s files. Returns
    the files written."""
    params = {}
    if weights is not None:
        params, report = parameters_from_file(graph, weights, allow_missing=allow_missing)
        if report.missing:
            print(
                f"note: {len(report.missing)} parameters are not in {weights} and take the default init: {report.missing[:8]}",
                file=sys.stderr,
            )
    out = Path(out_dir)
    model_path = out / "model.onnx"
    export_onnx(
        graph,
        model_path,
        parameters=params,
        seed=seed,
        opset=opset,
        external_data=True,
        int64_indices=True,
        dim_names=dict(dim_names or {}),
    )
    return [model_path, out / "model.onnx.data", *write_genai_files(out, cfg, raw, weights)]


def write_genai_files(out: Path, cfg: LlamaConfig, raw: dict, weights: str | Path | None) -> list[Path]:
    """Beside an exported ``model.onnx`` in ``out``: ``config.json`` (``raw``), ``genai_config.json`` and
    the tokenizer files found beside ``weights``. Returns the files written."""
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    (out / "genai_config.json").write_text(json.dumps(genai_config(cfg, raw), indent=2))
    written = [out / "config.json", out / "genai_config.json"]
    for name in TOKENIZER_FILES:
        src = Path(weights).with_name(name) if weights is not None else None
        if src is not None and src.is_file():
            shutil.copyfile(src, out / name)
            written.append(out / name)
    return written


def genai_config(cfg: LlamaConfig, raw: dict) -> dict:
    """onnxruntime-genai's ``genai_config.json`` for the ``past`` model (the fields its model builder writes);
    ``raw``: the Hugging Face ``config.json`` as read (its token ids win over ``cfg``'s)."""
    eos = raw.get("eos_token_id", cfg.eos_token_id)
    eos = eos if eos is not None else 0
    bos = raw.get("bos_token_id", cfg.bos_token_id)
    pad = raw.get("pad_token_id")
    pad = pad if pad is not None else eos[0] if isinstance(eos, list) else eos
    return {
        "model": {
            "bos_token_id": bos if bos is not None else 1,
            "context_length": cfg.max_position_embeddings,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx",
                "head_size": cfg.head_dim,
                "hidden_size": cfg.hidden_size,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "position_ids": "position_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key", "present_value_names": "present.%d.value"},
                "num_attention_heads": cfg.num_attention_heads,
                "num_hidden_layers": cfg.num_hidden_layers,
                "num_key_value_heads": cfg.num_key_value_heads,
            },
            "eos_token_id": eos,
            "pad_token_id": pad,
            "type": "llama",
            "vocab_size": cfg.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": cfg.max_position_embeddings,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": False,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }
