"""benchmarks/gpu_timeline.py's summary of a CUPTI trace: busy time, idle gaps and host API calls."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import gpu_timeline  # noqa: E402


def _event(name: str, ts: float, dur: float) -> dict:
    return {"name": name, "ts": ts, "dur": dur}


def test_summary_counts_overlapping_kernels_once_and_reports_the_gaps_between_them():
    events = [_event("a", 0, 10), _event("b", 12, 5), _event("c", 13, 2), _event("d", 40, 1)]
    summary = gpu_timeline.summarize(events, steps=2, wall_s=100e-6)  # wall_s: already per step
    assert summary["wall_us_per_step"] == pytest.approx(100.0)
    assert summary["gpu_busy_us_per_step"] == pytest.approx((10 + 5 + 1) / 2)  # c lies inside b
    assert summary["idle_us_per_step"] == pytest.approx((2 + 23) / 2)
    assert summary["idle_gaps_over_5us_per_step"] == pytest.approx(0.5)
    assert summary["largest_idle_gaps"] == [{"us": 23, "after": "b", "before": "d"}, {"us": 2, "after": "a", "before": "b"}]
    assert [k["name"] for k in summary["kernels"]] == ["a", "b", "c", "d"]


def test_api_calls_are_ranked_by_total_host_time_per_step():
    calls = [_event("cudaGraphLaunch", 0, 900), _event("cudaStreamSynchronize", 0, 2000), _event("cudaGraphLaunch", 0, 1000)]
    ranked = gpu_timeline.api_calls(calls, steps=2)
    assert ranked == [
        {"name": "cudaStreamSynchronize", "per_step": 0.5, "us_per_step": 1000.0},
        {"name": "cudaGraphLaunch", "per_step": 1.0, "us_per_step": 950.0},
    ]
