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
