"""benchmarks/prefill_profile.py's split of an ONNX Runtime profile into runs and op types."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import prefill_profile  # noqa: E402


def _node(op: str, ts: float, dur: float) -> dict:
    return {"cat": "Node", "name": f"{op}_node_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}


def test_node_times_are_summed_per_op_type_within_each_model_run_only():
    trace = [
        {"cat": "Session", "name": "model_run", "ts": 100, "dur": 50},
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 50},  # out of order: runs are sorted by time
        _node("MatMul", 10, 5),
        _node("MatMul", 20, 7),
        _node("Concat", 30, 2),
        _node("MatMul", 110, 3),
        _node("Concat", 75, 9),  # between the runs: in neither
        {"cat": "Node", "name": "MatMul_node_fence_before", "ts": 12, "dur": 1, "args": {"op_name": "MatMul"}},  # not a kernel time
    ]
    runs = prefill_profile.runs_by_op(trace)
    assert [(dict(us), dict(count), dur) for us, count, dur in runs] == [
        ({"MatMul": 12, "Concat": 2}, {"MatMul": 2, "Concat": 1}, 50.0),
        ({"MatMul": 3}, {"MatMul": 1}, 50.0),
    ]
