"""How many threads the CPU DecodeLayer kernel runs a call on (custom_ops/cpu_team_policy.h): its team,
or the leader alone where the team is slower (a busy machine preempts members in the middle of their
items). MEGANEURA_CPU_TEAM forces a count ("1": alone) or leaves the choice to the policy ("auto", the
default). The outputs are the same bit for bit whatever runs them; the library counts the calls of each
kind (MeganeuraDecodeLayerCpuCalls) and replays the policy on made-up call times
(MeganeuraTeamPolicyReplay), so its decisions are tested without depending on this machine's load."""

from __future__ import annotations

import ctypes
import os

import decode_layer_cases as dc
import kernel_cases as kc
import numpy as np
import pytest

LIB = kc.kernel_library("cpu")
needs_library = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
CALLS = 40  # runs per session: more than one probe interval of the policy (32 calls)


def _lib():
    lib = ctypes.CDLL(LIB)  # the handle ORT opened: its counters
    lib.MeganeuraDecodeLayerCpuCalls.restype = ctypes.c_int64
    lib.MeganeuraDecodeLayerCpuCalls.argtypes = [ctypes.c_int]
    lib.MeganeuraTeamPolicyReplay.restype = ctypes.c_int64
    lib.MeganeuraTeamPolicyReplay.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    return lib


def _counts(lib) -> tuple[int, int]:
    """Calls so far (alone, on a team)."""
    return lib.MeganeuraDecodeLayerCpuCalls(0), lib.MeganeuraDecodeLayerCpuCalls(1)


# SmolLM2-135M's layer with [in, out] weights (products split in row blocks) and a batch of two-row steps.
MODELS = [
    (dict(max_seq=32, s=1, d=576, h=9, kvh=3, hd=64, inter=1536, positions=31, trans_b=False), (9, 3, 64, False)),
    (dict(max_seq=10, s=2, d=32, h=2, kvh=1, hd=16, inter=24, positions=[8, 3], trans_b=False), (2, 1, 16, False)),
]


@needs_library
@pytest.mark.parametrize("k", range(len(MODELS)), ids=["smollm2-layer", "batch-of-two-row-steps"])
def test_forced_team_sizes_and_auto_give_identical_outputs_and_run_as_set(k, monkeypatch):
    shape, heads = MODELS[k]
    inputs = dc.make_case(np.random.default_rng(3 + k), **shape)
    model = dc.make_model(inputs, dc.attrs(*heads))
    lib = _lib()
    several_cpus = len(os.sched_getaffinity(0)) > 1
    want = None
    for setting in ("1", "2", "auto"):
        monkeypatch.setenv("MEGANEURA_CPU_TEAM", setting)
        sess = kc.session(model, library=LIB, threads=2)
        before = _counts(lib)
        outs = [sess.run(None, inputs) for _ in range(CALLS)]
        alone, team = (after - b for after, b in zip(_counts(lib), before, strict=True))
        assert alone + team == CALLS, (setting, alone, team)
        if setting == "1":
            assert team == 0, f"MEGANEURA_CPU_TEAM=1 ran {team} calls on a team"
        elif setting == "2":
            assert alone == 0, f"MEGANEURA_CPU_TEAM=2 ran {alone} calls alone"
        elif several_cpus:  # auto: the policy times each kind before it compares them
            assert alone > 0 and team > 0, (alone, team)
        want = want or outs[0]
        for got in outs:
            for name, g, w in zip(dc.OUTPUTS, got, want, strict=True):
                np.testing.assert_array_equal(g, w, err_msg=f"MEGANEURA_CPU_TEAM={setting}: {name}")


