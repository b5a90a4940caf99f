"""Run the ``meganeura`` command of the environment under test, as a user does.

The command is the console script that ``pip install`` put beside the interpreter running the
tests, so it runs the same checkout the tests import (``make setup`` installs this checkout into
``.venv`` in editable mode); a ``meganeura`` elsewhere on PATH is never used.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEGANEURA = Path(sys.executable).parent / "meganeura"


def meganeura(
    *args: str, check: bool = True, timeout: float = 300, cwd: str | Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``meganeura *args`` (in ``cwd``, with ``env`` added to the environment); with ``check``, a
    non-zero exit fails with the command's output."""
    if not MEGANEURA.is_file():
        raise AssertionError(f"{MEGANEURA} does not exist: install this checkout into the test environment (make setup)")
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    r = subprocess.run([str(MEGANEURA), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env)
    if check and r.returncode != 0:
        raise AssertionError(f"meganeura {' '.join(args)} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r
