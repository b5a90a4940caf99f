"""Autoregressive generation over any model with a KV cache (the loop behind ``meganeura generate``).

The model is anything with the :class:`CausalModel` shape: ``prefill(ids)`` runs the prompt and
returns the logits of its last token, ``decode(token)`` feeds one more token and returns the logits
after it. :func:`generate_batch` does the same for several prompts at once over a
:class:`BatchCausalModel`. Sampling happens on the host from one row of logits per sequence and step,
except greedy decoding (``temperature=0``) of a model that has ``decode_greedy(token, count)``: the
argmax taken where the logits are, ``count`` steps queued back to back on the device and their tokens
read back at once (the LLaMA runner of ``models/llama.py``). The tokens are the same; the steps run
in chunks (:class:`GreedyChunks`: 8 steps first, then as many as take about 40 ms, at most 64), so up
to 63 steps past a stop id are computed and dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np

GREEDY_CHUNK = 8
"""Greedy steps queued by the first ``decode_greedy`` call of a generation (one wait per chunk
instead of per token); :class:`GreedyChunks` sizes the later ones."""
GREEDY_CHUNK_MAX = 64
"""Greedy steps queued per ``decode_greedy`` call at most."""
GREEDY_CHUNK_SECONDS = 0.04
"""About how long a chunk of greedy steps should take. The host waits once per chunk, and the device
idles while the host reads the chunk back and queues the next one (~0.2 ms on an H200 machine: 13 us
per token in chunks of 16, 3 us in chunks of 64), so GPU chunks grow to the maximum; on a CPU, where
a step takes tens of milliseconds, chunks stay short and the tokens keep streaming."""

Chosen = TypeVar("Chosen")


class GreedyChunks:
    """The sizes of one generation's chunks of greedy steps: ``first`` steps, then as many as the last
    chunk ran in ``seconds`` (from 1 to ``largest``)."""

    def __init__(self, first: int = GREEDY_CHUNK, largest: int = GREEDY_CHUNK_MAX, seconds: float = GREEDY_CHUNK_SECONDS) -> None:
        if not 1 <= first <= largest:
            raise ValueError(f"GreedyChunks: expected 1 <= first <= largest, got first={first}, largest={largest}")
        if not seconds > 0:
            raise ValueError(f"GreedyChunks: seconds must be > 0, got {seconds}")
        self.size, self.largest, self.seconds = first, largest, seconds

    def run(self, greedy: Callable[[Chosen, int], Chosen], last: Chosen, remaining: int) -> Chosen:
        """``greedy(last, k)`` for the next chunk's k (at most ``remaining``); sizes the chunk after it."""
        k = min(self.size, remaining)
        start = time.perf_counter()
        chosen = greedy(last, k)
        self.resize(k, time.perf_counter() - start)
        return chosen

    def resize(self, steps: int, seconds: float) -> None:
        """The next chunk's size after a chunk of ``steps`` that took ``seconds``."""
        per_step = max(seconds, 1e-9) / steps
        self.size = max(1, min(self.largest, int(self.seconds / per_step)))


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
    chunks = GreedyChunks()
    chunk, produced = [sample(model.prefill(list(prompt_ids)), temperature, top_k, rng)], 0
    while True:
        for token in chunk:
            yield token
            produced += 1
            if token in stop or produced == max_new_tokens:
                return
        if greedy is not None:
            chunk = chunks.run(greedy, chunk[-1], max_new_tokens - produced)
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
    chunks = GreedyChunks()
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
            steps = chunks.run(greedy, last, max_new_tokens - produced)
        else:
            steps = [[sample(row, temperature, top_k, rng)] for row in model.decode(last)]
