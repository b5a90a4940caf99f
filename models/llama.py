"""LLaMA / SmolLM2 family (``LlamaForCausalLM``), with HF parameter names so checkpoints load by name.

These graphs share every parameter name:

- ``logits``: ``input_ids [T]`` -> logits ``[T, vocab]``, plain causal attention, no cache (parity
  checks, training, export).
- ``prefill``: a chunk of ``T`` prompt tokens at positions ``kv_pos .. kv_pos+T-1``; writes their keys
  and values into the per-layer caches and returns the logits of row ``last_row`` only (``[1, vocab]``;
  the row is picked with an ``embedding`` gather so the LM head runs on one row).
- ``decode``: the same with ``T = 1``.
- ``train``: the ``logits`` graph with a next-token cross-entropy loss (one-hot ``labels [T, vocab]``)
  as output 0, for ``build_session`` / ``meganeura train``.
- ``past``: the decoder in the layout Hugging Face Optimum and onnxruntime-genai use (inputs
  ``input_ids``, ``attention_mask``, ``position_ids`` ``[batch_size, ...]`` and
  ``past_key_values.{i}.key/.value [batch_size, kv_heads, past_sequence_length, head_dim]``; outputs
  ``logits [batch_size, sequence_length, vocab]`` and ``present.{i}.key/.value``), all sizes
  symbolic; :func:`export_folder` writes it as ``model.onnx`` with int64 index inputs, beside
  ``genai_config.json``, ``config.json`` and the tokenizer files.

In an exported ``prefill``/``decode`` file each cache input ``model.layers.{i}.self_attn.k_cache`` /
``v_cache`` ``[max_seq, kv_heads*head_dim]`` is also an output ``<name>.next``: the cache with this
step's rows written at ``kv_pos``. Outside our Session, feed it back as the input of the next step.

How prefill hands over to decode (:class:`LlamaRunner`): the prefill and decode sessions share the
parameter buffers and the cache buffers on the device (``Session.share_buffers``), so nothing is
copied. By default a prompt runs in one step of exactly its rows: the prefill session's row count is
symbolic, so one compiled session serves every prompt length (on CUDA, where steps replay as CUDA
graphs of fixed shapes, prompts of up to 128 tokens replay a fixed 64-row session in up to 2 steps
and longer ones take one step of the symbolic session, built on first use). With a fixed
``prefill_chunk`` of C rows, chunks start at 0, C, 2C, ...; a remainder is covered by a last chunk
ending exactly at the prompt's end (it recomputes a few rows, writing the same keys/values again); a
prompt shorter than C is padded. Padded rows write cache rows past the prompt, but decode writes
position p before it attends to rows [0, p], so those rows are overwritten before anyone reads them.

Several sequences at once (:class:`LlamaBatchRunner`): the ``prefill``/``decode`` graphs built with
``batch=B`` hold caches ``[B, max_seq, kv_dim]`` and take ``kv_pos [B]``, one position per sequence,
so prompts of different lengths decode together without a mask.

Model-file contracts: ``build(**kwargs) -> Graph``, ``export_folder(...)`` (``meganeura export``), ``load_generator(...)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from meganeura_onnx.models._llama_graph import PAST, SEQ, TOTAL, build_graph, in_out_names, to_in_out
from meganeura_onnx.models._llama_graph import LlamaForCausalLM as LlamaForCausalLM  # re-exported: part of the model file's API

from meganeura_onnx import Graph, Session, build_inference_session
from meganeura_onnx.init import default_parameters
from meganeura_onnx.io import hf_parameters, load_safetensors
from meganeura_onnx.io.genai import export_genai_folder
from meganeura_onnx.nn import LlamaConfig

PRESETS: dict[str, LlamaConfig] = {
    # HuggingFaceTB/SmolLM2-135M's config.json (GQA 9 query / 3 KV heads, tied embeddings).
    "smollm2-135m": LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        bos_token_id=0,
        eos_token_id=0,
    ),
    # A few-second model for tests and training demos.
    "tiny": LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        max_position_embeddings=512,
    ),
}


def load_config(config: str | Path | LlamaConfig | None = None, preset: str | None = None) -> LlamaConfig:
    """A config from a HF ``config.json`` path, a preset name, or as given."""
    if isinstance(config, LlamaConfig):
        return config
    if config is not None:
        return LlamaConfig.from_json(config)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {sorted(PRESETS)}")
    return PRESETS[preset]


def build(preset: str = "tiny", mode: str = "logits", seq: int = 16, max_seq: int = 256, config: str | None = None) -> Graph:
    """Model-file entry point for ``meganeura export models/llama.py --set preset=smollm2-135m --set mode=decode``."""
    return build_graph(load_config(config, preset), mode, seq, max_seq)


class LlamaRunner:
    """Prefill + KV-cache decode on ONNX Runtime; see the module docstring for the design.

    ``weights``: a HF safetensors file, or a name -> array dict; None gives the default random init.
    ``prefill_chunk``: rows per prefill step; None (default): every prompt in one step of its own rows
    (a step's cost is mostly per layer, not per row: on the 2-core CPU VM a 300-token prompt took
    0.67-0.79 s in one step against 0.92-1.11 s in 64-row steps), except that with CUDA graphs prompts
    of up to 128 tokens replay a 64-row step (:meth:`prefill_plan` says which); an int: fixed chunks of
    that many rows, each step a CUDA graph where the decode step is one.
    ``threads``: ONNX Runtime's intra-op threads; None: on the CPU one per CPU this process may run on
    (``os.sched_getaffinity``), set explicitly because ORT's own default pins its threads to cores,
    which a shared machine punishes (SmolLM2-135M, 2-core VM at load ~2: 62-65 ms per token pinned,
    42-54 ms not); on CUDA ORT's default. ``thread_spinning``: busy-wait between ops (ORT's default,
    off here): a memory-bound decode step rarely gains from it and it burns a core (2-core VM, load ~2:
    44-45 ms per token and 86-88 ms CPU spinning, 42 and 74 ms not; at load 4-8, 109-300 ms against
    62-120). ``threads=1`` spends the least CPU per token (~50 ms, 48-58 ms wall). (The decode step
    as MatMul, ``decode_layer=False``.)
    ``merge_projections``: the prefill runs q/k/v and gate/up as one product each (None: on CUDA;
    ``build_inference_session``).
    ``add_rms_norm``: the prefill's residual adds and the RMSNorms after them as ``AddRMSNorm`` nodes (None:
    on CUDA; ``build_inference_session``).
    ``qkv_rope_cache``: the prefill's split of each merged q/k/v product, its ropes and cache writes as one
    ``QKVRopeCacheWrite`` node (None: on CUDA, and on the CPU with our kernel library; ``build_inference_session``).
    ``swiglu_packed``: the prefill's split of each merged gate|up product and the SwiGLU after it as one
    ``SwiGLUPacked`` node (None: on CUDA, and on the CPU with our kernel library; ``build_inference_session``).
    ``session_options``: further ``ort.SessionOptions`` attributes for every session of the runner, by
    name (e.g. ``{"enable_profiling": True}``; an unknown name is a ValueError); they override ``threads``.
    ``decode_layer``: each decoder layer of the decode step as one ``DecodeLayer``; None (default): on
    CUDA, and on the CPU with our kernel library (its CPU kernel runs a layer's loops on one team of
    threads: no pool wake-up per product); False: MatMul (CPU) or five fused kernels per layer (CUDA).
    """

    batch: int | None = None
    """Sequences per step: None here (one sequence, caches ``[max_seq, kv_dim]``); see :class:`LlamaBatchRunner`."""

    def __init__(
        self,
        cfg: LlamaConfig,
        weights: str | Path | dict[str, np.ndarray] | None = None,
        *,
        max_seq: int = 256,
        prefill_chunk: int | None = None,
        device: str = "cpu",
        strict: bool = True,
        seed: int = 0,
        use_custom_ops: bool = True,
        cuda_graph: bool | None = None,
        precision: str = "fp32",
        threads: int | None = None,
        thread_spinning: bool = False,
        decode_layer: bool | None = None,
        merge_projections: bool | None = None,
        add_rms_norm: bool | None = None,
        qkv_rope_cache: bool | None = None,
        swiglu_packed: bool | None = None,
        session_options: Mapping[str, object] | None = None,
    ) -> None:
        self.cfg, self.max_seq, self.device = cfg, int(max_seq), device
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"LlamaRunner: threads must be a positive int or None, got {threads!r}")
        if threads is None and device == "cpu":
            threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        from meganeura_onnx import custom_op_library

        if cuda_graph is None:  # default: replay the steps as CUDA graphs wherever the CUDA kernels make that possible
            cuda_graph = device == "cuda" and use_custom_ops and custom_op_library("cuda") is not None
        if decode_layer is None and device == "cpu":  # default: one DecodeLayer per layer wherever our CPU kernel runs it
            decode_layer = use_custom_ops and custom_op_library("cpu") is not None
        # On the CPU the projections run as MatMul on [in, out] weights (InOutLinear): ORT's one-row
        # product is ~40% faster so than as Gemm(transB=1) on HF's [out, in] layout.
        self.in_out = device == "cpu"
        hf_layout = build_graph(cfg, "decode", 1, self.max_seq, self.batch)  # names and shapes as in the checkpoint
        decode_graph = build_graph(cfg, "decode", 1, self.max_seq, self.batch, self.in_out, greedy=True)
        if weights is None:
            params = default_parameters(hf_layout, seed)
        elif isinstance(weights, dict):
            params = weights
        else:
            params = hf_parameters(hf_layout, weights, strict=strict)
        self._hf_layout, self._in_out_graph, self._flip = hf_layout, decode_graph, set(in_out_names(decode_graph))
        params = to_in_out(decode_graph, params)
        # cuda_graph: the one-token decode step and the fixed-size prefill chunk are each replayed as
        # one CUDA graph (their buffers never move: weights, in-place KV caches shared by both
        # sessions, inputs and logits are bound once), so a step costs its kernels, not their launches.
        # precision: bf16/fp16 store the projection weights (and KV caches where the cache kernels take
        # half) in half precision; logits come back as float32.
        # merge_projections: the prefill chunk (more than 16 rows) runs q/k/v and gate/up as one product
        # each against the weights joined in the graph (by default on CUDA only); the decode step keeps its
        # products (fused on CUDA).
        common = dict(
            parameters=params,
            use_custom_ops=use_custom_ops,
            precision=precision,
            session_config={"session.intra_op.allow_spinning": "1" if thread_spinning else "0"},
            session_options={**({} if threads is None else {"intra_op_num_threads": threads}), **(session_options or {})},
            merge_projections=merge_projections,
            add_rms_norm=add_rms_norm,
            qkv_rope_cache=qkv_rope_cache,
            swiglu_packed=swiglu_packed,
        )
        # decode_layer: each decoder layer of the decode step as one DecodeLayer kernel (default: on CUDA, and on
        # the CPU with our kernel library).
        # feedback: the step's argmax and next position become the next step's input_ids and kv_pos on
        # the device, so greedy steps (decode_argmax) upload nothing and read back 4 bytes per sequence.
        feedback = {"input_ids": "next_token", "kv_pos": "next_pos", "token_log": "next_log"}
        self.decoder = build_inference_session(
            decode_graph, device, cuda_graph=cuda_graph, decode_layer=decode_layer, feedback=feedback, **common
        )
        self._build_prefill(prefill_chunk, cuda_graph, common)
        self.position = 0
        self._on_device: tuple | None = None  # (tokens, positions) the decoder's fed-back inputs hold

    def _build_prefill(self, prefill_chunk: int | None, cuda_graph: bool, common: dict) -> None:
        """The prefill session(s). ``chunk``: the fixed session's rows, None where every prompt takes the
        session of symbolic rows. By default with CUDA graphs (fixed shapes only) prompts of up to 128
        tokens replay a fixed 64-row session in up to 2 steps and longer ones take one step of the
        symbolic session (no graph; built when first needed: that first prefill took 0.5-0.9 s on an H200).
        H200, SmolLM2-135M fp16: 128 tokens 3.2-3.6 ms in 64-row steps, 3.9-5.3 in one symbolic step; 192
        tokens 5.3 against 5.5; 300 tokens 7.9 against 3.4; 2048 tokens 55-58 against 6.4-8.1
        (benchmarks/prefill_any_length.py)."""
        self.chunk = None if prefill_chunk is None else max(1, min(int(prefill_chunk), self.max_seq))
        self._one_step_past: int | None = None  # longer prompts: one step of the symbolic session
        if self.chunk is None and cuda_graph:
            self.chunk = min(64, self.max_seq)
            self._one_step_past = 2 * self.chunk
        cfg, device = self.cfg, self.device
        self._any_rows: Session | None = None
        settings = {k: v for k, v in common.items() if k != "parameters"}  # (the runner keeps no host copy of the weights)

        def build_any_rows(parameters: dict[str, np.ndarray] | None = None) -> Session:
            graph = build_graph(cfg, "prefill", "rows", self.max_seq, self.batch, self.in_out)
            if parameters is None:  # built later: the weights the decoder holds now (shared right after)
                parameters = {name: self.decoder.read_param(name) for name in graph.parameters()}
            return build_inference_session(graph, device, parameters=parameters, **settings)

        self._build_any_rows = build_any_rows
        if self.chunk is None:
            self.prefiller = self._any_rows = build_any_rows(common["parameters"])
        else:
            prefill_graph = build_graph(cfg, "prefill", self.chunk, self.max_seq, self.batch, self.in_out)
            self.prefiller = build_inference_session(prefill_graph, device, cuda_graph=cuda_graph, **common)
        self.prefiller.share_buffers(self.decoder, state=False)  # one copy of the weights on the device

    @property
    def sessions(self) -> tuple[Session, Session]:
        return self.prefiller, self.decoder

    def load_weights(self, path: str | Path, strict: bool = True) -> None:
        """Load HF safetensors into the shared parameters (both sessions see them)."""
        if not self._flip:
            load_safetensors(self.decoder, path, strict)
            return
        values = hf_parameters(self._hf_layout, path, strict=strict)
        for name, value in to_in_out(self._in_out_graph, values).items():  # (a tied LM head's copy too)
            self.decoder.set_parameter(name, value)

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        """Run the prompt from position 0; returns the logits ``[vocab]`` after its last token."""
        n = len(ids)
        if n == 0:
            raise ValueError("prefill: the prompt is empty")
        if n > self.max_seq:
            raise ValueError(f"prefill: the prompt has {n} tokens, longer than the KV cache ({self.max_seq} positions)")
        self._check_ids(ids)
        last = self._run_prefill([list(ids)], [0]).reshape(-1)
        self.position = n
        return last

    def append(self, ids: Sequence[int]) -> np.ndarray:
        """Feed ``ids`` after the tokens so far (the prompt, decoded tokens, earlier appends) as one more
        prefill at the next position: a further turn of a conversation without running the earlier ones
        again (onnxruntime-genai's ``append_tokens``). Returns the logits ``[vocab]`` after the last of them."""
        n = len(ids)
        if n == 0:
            raise ValueError("append: no tokens given")
        if self.position + n > self.max_seq:
            raise ValueError(f"append: {n} tokens after position {self.position} do not fit the KV cache ({self.max_seq} positions)")
        self._check_ids(ids)
        last = self._run_prefill([list(ids)], [self.position]).reshape(-1)
        self.position += n
        return last

    def prefill_plan(self, n: int) -> tuple[int, int]:
        """``(steps, rows per step)`` of :meth:`prefill` for a prompt of ``n`` tokens (a batch: its longest)."""
        return (1, n) if self._any_rows_for(n) else (-(-n // self.chunk), self.chunk)

    def _any_rows_for(self, n: int) -> bool:
        return self.chunk is None or (self._one_step_past is not None and n > self._one_step_past)

    def _run_prefill(self, prompts: list[list[int]], at: list[int]) -> np.ndarray:
        """The prompts (one per sequence, sequence b's from position ``at[b]``) in :meth:`prefill_plan`'s
        steps of C rows: in step k a prompt of n tokens takes its rows from ``min(k*C, max(n-C, 0))``,
        padded to C (the symbolic session where a fixed chunk would run past the cache). Returns the
        logits after each prompt's last token; the decoder's fed-back inputs no longer hold a step's."""
        lengths = [len(p) for p in prompts]
        longest = max(lengths)
        any_rows = self._any_rows_for(longest) or any(a + max(self.chunk, n) > self.max_seq for a, n in zip(at, lengths, strict=True))
        steps, c = (1, longest) if any_rows else self.prefill_plan(longest)
        s = self._any_rows_session() if any_rows else self.prefiller
        s.share_buffers(self.decoder, parameters=False)  # continue from the decoder's current cache buffers
        for k in range(steps):
            starts = [min(k * c, max(n - c, 0)) for n in lengths]
            ids, last = np.zeros((len(prompts), c), dtype=np.uint32), []
            for b, (p, start) in enumerate(zip(prompts, starts, strict=True)):
                rows = min(c, len(p) - start)
                ids[b, :rows] = p[start : start + rows]
                last.append(b * c + rows - 1)
            # a batch's symbolic rows are an input [batch, rows]; the other prefills take [batch * rows]
            s.set_input_u32("input_ids", ids if any_rows and self.batch is not None else ids.reshape(-1))
            s.set_input_u32("kv_pos", [a + start for a, start in zip(at, starts, strict=True)])
            s.set_input_u32("last_row", last)
            s.step()
        self.decoder.share_buffers(s, parameters=False)
        self._on_device = None
        return s.read_output_by_index(0)

    def _any_rows_session(self) -> Session:
        if self._any_rows is None:
            self._any_rows = self._build_any_rows()
            self._any_rows.share_buffers(self.decoder, state=False)
        return self._any_rows

    def decode(self, token: int) -> np.ndarray:
        """Feed one token at the next position; returns the logits ``[vocab]`` after it."""
        if self.position >= self.max_seq:
            raise ValueError(f"decode: the KV cache is full ({self.max_seq} positions)")
        self._check_ids([token])
        d = self.decoder
        d.set_input_u32("input_ids", [token])
        d.set_input_u32("kv_pos", [self.position])
        d.step()
        self.position += 1
        self._on_device = None
        return d.read_output_by_index(0).reshape(-1)

    def decode_argmax(self, token: int) -> int:
        """``argmax(decode(token))`` chosen on the device; when ``token`` is what the previous call returned,
        nothing is uploaded (the step reads what the last one left there) and only the token comes back."""
        return self.decode_greedy(token, 1)[0]

    def decode_greedy(self, token: int, count: int) -> list[int]:
        """``count`` greedy steps from ``token``, queued on the device back to back (``Session.steps``:
        no wait between them) with the tokens read back once, at the end."""
        chosen = self._greedy_steps([token], [self.position], count)[0]
        self.position += count
        return chosen

    def _greedy_steps(self, tokens: list[int], positions: list[int], count: int) -> list[list[int]]:
        """``count`` decode steps with the argmax on the device; uploads ``tokens`` and ``positions``
        unless the decoder's fed-back inputs already hold them. Returns each row's chosen tokens."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"decode_greedy: count must be a positive int, got {count!r}")
        if max(positions) + count > self.max_seq:
            raise ValueError(f"decode: the KV cache is full ({self.max_seq} positions): {count} steps from {max(positions)} do not fit")
        d = self.decoder
        if self._on_device != (tuple(tokens), tuple(positions)):
            self._check_ids(tokens)
            d.set_input_u32("input_ids", tokens)
            d.set_input_u32("kv_pos", positions)
        d.steps(count)
        if count == 1:
            chosen = [[int(t)] for t in d.read_output("next_token")]
        else:  # token_log[b, p] holds the token chosen for position p
            log = d.read_output("next_log")
            chosen = [log[b, p + 1 : p + 1 + count].tolist() for b, p in enumerate(positions)]
        self._on_device = (tuple(c[-1] for c in chosen), tuple(p + count for p in positions))
        return chosen

    def _check_ids(self, ids: Sequence[int]) -> None:
        bad = [t for t in ids if not 0 <= int(t) < self.cfg.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are out of range for a vocabulary of {self.cfg.vocab_size}")


class LlamaBatchRunner(LlamaRunner):
    """``batch`` sequences prefilled and decoded together, each at its own position (the graphs'
    caches are ``[batch, max_seq, kv_dim]``, ``kv_pos`` is ``[batch]``); keyword arguments as
    :class:`LlamaRunner`.

    Prompts of different lengths need no mask: every step gives each sequence its own ``kv_pos``.
    Prefill runs as :meth:`LlamaRunner.prefill_plan` says for the longest prompt (by default one step of
    its rows; with a ``prefill_chunk`` of C, ``ceil(longest / C)`` steps); in step k a sequence of n tokens takes its
    rows from ``min(k*C, max(n-C, 0))``, so a sequence that is done re-runs its last chunk (writing the
    same keys and values again) and every sequence's last token lies in the last step. Rows past a
    prompt shorter than C are padding: they write cache rows at and after the prompt's end, which
    decode overwrites before it reads them (as in :class:`LlamaRunner`). Fewer prompts than
    ``batch`` fill the spare rows with a copy of the first prompt, whose results are dropped.
    """

    def __init__(self, cfg: LlamaConfig, weights: str | Path | dict[str, np.ndarray] | None = None, *, batch: int, **kwargs) -> None:
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"LlamaBatchRunner: batch must be an int >= 1, got {batch!r}")
        self.batch = batch
        super().__init__(cfg, weights, **kwargs)
        self.positions: list[int] = [0] * batch
        self.active = batch

    def prefill(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """Run up to ``batch`` prompts from position 0; returns the logits ``[len(prompts), vocab]``
        after each prompt's last token."""
        if not 1 <= len(prompts) <= self.batch:
            raise ValueError(f"prefill: expected 1 to {self.batch} prompts (the runner's batch), got {len(prompts)}")
        for i, ids in enumerate(prompts):
            if len(ids) == 0:
                raise ValueError(f"prefill: prompt {i} is empty")
            if len(ids) > self.max_seq:
                raise ValueError(f"prefill: prompt {i} has {len(ids)} tokens, longer than the KV cache ({self.max_seq} positions)")
            self._check_ids(ids)
        self.active = len(prompts)
        padded = self._fill([list(p) for p in prompts])
        last = self._run_prefill(padded, [0] * self.batch)
        self.positions = [len(p) for p in padded]
        return last[: self.active]

    def append(self, token_lists: Sequence[Sequence[int]]) -> np.ndarray:
        """Feed each sequence's tokens after its tokens so far, as :meth:`LlamaRunner.append`, one list per
        prompt of the last prefill (each position plus the longest list must fit the KV cache: the
        shorter lists are padded to it); returns the logits ``[len(token_lists), vocab]``."""
        if len(token_lists) != self.active:
            raise ValueError(f"append: expected {self.active} token lists (one per prompt of the last prefill), got {len(token_lists)}")
        longest = max(len(t) for t in token_lists)
        if min(len(t) for t in token_lists) == 0 or max(self.positions) + longest > self.max_seq:
            raise ValueError(
                f"append: every list needs a token, and the longest ({longest}) must fit the KV cache after the positions "
                f"{self.positions[: self.active]} ({self.max_seq} positions)"
            )
        for t in token_lists:
            self._check_ids(t)
        padded = self._fill([list(t) for t in token_lists])
        last = self._run_prefill(padded, self.positions)
        self.positions = [p + len(t) for p, t in zip(self.positions, padded, strict=True)]
        return last[: self.active]

    def _fill(self, rows: list) -> list:
        """``rows`` (one per prompt of the last prefill) and, for the spare sequences of the batch, copies
        of the first: every step runs all ``batch`` rows, the spare ones' results are dropped."""
        return rows + [rows[0]] * (self.batch - len(rows))

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        """Feed one token per sequence, each at its own next position; returns the logits ``[len(tokens), vocab]``."""
        if len(tokens) != self.active:
            raise ValueError(f"decode: expected {self.active} tokens (one per prompt of the last prefill), got {len(tokens)}")
        if max(self.positions) >= self.max_seq:
            raise ValueError(f"decode: the KV cache is full ({self.max_seq} positions)")
        self._check_ids(tokens)
        d = self.decoder
        d.set_input_u32("input_ids", self._fill(list(tokens)))
        d.set_input_u32("kv_pos", self.positions)
        d.step()
        self.positions = [p + 1 for p in self.positions]
        self._on_device = None
        return d.read_output_by_index(0)[: self.active]

    def decode_argmax(self, tokens: Sequence[int]) -> list[int]:
        """``argmax(decode(tokens), axis=-1)``, chosen on the device, as :meth:`LlamaRunner.decode_argmax`."""
        return [row[0] for row in self.decode_greedy(tokens, 1)]

    def decode_greedy(self, tokens: Sequence[int], count: int) -> list[list[int]]:
        """``count`` greedy steps per sequence, as :meth:`LlamaRunner.decode_greedy`: each sequence's
        chosen tokens (with fewer prompts than ``batch``, the spare rows' tokens are uploaded each call)."""
        if len(tokens) != self.active:
            raise ValueError(f"decode: expected {self.active} tokens (one per prompt of the last prefill), got {len(tokens)}")
        chosen = self._greedy_steps(self._fill(list(tokens)), self.positions, count)
        self.positions = [p + count for p in self.positions]
        return chosen[: self.active]


def logits(cfg: LlamaConfig, params: dict[str, np.ndarray], ids: Sequence[int], device: str = "cpu") -> np.ndarray:
    """Full-sequence logits ``[T, vocab]`` (no cache) for parity checks."""
    s = build_inference_session(build_graph(cfg, "logits", len(ids)), device, parameters=params)
    s.set_input_u32("input_ids", list(ids))
    s.step()
    return s.read_output_by_index(0)


def config_beside(weights: str | Path) -> Path:
    return Path(weights).with_name("config.json")


def load_generator(
    weights: str | Path | None,
    *,
    config: str | Path | None = None,
    preset: str | None = None,
    max_seq: int = 256,
    prefill_chunk: int | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    batch: int | None = None,
) -> LlamaRunner:
    """Model-file entry point for ``meganeura generate``: config.json beside the weights by default;
    ``batch``: a :class:`LlamaBatchRunner` for that many prompts at once."""
    if config is None and preset is None and weights is not None:
        config = config_beside(weights)
        if not config.is_file():
            raise FileNotFoundError(f"no config.json beside {weights}; pass --config")
    cfg = load_config(config, preset)
    kw = dict(max_seq=max_seq, prefill_chunk=prefill_chunk, device=device, precision=precision)
    return LlamaRunner(cfg, weights, **kw) if batch is None else LlamaBatchRunner(cfg, weights, batch=batch, **kw)


def stop_ids(cfg: LlamaConfig) -> set[int]:
    return cfg.eos_ids


def save_config(cfg: LlamaConfig, path: str | Path) -> None:
    Path(path).write_text(json.dumps(cfg.to_dict(), indent=2))


def export_folder(
    out_dir: str | Path,
    *,
    weights: str | Path | None = None,
    config: str | Path | None = None,
    allow_missing: bool = False,
    seed: int = 0,
    opset: int | None = None,
    preset: str = "tiny",
) -> list[Path]:
    """Model-file entry point for ``meganeura export llama --weights DIR/model.safetensors -o OUT_DIR/``.

    Writes the ``past`` graph as ``OUT_DIR/model.onnx`` (+ ``model.onnx.data``) with int64
    ``input_ids``/``attention_mask``/``position_ids``, the present length named
    ``total_sequence_length``; copies ``config.json`` (or writes the preset's) and the tokenizer
    files found beside the weights; writes ``genai_config.json``. Returns the files written.
    """
    if config is None and weights is not None:
        config = config_beside(weights)
        if not config.is_file():
            raise FileNotFoundError(f"no config.json beside {weights}; pass --config")
    cfg = load_config(config, None if config is not None else preset)
    raw = json.loads(Path(config).read_text()) if config is not None else cfg.to_dict()
    graph, names = build_graph(cfg, "past"), {f"{PAST}+{SEQ}": TOTAL}
    return export_genai_folder(graph, cfg, raw, out_dir, weights, allow_missing=allow_missing, seed=seed, opset=opset, dim_names=names)
