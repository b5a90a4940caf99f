"""A Hugging Face decoder exported in the layout of Optimum / onnxruntime-genai, checked against
``transformers.generate``: the README's onnxruntime + numpy greedy loop (left padding) and
onnxruntime-genai's own greedy search over the exported folder."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_launch import meganeura
from tiny_hf import save_tiny_llama

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [[5, 17, 42, 8, 99, 23, 7], [64, 3, 11]]  # different lengths: the shorter one is padded
STEPS = 24
PAD = 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(folder written by `meganeura export llama`, transformers' greedy tokens [2, STEPS])."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tmp = tmp_path_factory.mktemp("llm")
    model, _ = save_tiny_llama(
        tmp / "hf",
        vocab_size=101,
        hidden_size=48,
        intermediate_size=64,
        num_attention_heads=3,  # odd head count, GQA 3:1
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        initializer_range=0.02,
        bos_token_id=1,
        eos_token_id=100,
        pad_token_id=PAD,
    )
    Tokenizer(WordLevel({"<pad>": 0, "a": 1}, unk_token="<pad>")).save(str(tmp / "hf" / "tokenizer.json"))
    n = max(map(len, PROMPTS))
    ids = torch.tensor([[PAD] * (n - len(p)) + p for p in PROMPTS])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=(ids != PAD).long(), max_new_tokens=STEPS, do_sample=False, pad_token_id=PAD)
    reference = out[:, n:].numpy()
    assert reference.shape == (2, STEPS) and model.config.eos_token_id not in reference  # no early stop to compare around
    meganeura("export", "llama", "--weights", str(tmp / "hf" / "model.safetensors"), "-o", str(tmp / "onnx") + "/")
    return tmp / "onnx", reference


def test_folder_has_the_ecosystem_layout(exported):
    folder, _ = exported
    names = {p.name for p in folder.iterdir()}
    assert {"model.onnx", "model.onnx.data", "config.json", "genai_config.json", "tokenizer.json"} <= names
    model = onnx.load(folder / "model.onnx", load_external_data=False)

    def io(values):
        return {v.name: (v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]) for v in values}

    inputs, outputs = io(model.graph.input), io(model.graph.output)
    i64, f32 = onnx.TensorProto.INT64, onnx.TensorProto.FLOAT
    assert list(inputs)[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert inputs["input_ids"] == inputs["position_ids"] == (i64, ["batch_size", "sequence_length"])
    assert inputs["attention_mask"] == (i64, ["batch_size", "total_sequence_length"])
    for i in range(2):
        for kind in ("key", "value"):
            assert inputs[f"past_key_values.{i}.{kind}"] == (f32, ["batch_size", 1, "past_sequence_length", 16])
            assert outputs[f"present.{i}.{kind}"] == (f32, ["batch_size", 1, "total_sequence_length", 16])
    assert outputs["logits"] == (f32, ["batch_size", "sequence_length", 101])
    assert len(inputs) == 3 + 4 and len(outputs) == 1 + 4


def readme_greedy():
    """The ``greedy`` function of the README's "Use the exported files elsewhere" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use the exported files elsewhere", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    return scope["greedy"]


def test_readme_onnxruntime_greedy_loop_with_left_padding_matches_transformers_generate(exported):
    folder, reference = exported
    tokens = readme_greedy()(folder, PROMPTS, STEPS, pad=PAD)
    np.testing.assert_array_equal(tokens, reference)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime_genai") is None, reason="onnxruntime-genai is not installable here")
def test_onnxruntime_genai_greedy_search_over_the_folder_matches_transformers_generate(exported):
    import onnxruntime_genai as og

    folder, reference = exported
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    n = max(map(len, PROMPTS))
    params.set_search_options(batch_size=len(PROMPTS), max_length=n + STEPS, do_sample=False)
    generator = og.Generator(model, params)
    # onnxruntime-genai pads batched prompts on the right (its attention mask ends at the last non-pad).
    generator.append_tokens(np.array([p + [PAD] * (n - len(p)) for p in PROMPTS], np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    tokens = np.stack([np.asarray(generator.get_sequence(i))[n:] for i in range(len(PROMPTS))])
    np.testing.assert_array_equal(tokens, reference)