@needs_library
@pytest.mark.parametrize("value", ["0", "two", "-1", " 2", "2x", "1025", "99999999999999999999"])
def test_bad_team_setting_fails_the_session_naming_the_variable_the_expected_and_the_given_value(value, monkeypatch):
    inputs = dc.make_case(np.random.default_rng(0), **MODELS[1][0])
    monkeypatch.setenv("MEGANEURA_CPU_TEAM", value)
    model = dc.make_model(inputs, dc.attrs(*MODELS[1][1]))
    kc.assert_ort_error(lambda: kc.session(model, library=LIB), "DecodeLayer", ["MEGANEURA_CPU_TEAM", "'auto'", f"'{value}'"])


def _replay(alone: np.ndarray, team: np.ndarray) -> np.ndarray:
    """The policy's choices (True: the team) for calls that take alone[i] / team[i] seconds."""
    alone, team = np.ascontiguousarray(alone, np.float64), np.ascontiguousarray(team, np.float64)
    chosen = np.zeros(len(alone), np.uint8)
    on_team = _lib().MeganeuraTeamPolicyReplay(alone.ctypes.data, team.ctypes.data, len(alone), chosen.ctypes.data)
    assert on_team == int(chosen.sum())
    return chosen.astype(bool)


def _call_times(rng, n: int, alone_ms: float, team_ms: float, stall_ms: float = 0.0, stall_share: float = 0.0):
    """Call times with 5% jitter; a `stall_share` of the team's calls wait `stall_ms` for a preempted member."""
    alone = alone_ms * rng.uniform(0.95, 1.05, n)
    team = team_ms * rng.uniform(0.95, 1.05, n) + stall_ms * (rng.random(n) < stall_share)
    return alone * 1e-3, team * 1e-3


@needs_library
@pytest.mark.parametrize("team_faster", [True, False], ids=["quiet-team-faster", "busy-alone-faster"])
def test_policy_runs_the_faster_kind_and_now_and_then_the_other(team_faster):
    """Quiet: the team is faster (0.8 against 1.1 ms); busy: 30% of the team's calls stall 3 ms. The
    policy's calls take at most 10% more than those of the better fixed choice, probes included."""
    rng = np.random.default_rng(1)
    alone, team = _call_times(rng, 640, 1.1, 0.8) if team_faster else _call_times(rng, 640, 1.1, 0.9, 3.0, 0.3)
    chosen = _replay(alone, team)
    assert chosen[0] and not chosen[1], "each kind is timed once first"
    settled = chosen[32:]  # after the first calls' averages (one stalled call among few moves them much)
    faster = settled if team_faster else ~settled
    assert 0.9 <= faster.mean() < 1.0, f"the faster kind ran {faster.mean():.0%} of the calls (the rest: probes)"
    spent, best = np.where(chosen, team, alone).sum(), min(team.sum(), alone.sum())
    assert spent <= 1.1 * best, f"{spent * 1e3:.0f} ms against {best * 1e3:.0f} ms of the better fixed choice"
    if team_faster:  # the team's time does not jump: each probe is one call
        probes = np.flatnonzero(~settled)
        assert len(probes) >= 10 and np.all(np.diff(probes) > 1), probes


@needs_library
def test_policy_follows_the_load_from_team_to_alone_and_back():
    """Quiet, then busy (30% of the team's calls stall 3 ms), then quiet again: the policy leaves the
    team within a few calls of the change and comes back within a few probes."""
    rng = np.random.default_rng(2)
    phases = [_call_times(rng, 300, 1.1, 0.8), _call_times(rng, 300, 1.1, 0.9, 3.0, 0.3), _call_times(rng, 300, 1.1, 0.8)]
    chosen = _replay(np.concatenate([p[0] for p in phases]), np.concatenate([p[1] for p in phases]))
    quiet, busy, quiet_again = chosen[:300], chosen[300:600], chosen[600:]
    assert quiet[2:].mean() >= 0.9, quiet.mean()
    assert busy[30:].mean() <= 0.1, f"busy: {busy[30:].mean():.0%} of the calls on the team"
    assert quiet_again[100:].mean() >= 0.9, f"quiet again: {quiet_again[100:].mean():.0%} on the team"
