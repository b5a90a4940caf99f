"""The CPU kernels' float16 / bfloat16 load and store, bit for bit against numpy and ml_dtypes.

The kernels convert 16-bit rows to float32, compute, and round the result back (F16C on x86 CPUs
that have it, branch-free integer code elsewhere). CachedAttention with a zero query gives every
cache row the weight exp(0) = 1 exactly, so its output is a plain float32 average of V rows:
  * one row: the output is V itself, so every one of the 65536 16-bit patterns goes through
    load and store (NaNs must stay NaN; all else bit-exact);
  * two rows: (v0 + v1) * 0.5 in float32, the same operations numpy does, rounded once: with
    neighbouring values this is an exact tie, so round-to-nearest-even is checked too.
Two layouts: rows of 65536 values (the 8-wide F16C path on CPUs that have it) and rows of 7 values,
shorter than one vector (the portable scalar code, which CPUs without F16C run throughout).
"""

from __future__ import annotations

import kernel_cases as kc
import numpy as np
import pytest

LIB = kc.kernel_library("cpu")
pytestmark = pytest.mark.skipif(LIB is None, reason="CPU custom-op library not built (make -C custom_ops cpu)")
N = 1 << 16  # values per test: every 16-bit pattern once
DTYPES = [np.dtype(np.float16), kc.BFLOAT16]
IDS = ["float16", "bfloat16"]
# (heads, head_dim) of one cache row: one row of all N values, or N / 7 sequences of 7 values each.
LAYOUTS = {"vector": (64, 1024), "scalar": (1, 7)}


def attend_zero_query(v: np.ndarray, layout: str) -> np.ndarray:
    """CachedAttention of a zero query over cache rows V ([rows, N]): their mean, computed in the
    ``layout`` of LAYOUTS (the N values padded to whole sequences and cut back)."""
    heads, head_dim = LAYOUTS[layout]
    rows, width = v.shape[0], heads * head_dim
    batch = -(-N // width)
    padded = np.zeros((rows, batch * width), v.dtype)
    padded[:, :N] = v
    cache = padded.reshape(rows, batch, width).transpose(1, 0, 2).copy()  # [batch, rows, width]
    inputs = {
        "Q": np.zeros((batch, 1, width), v.dtype),
        "K": np.zeros_like(cache),
        "V": cache,
        "kv_pos": np.full(batch, rows - 1, np.int64),
    }
    attrs = dict(num_heads=heads, num_kv_heads=heads, head_dim=head_dim)
    sess = kc.session(kc.make_model("CachedAttention", inputs, attrs, out_dtype=v.dtype, with_function=False), library=LIB)
    return kc.run_typed(sess, inputs, (batch, 1, width), v.dtype).reshape(-1)[:N]


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Bit-equal, except that any NaN may stand for any NaN (payloads are not kept) and a zero for
    either zero (the attention's accumulator starts at +0, and +0 + -0 is +0)."""
    wide = want.astype(np.float32)
    loose = np.isnan(wide) | (wide == 0)
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), np.isnan(wide))
    np.testing.assert_array_equal(got.astype(np.float32)[wide == 0], wide[wide == 0])
    np.testing.assert_array_equal(got.view(np.uint16)[~loose], want.view(np.uint16)[~loose])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_every_16_bit_pattern_survives_load_and_store(dtype, layout):
    v = np.arange(N, dtype=np.uint32).astype(np.uint16).view(dtype).reshape(1, N)
    assert_same_bits(attend_zero_query(v, layout), v[0])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_stores_round_to_nearest_even(dtype, layout):
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 1 << 16, size=N).astype(np.uint16)
    bits[:4096] = np.arange(4096, dtype=np.uint16)  # subnormals and the smallest normals, both signs below
    bits[4096:8192] = bits[:4096] | 0x8000
    v0 = bits.view(dtype)
    finite = np.isfinite(v0.astype(np.float32))
    v0 = np.where(finite, v0, np.zeros((), dtype)).astype(dtype)
    # the next value up: (v0 + v1) / 2 is the tie halfway between two neighbours
    v1 = np.where(np.isfinite((v0.view(np.uint16) + 1).view(dtype).astype(np.float32)), (v0.view(np.uint16) + 1).view(dtype), v0)
    v = np.stack([v0, v1.astype(dtype)])
    with np.errstate(over="ignore"):  # the largest bfloat16 pairs sum past float32's range, as in the kernel
        mean32 = (v[0].astype(np.float32) + v[1].astype(np.float32)) * np.float32(0.5)
    assert_same_bits(attend_zero_query(v, layout), mean32.astype(dtype))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_stores_round_float32_values_between_neighbours(dtype, layout):
    """Averages of random pairs: most lie strictly between two 16-bit values (round up or down)."""
    rng = np.random.default_rng(2)
    scale = np.exp2(rng.integers(-30, 15, size=N)).astype(np.float32)
    v = (rng.standard_normal((2, N)).astype(np.float32) * scale).astype(dtype)
    mean32 = (v[0].astype(np.float32) + v[1].astype(np.float32)) * np.float32(0.5)
    assert_same_bits(attend_zero_query(v, layout), mean32.astype(dtype))
