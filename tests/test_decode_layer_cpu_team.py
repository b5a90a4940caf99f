"""How many threads the CPU DecodeLayer kernel runs a call on (custom_ops/cpu_team_policy.h): its team,
or the leader alone while the team stalls (a busy machine preempts a member and the layer waits for it
to run again). MEGANEURA_CPU_TEAM forces a count ("1": alone) or leaves the choice to the policy
("auto", the default). The outputs are the same bit for bit whatever runs them; the library counts the
calls of each kind and the stalls (MeganeuraDecodeLayerCpuCalls) and replays the policy on made-up
stalls (MeganeuraTeamPolicyReplay), so its decisions are tested without depending on this machine's load."""

from __future__ import annotations

import ctypes
import os

import decode_layer_cases as dc
import kernel_cases as kc
import numpy as np
import pytest

LIB = kc.kernel_library("cpu")
needs_library = pytest.mark.skipif(LIB is None, reason="custom-op library not built (make -C custom_ops cpu)")
CALLS = 40  # runs per session


def _lib():
    lib = ctypes.CDLL(LIB)  # the handle ORT opened: its counters
    lib.MeganeuraDecodeLayerCpuCalls.restype = ctypes.c_int64
    lib.MeganeuraDecodeLayerCpuCalls.argtypes = [ctypes.c_int]
    lib.MeganeuraTeamPolicyReplay.restype = ctypes.c_int64
    lib.MeganeuraTeamPolicyReplay.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    return lib


def _counts(lib) -> tuple[int, int, int]:
    """Calls so far (alone, on a team, on a team that stalled)."""
    return tuple(lib.MeganeuraDecodeLayerCpuCalls(kind) for kind in range(3))


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
        alone, team, stalled = (after - b for after, b in zip(_counts(lib), before, strict=True))
        assert alone + team == CALLS and 0 <= stalled <= team, (setting, alone, team, stalled)
        if setting == "1":
            assert team == 0, f"MEGANEURA_CPU_TEAM=1 ran {team} calls on a team"
        elif setting == "2":
            assert alone == 0, f"MEGANEURA_CPU_TEAM=2 ran {alone} calls alone"
        elif several_cpus:  # auto starts on the team (how it goes on depends on this machine's load)
            assert team > 0, (alone, team)
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


def _replay(stalls: np.ndarray) -> np.ndarray:
    """The policy's choices (True: the team) for calls where stalls[i] says whether call i stalls on the team."""
    stalls = np.ascontiguousarray(stalls, np.uint8)
    chosen = np.zeros(len(stalls), np.uint8)
    on_team = _lib().MeganeuraTeamPolicyReplay(stalls.ctypes.data, len(stalls), chosen.ctypes.data)
    assert on_team == int(chosen.sum())
    return chosen.astype(bool)


def _stretches_alone(chosen: np.ndarray) -> list[int]:
    """The lengths of the runs of calls alone."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], (~chosen).astype(np.int8), [0]])))
    return list(edges[1::2] - edges[::2])


@needs_library
def test_policy_stays_on_the_team_while_it_does_not_stall():
    assert _replay(np.zeros(5000, bool)).all()


@needs_library
def test_policy_ignores_stalls_far_apart():
    """A quiet machine stalls a team call now and then: the team still wins, the policy stays on it."""
    stalls = np.zeros(20000, bool)
    stalls[100::200] = True
    assert _replay(stalls).all()
    assert _replay(np.random.default_rng(3).random(20000) < 0.005).mean() >= 0.99
    assert _replay(np.random.default_rng(4).random(20000) < 0.02).mean() >= 0.95


@needs_library
def test_policy_runs_alone_for_a_stretch_after_a_burst_of_stalls_then_returns_to_the_team():
    stalls = np.zeros(1000, bool)
    stalls[[100, 103, 106, 109]] = True
    chosen = _replay(stalls)
    left = int(np.argmin(chosen))
    assert chosen[:101].all() and 101 < left <= 110, f"left the team at call {left}"
    assert len(_stretches_alone(chosen)) == 1 and 8 <= (~chosen).sum() <= 64, _stretches_alone(chosen)
    assert chosen[200:].all(), "back on the team for good"


@needs_library
def test_policy_runs_alone_ever_longer_while_the_team_keeps_stalling():
    """A fifth of the team's calls stall (a busy machine): after the first stalls most calls run alone;
    the stretches alone grow (the team is tried less and less often), up to a bound (the load may go)."""
    stalls = np.random.default_rng(1).random(20000) < 0.2
    chosen = _replay(stalls)
    assert chosen[2000:].mean() <= 0.1, f"{chosen[2000:].mean():.1%} of the calls on the team"
    stretches = _stretches_alone(chosen)
    assert max(stretches) >= 4 * stretches[0] and max(stretches) <= 20000 // 50, stretches


@needs_library
def test_policy_follows_the_load_from_team_to_alone_and_back():
    """Quiet (no stall), busy (a fifth of the team's calls stall), quiet again: the policy leaves the
    team within a few stalls and is back on it within a stretch alone, bounded, of the end of the stalls."""
    rng = np.random.default_rng(2)
    stalls = np.concatenate([np.zeros(1000, bool), rng.random(3000) < 0.2, np.zeros(3000, bool)])
    chosen = _replay(stalls)
    quiet, busy, quiet_again = chosen[:1000], chosen[1000:4000], chosen[4000:]
    assert quiet.all()
    assert busy[100:].mean() <= 0.1, f"busy: {busy[100:].mean():.0%} of the calls on the team"
    back = int(np.argmax(quiet_again))
    assert back <= 300 and quiet_again[back:].all(), f"back on the team after {back} quiet calls"
