"""Run the ``meganeura`` command of the environment under test, as a user does.

The command is the console script that ``pip install`` put beside the interpreter running the
tests, so it runs the same checkout the tests import (``make setup`` installs this checkout into
``.venv`` in editable mode); a ``meganeura`` elsewhere on PATH is never used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEGANEURA = Path(sys.executable).parent / "meganeura"


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("MEGANEURA_DEBUG", None)
    return {**env, **(extra or {})}


def meganeura(
    *args: str, check: bool = True, timeout: float = 300, cwd: str | Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``meganeura *args`` (in ``cwd``, with ``env`` added to the environment); with ``check``, a
    non-zero exit fails with the command's output."""
    if not MEGANEURA.is_file():
        raise AssertionError(f"{MEGANEURA} does not exist: install this checkout into the test environment (make setup)")
    r = subprocess.run([str(MEGANEURA), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=_env(env))
    if check and r.returncode != 0:
        raise AssertionError(f"meganeura {' '.join(args)} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


# Runs many invocations of the CLI's entry function in ONE interpreter (imports are paid once): each
# call gets fresh stdout/stderr buffers; a SystemExit is the CLI's exit status, any other escaping
# exception is a crash.
_BATCH = """
import contextlib, io, json, sys, traceback
from meganeura_onnx.cli.main import main
results = []
for args in json.loads(sys.stdin.read()):
    out, err = io.StringIO(), io.StringIO()
    code, crash = 0, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args, prog_name="meganeura")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            crash = traceback.format_exc()
    results.append({"args": args, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "crash": crash})
print(json.dumps(results))
"""


def meganeura_batch(invocations: list[list[str]], timeout: float = 600, env: dict | None = None) -> list[dict]:
    """Run each argument list through the CLI of the environment under test in one subprocess (the
    interpreter running the tests imports ``meganeura_onnx.cli`` as the console script does); one
    result dict per call."""
    r = subprocess.run(
        [sys.executable, "-c", _BATCH], input=json.dumps(invocations), capture_output=True, text=True, timeout=timeout, env=_env(env)
    )
    if r.returncode != 0:
        raise AssertionError(f"the CLI driver itself died with status {r.returncode}:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
