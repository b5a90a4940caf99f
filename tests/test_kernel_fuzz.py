"""Hostile models through plain ONNX Runtime never crash our kernels (``tests/kernel_fuzz.py`` in
a subprocess, so a crash is a failed test, not a dead pytest), and the bugs it found stay fixed:
``kv_pos`` near 2**63 (the bound check overflowed), a zero-row query (division by zero), attribute
type mismatches named as such.

``make asan`` runs this file under AddressSanitizer and UndefinedBehaviorSanitizer too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

import kernel_cases as kc  # noqa: E402

HERE = Path(__file__).resolve().parent
CPU_LIB = kc.kernel_library("cpu")
needs_cpu_lib = pytest.mark.skipif(CPU_LIB is None, reason="custom-op library not built (make -C custom_ops)")
FUZZ_MODELS = 300


def _fuzz(device: str, count: int, seed: int) -> dict:
    r = subprocess.run(
        [sys.executable, str(HERE / "kernel_fuzz.py"), "--device", device, "--count", str(count), "--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])},
    )
    last_case = [ln for ln in r.stderr.splitlines() if ln.startswith("[")][-1:] or ["<none>"]
    assert r.returncode == 0, f"the fuzz process died (status {r.returncode}) on {last_case[0]}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_cpu_lib
def test_hostile_models_are_refused_or_run_and_never_crash_the_process():
    s = _fuzz("cpu", FUZZ_MODELS, seed=0)
    assert s["models"] == FUZZ_MODELS and s["ran"] + s["refused_at_load"] + s["refused_at_run"] == FUZZ_MODELS
    assert s["ran"] >= 30 and s["refused_at_run"] >= 30, s  # the kernels' own checks were reached
    assert not s.get("unnamed_errors"), s["unnamed_errors"][:5]
    print(f"kernel fuzz (cpu): {s}")


@pytest.mark.skipif(
    kc.kernel_library("cuda") is None or "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="needs CUDA and the CUDA library",
)
def test_hostile_models_never_crash_the_cuda_kernels():
    s = _fuzz("cuda", FUZZ_MODELS, seed=1)
    assert s["models"] == FUZZ_MODELS and s["ran"] >= 30 and not s.get("unnamed_errors"), s


def _run(op: str, inputs: dict, attrs: dict, unknown_shapes: bool = True):
    model = kc.make_model(op, inputs, attrs, with_function=False, unknown_shapes=unknown_shapes)
    return kc.session(model, library=CPU_LIB).run(None, inputs)[0]


@needs_cpu_lib
@pytest.mark.parametrize("kv_pos", [2**63 - 1, 2**63 - 3, 2**62, -(2**63), 7])
def test_cache_write_refuses_positions_past_the_cache_even_near_int64_max(kv_pos):
    inputs = {"new": np.ones((2, 4), np.float32), "cache": np.zeros((8, 4), np.float32), "kv_pos": np.array([kv_pos], np.int64)}
    with pytest.raises(Exception, match=r"CacheWrite: kv_pos -?\d+ \+ T 2 exceeds the cache length max_seq 8"):
        _run("CacheWrite", inputs, {})


@needs_cpu_lib
@pytest.mark.parametrize("kv_pos", [2**63 - 1, 2**63 - 2, 7])
def test_cached_attention_refuses_positions_past_the_cache_even_near_int64_max(kv_pos):
    inputs = {
        "Q": np.ones((2, 8), np.float32),
        "K_cache": np.ones((8, 4), np.float32),
        "V_cache": np.ones((8, 4), np.float32),
        "kv_pos": np.array([kv_pos], np.int64),
    }
    with pytest.raises(Exception, match=r"CachedAttention: kv_pos \d+ \+ T 2 exceeds the cache length max_seq 8"):
        _run("CachedAttention", inputs, {"num_heads": 2, "num_kv_heads": 1, "head_dim": 4})


@needs_cpu_lib
def test_more_new_rows_than_the_cache_holds_is_refused_before_the_position():
    inputs = {"new": np.ones((9, 4), np.float32), "cache": np.zeros((8, 4), np.float32), "kv_pos": np.array([0], np.int64)}
    with pytest.raises(Exception, match="CacheWrite: new has 9 rows, more than the cache length max_seq 8"):
        _run("CacheWrite", inputs, {})


@needs_cpu_lib
def test_a_zero_row_query_gives_an_empty_output():
    inputs = {
        "Q": np.ones((0, 8), np.float32),
        "K_cache": np.ones((8, 4), np.float32),
        "V_cache": np.ones((8, 4), np.float32),
        "kv_pos": np.array([3], np.int64),
    }
    out = _run("CachedAttention", inputs, {"num_heads": 2, "num_kv_heads": 1, "head_dim": 4}, unknown_shapes=False)
    assert out.shape == (0, 8)


@needs_cpu_lib
@pytest.mark.parametrize(
    "op,attrs,message",
    [
        ("CachedAttention", {"num_heads": 2.0, "num_kv_heads": 1, "head_dim": 4}, "attribute 'num_heads' must be an int, got a float"),
        ("CachedAttention", {"num_heads": 2, "num_kv_heads": "1", "head_dim": 4}, "attribute 'num_kv_heads' must be an int, got a string"),
        (
            "CachedAttention",
            {"num_heads": 2, "num_kv_heads": 1, "head_dim": [4]},
            "attribute 'head_dim' must be an int, got a list of ints",
        ),
        ("CachedAttention", {"num_heads": 2, "num_kv_heads": 1}, "required int attribute 'head_dim' is missing"),
        ("CachedAttention", {"num_heads": 2**40, "num_kv_heads": 1, "head_dim": 4}, "num_heads 1099511627776"),
        ("Rope", {"theta": 10000, "head_dim": 4}, "attribute 'theta' must be a float, got an int"),
        ("Rope", {"theta": 1e4, "head_dim": 4, "offset": 2**62}, "attribute offset must be in [0, 2^40]"),
    ],
)
def test_attribute_type_mismatches_and_extremes_are_named(op, attrs, message):
    if op == "Rope":
        inputs = {"X": np.ones((2, 8), np.float32)}
    else:
        inputs = {
            "Q": np.ones((1, 8), np.float32),
            "K_cache": np.ones((4, 4), np.float32),
            "V_cache": np.ones((4, 4), np.float32),
            "kv_pos": np.array([0], np.int64),
        }
    with pytest.raises(Exception) as info:
        _run(op, inputs, attrs)
    assert message in str(info.value)
