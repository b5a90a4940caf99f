"""The chunk sizes of greedy generation (``GreedyChunks``): the first chunk, growth on fast steps,
short chunks on slow ones, never past the tokens that remain, and what ``generate`` asks for."""

from __future__ import annotations

import numpy as np
import pytest

from meganeura_onnx.generation import GREEDY_CHUNK, GREEDY_CHUNK_MAX, GreedyChunks, generate, generate_batch


def test_greedy_chunks_grow_to_the_largest_when_a_step_takes_half_a_millisecond():
    chunks = GreedyChunks()
    assert chunks.size == GREEDY_CHUNK == 8
    chunks.resize(8, 8 * 0.0005)  # an H200 step of a 135M model: 80 steps would fit in 40 ms
    assert chunks.size == GREEDY_CHUNK_MAX == 64


def test_greedy_chunks_take_as_many_steps_as_fit_in_the_target_time():
    chunks = GreedyChunks(first=4, largest=64, seconds=0.04)
    chunks.resize(4, 4 * 0.002)
    assert chunks.size == 20
    chunks.resize(20, 20 * 0.03)  # a CPU step: the tokens keep streaming one by one
    assert chunks.size == 1
    chunks.resize(1, 0.0)  # a clock that did not move: the largest, no division by zero
    assert chunks.size == 64


def test_greedy_chunks_run_asks_for_no_more_steps_than_remain():
    asked = []

    def greedy(last, k):
        asked.append(k)
        return list(range(last + 1, last + 1 + k))

    chunks = GreedyChunks(first=8, largest=64)
    assert chunks.run(greedy, 0, 5) == [1, 2, 3, 4, 5]
    assert chunks.run(greedy, 5, 200)[-1] == 5 + chunks.largest
    assert asked == [5, 64]


@pytest.mark.parametrize(("first", "largest", "seconds"), [(0, 8, 0.04), (9, 8, 0.04), (1, 8, 0.0)])
def test_greedy_chunks_reject_sizes_out_of_order_and_no_time(first, largest, seconds):
    with pytest.raises(ValueError, match="GreedyChunks"):
        GreedyChunks(first, largest, seconds)


class _Counting:
    """A model whose next token is the previous one + 1 (mod 50), with ``decode_greedy`` recording the
    chunk sizes it is asked for; ``decode`` gives the same tokens as logits (the host's path)."""

    max_seq, batch, vocab = 512, 2, 50

    def __init__(self) -> None:
        self.asked: list[int] = []

    def _logits(self, token: int) -> np.ndarray:
        out = np.zeros(self.vocab, np.float32)
        out[(token + 1) % self.vocab] = 1.0
        return out

    def prefill(self, ids):
        if ids and isinstance(ids[0], list):
            return np.stack([self._logits(p[-1]) for p in ids])
        return self._logits(ids[-1])

    def decode(self, token):
        return np.stack([self._logits(t) for t in token]) if isinstance(token, list) else self._logits(token)

    def decode_greedy(self, token, count):
        self.asked.append(count)
        if isinstance(token, list):
            return [[(t + 1 + i) % self.vocab for i in range(count)] for t in token]
        return [(token + 1 + i) % self.vocab for i in range(count)]


class _HostOnly:
    def __init__(self, model: _Counting) -> None:
        self.max_seq, self.batch, self.prefill, self.decode = model.max_seq, model.batch, model.prefill, model.decode


def test_generate_asks_for_a_first_chunk_of_eight_then_grows_and_gives_the_host_tokens():
    model = _Counting()
    tokens = list(generate(model, [3, 4], 150))
    assert tokens == list(generate(_HostOnly(_Counting()), [3, 4], 150))
    assert model.asked[0] == 8 and model.asked[1] == 64  # the fake model's steps take no time
    assert sum(model.asked) == 149 and max(model.asked) <= 64


def test_generate_batch_uses_the_same_chunks_and_stops_each_sequence_at_its_stop_id():
    model = _Counting()
    out = generate_batch(model, [[3], [10]], 100, stop_ids=[20])
    assert out == generate_batch(_HostOnly(_Counting()), [[3], [10]], 100, stop_ids=[20])
    assert out[1][-1] == 20 and model.asked[0] == 8
