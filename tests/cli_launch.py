"""Run THIS checkout's ``meganeura`` CLI in a subprocess.

The console script of the shared environment may point at another checkout (an editable install
maps ``meganeura_onnx.cli`` to one folder), so the tests start the CLI from this repository's own
``meganeura_onnx`` and ``cli/`` folders.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_LAUNCH = """
import importlib.util, sys
root = sys.argv.pop(1)
sys.path.insert(0, root)
spec = importlib.util.spec_from_file_location("meganeura_onnx.cli", root + "/cli/__init__.py", submodule_search_locations=[root + "/cli"])
mod = importlib.util.module_from_spec(spec)
sys.modules["meganeura_onnx.cli"] = mod
spec.loader.exec_module(mod)
from meganeura_onnx.cli.main import main
main(prog_name="meganeura")
"""


def meganeura(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", _LAUNCH, str(ROOT), *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"meganeura {' '.join(args)} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


# Runs many invocations in ONE interpreter (imports are paid once): each call gets fresh stdout/stderr
# buffers; a SystemExit is the CLI's exit status, any other escaping exception is a crash.
_BATCH = _LAUNCH.replace(
    'main(prog_name="meganeura")',
    """
import contextlib, io, json, traceback
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
""",
)


def meganeura_batch(invocations: list[list[str]], timeout: float = 600, env: dict | None = None) -> list[dict]:
    """Run each argument list through this checkout's CLI in one subprocess; one result dict per call."""
    import json

    full_env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    full_env.pop("MEGANEURA_DEBUG", None)
    full_env.update(env or {})
    r = subprocess.run(
        [sys.executable, "-c", _BATCH, str(ROOT)],
        input=json.dumps(invocations),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )
    if r.returncode != 0:
        raise AssertionError(f"the CLI driver itself died with status {r.returncode}:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
