"""``com.meganeura.GreedyStep`` on CUDA against numpy (and so against the CPU kernel, which
``test_greedy_step.py`` holds to the same reference): ties, NaNs, -inf rows, a position that wraps at
2**32 and one past the log's end, SmolLM2's 49152-token vocabulary at batch 1 and 8, every element type.
Skips without onnxruntime-gpu or the CUDA library."""

from __future__ import annotations

import kernel_cases as kc
import ml_dtypes
import numpy as np
import pytest
from test_greedy_step import hostile_logits, model, run

from meganeura_onnx.ops.indices import greedy_step_ref

pytestmark = kc.CUDA_SKIPS
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("rows", "vocab", "width"), [(4, 37, 6), (1, 49152, 257), (8, 49152, 257), (3, 1, 1)])
def test_cuda_kernel_matches_numpy_argmax_add_and_clamped_put(dtype, rows, vocab, width):
    rng = np.random.default_rng(rows * vocab)
    logits = (hostile_logits(rng, rows, vocab) if vocab > 10 else rng.standard_normal((rows, vocab)).astype(np.float32)).astype(dtype)
    kv_pos = rng.integers(0, width + 3, rows).astype(np.uint32)
    kv_pos[0] = 2**32 - 1  # wraps to 0
    log = rng.integers(0, 1000, (rows, width)).astype(np.uint32)
    want = greedy_step_ref(logits.astype(np.float32), kv_pos, log)
    got = run(kc.cuda_session(model(dtype)), logits, kv_pos, log)
    for name, g, w in zip(("next_token", "next_pos", "next_log"), got, want, strict=True):
        assert g.dtype == np.uint32 and np.array_equal(g, w), (name, g, w)
