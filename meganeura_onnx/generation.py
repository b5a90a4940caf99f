"""Autoregressive generation over any model with a KV cache (the loop behind ``meganeura generate``).

The model is anything with the :class:`CausalModel` shape: ``prefill(ids)`` runs the prompt and
returns the logits of its last token, ``decode(token)`` feeds one more token and returns the logits
after it. Sampling happens on the host from one row of logits per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import numpy as np


class CausalModel(Protocol):
    max_seq: int

    def prefill(self, ids: Sequence[int]) -> np.ndarray: ...

    def decode(self, token: int) -> np.ndarray: ...


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
    token = sample(model.prefill(list(prompt_ids)), temperature, top_k, rng)
    for k in range(max_new_tokens):
        yield token
        if token in stop or k == max_new_tokens - 1:
            return
        token = sample(model.decode(token), temperature, top_k, rng)
