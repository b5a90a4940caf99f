"""What the benchmarks record beside their timings: the machine, its load, the code's commit and digests.

Imported by the benchmark scripts as a sibling module (``python benchmarks/<name>.py`` puts this
folder on ``sys.path``). Each script keeps its own JSON keys; these helpers only gather the values.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor name where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # no git here
        return ""


def git_commit() -> str:
    """The checkout's commit ("" outside a git checkout)."""
    return _git("rev-parse", "HEAD")


def git_dirty() -> bool:
    """Whether tracked files differ from the commit (the timings then belong to uncommitted code)."""
    return bool(_git("status", "--porcelain", "--untracked-files=no"))


SOURCE_GLOBS = ("meganeura_onnx/**/*.py", "models/*.py", "cli/**/*.py", "benchmarks/*.py")
"""The Python sources whose digest names the code a run used (``source_digest``)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_digest(root: Path = ROOT) -> str:
    """One SHA-256 over the Python sources under ``root`` (``SOURCE_GLOBS``; each file's path and
    contents): it names the code that ran where the git metadata does not (a copy of the tree with an
    older ``.git``, uncommitted edits)."""
    digest = hashlib.sha256()
    files = sorted({p for pattern in SOURCE_GLOBS for p in root.glob(pattern) if p.is_file()})
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + _sha256(path).encode() + b"\n")
    return digest.hexdigest()


def kernel_libraries() -> dict[str, dict[str, str]]:
    """The com.meganeura kernel libraries a session would load ("cpu", "cuda"): path and SHA-256 of each
    one found (a library swapped between runs is told apart by its digest)."""
    from meganeura_onnx import custom_op_library

    found = {}
    for device in ("cpu", "cuda"):
        path = custom_op_library(device)
        if path is not None:
            found[device] = {"path": path, "sha256": _sha256(Path(path))}
    return found


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages: other work on a shared machine skews timings."""
    return [round(x, 2) for x in os.getloadavg()]


def host() -> dict:
    """Host name, platform, Python version and CPU count."""
    return {"host": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()}


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_stamped(out_dir: Path, prefix: str, result: dict) -> Path:
    """Writes ``result`` as ``<out_dir>/<prefix>-<host>-<UTC time>.json`` and returns the path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = out_dir / f"{prefix}-{socket.gethostname()}-{stamp}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def code_digests() -> dict:
    """``source_sha256`` and ``kernel_libraries``: what names the code a run used."""
    return {"source_sha256": source_digest(), "kernel_libraries": kernel_libraries()}


def stamp() -> dict:
    """What every result JSON records about its run: host, commit (and whether it was dirty), the
    sources' and kernel libraries' digests, load."""
    return {**host(), "commit": git_commit(), "dirty": git_dirty(), **code_digests(), "load_average": load_average(), "date": utc_now()}


def report(result: dict, out: Path | None) -> dict:
    """Writes ``result`` as JSON to ``out`` when given, then prints it (written first: a closed
    stdout, e.g. ``| head``, must not lose the file); returns it."""
    text = json.dumps(result, indent=2)
    if out:
        Path(out).write_text(text + "\n")
    print(text)
    return result
