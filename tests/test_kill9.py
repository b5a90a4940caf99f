"""kill -9 at random moments of a training run that checkpoints every step (``tests/kill9_driver.py``):
every checkpoint left behind loads and equals a completed save; resuming equals an uninterrupted run
bit for bit; no temp file outlives the next save."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the driver forks its trainers")
def test_fifty_kills_during_training_lose_nothing(tmp_path):
    r = subprocess.run(
        [sys.executable, str(HERE / "kill9_driver.py"), "--kills", "50", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])},
    )
    assert r.stdout.strip(), r.stderr[-3000:]
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 0, (s, r.stderr[-3000:])
    assert s["kills"] == 50 and s["checkpoints_not_equal_to_the_reference"] == [] and s["resume_equals_uninterrupted"]
    assert s["temp_files_left"] == []
    assert s["distinct_checkpoints_checked"] >= 10 and s["kills_inside_a_save"] >= 1, s  # the kills did land mid-training
    print(f"kill -9 test: {s}")
