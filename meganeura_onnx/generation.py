"""Autoregressive generation over any model with a KV cache (the loop behind ``meganeura generate``).

The model is anything with the :class:`CausalModel` shape: ``prefill(ids)`` runs the prompt and
returns the logits of its last token, ``decode(token)`` feeds one more token and returns the logits
after it. :func:`generate_batch` does the same for several prompts at once over a
:class:`BatchCausalModel`. Sampling happens on the host from one row of logits per sequence and step,
except greedy decoding (``temperature=0``) of a model that has ``decode_greedy(token, count)``: the
argmax taken where the logits are, ``count`` steps queued back to back on the device and their tokens
read back at once (the LLaMA runner of ``models/llama.py``). The tokens are the same; the steps run
in chunks of up to :data:`GREEDY_CHUNK`, so up to ``GREEDY_CHUNK - 1`` steps past a stop id are
computed and dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import numpy as np

GREEDY_CHUNK = 16
"""Greedy steps queued per ``decode_greedy`` call: one wait per chunk instead of per token."""


class CausalModel(Protocol):
    max_seq: int

    def prefill(self, ids: Sequence[int]) -> np.ndarray: ...

    def decode(self, token: int) -> np.ndarray: ...


class BatchCausalModel(Protocol):
    """Several sequences at once, each at its own position: ``prefill(prompts)`` returns one row of
    logits per prompt ``[len(prompts), vocab]``, ``decode(tokens)`` takes one token per prompt."""

    max_seq: int
    batch: int

    def prefill(self, prompts: Sequence[Sequence[int]]) -> np.ndarray: ...

    def decode(self, tokens: Sequence[int]) -> np.ndarray: ...


def sample(logits: np.ndarray, temperature: float = 0.0, top_k: int = 0, rng: np.random.Generator | None = None) -> int:
    """The next token from one row of logits: argmax when ``temperature`` is 0 (greedy), else a draw
    from ``softmax(logits / temperature)`` restricted to the ``top_k`` largest (0 = all)."""
    logits = np.asarray(logits, dtype=np.float64).reshape(-1)
    if temperature < 0:
        raise ValueError(f"sample: temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return int(np.argmax(logits))
    rng = rng if rng is not None else np.random.default_rng()
    scaled = logits / temperature
    if 0 < top_k < scaled.size:
        cutoff = np.partition(scaled, -top_k)[-top_k]
        scaled = np.where(scaled >= cutoff, scaled, -np.inf)
    p = np.exp(scaled - scaled.max())
    return int(rng.choice(scaled.size, p=p / p.sum()))


def check_budget(prompt_len: int, max_new_tokens: int, max_seq: int) -> None:
    """Clear error when the prompt plus the tokens to generate do not fit the KV cache."""
    if prompt_len == 0:
        raise ValueError("generate: the prompt is empty (no tokens)")
    if prompt_len > max_seq:
        raise ValueError(f"generate: the prompt has {prompt_len} tokens, longer than the KV cache ({max_seq} positions)")
    # The last generated token is never fed back, so positions 0 .. prompt_len + max_new_tokens - 2 are written.
    if prompt_len + max_new_tokens - 1 > max_seq:
        raise ValueError(
            f"generate: {prompt_len} prompt tokens + {max_new_tokens} new tokens need {prompt_len + max_new_tokens - 1} cache positions; "
            f"the KV cache has {max_seq} (raise max_seq or lower max_new_tokens)"
        )


def generate(
    model: CausalModel,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int = 0,
    seed: int | None = None,
    stop_ids: Iterable[int] = (),
) -> Iterator[int]:
    """Yield up to ``max_new_tokens`` new token ids as they are produced (stops after a stop id)."""
    check_budget(len(prompt_ids), max_new_tokens, model.max_seq)
    rng = np.random.default_rng(seed)
    stop = set(stop_ids)
    if max_new_tokens <= 0:
        return
    greedy = getattr(model, "decode_greedy", None) if temperature == 0 else None
    chunk, produced = [sample(model.prefill(list(prompt_ids)), temperature, top_k, rng)], 0
    while True:
        for token in chunk:
            yield token
            produced += 1
            if token in stop or produced == max_new_tokens:
                return
        if greedy is not None:
            chunk = greedy(chunk[-1], min(GREEDY_CHUNK, max_new_tokens - produced))
        else:
            chunk = [sample(model.decode(chunk[-1]), temperature, top_k, rng)]


def generate_batch(
    model: BatchCausalModel,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int = 0,
    seed: int | None = None,
    stop_ids: Iterable[int] = (),
) -> list[list[int]]:
    """Up to ``max_new_tokens`` new token ids for each prompt (prompts may differ in length; each
    sequence stops after its own stop id). The batch keeps its shape until every sequence is done:
    a finished sequence's row is still computed, its tokens dropped."""
    if not 1 <= len(prompts) <= model.batch:
        raise ValueError(f"generate_batch: expected 1 to {model.batch} prompts (the model's batch), got {len(prompts)}")
    for p in prompts:
        check_budget(len(p), max_new_tokens, model.max_seq)
    out: list[list[int]] = [[] for _ in prompts]
    if max_new_tokens <= 0:
        return out
    rng = np.random.default_rng(seed)
    stop = set(stop_ids)
    done = [False] * len(prompts)
    greedy = getattr(model, "decode_greedy", None) if temperature == 0 else None
    steps = [[sample(row, temperature, top_k, rng)] for row in model.prefill([list(p) for p in prompts])]  # [sequence][step]
    produced = 0
    while True:
        for tokens in zip(*steps, strict=True):
            for i, token in enumerate(tokens):
                if not done[i]:
                    out[i].append(token)
                    done[i] = token in stop
            produced += 1
            if all(done) or produced == max_new_tokens:
                return out
        last = [s[-1] for s in steps]
        if greedy is not None:
            steps = greedy(last, min(GREEDY_CHUNK, max_new_tokens - produced))
        else:
            steps = [[sample(row, temperature, top_k, rng)] for row in model.decode(last)]
