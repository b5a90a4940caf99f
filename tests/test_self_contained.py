"""The repository explains itself: no tracked file points at a path outside the repository or at
planning history (documents that live elsewhere, issue numbers, numbered planning seeds).

Exempt: text that is not ours or not prose: the vendored ONNX Runtime header (upstream's own
comments) and the recorded output of benchmark and GPU runs (paths where those runs wrote on
their machines).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXEMPT = ("custom_ops/third_party/", "benchmarks/results/")

# Built from pieces so that this file does not match its own patterns.
RULES: list[tuple[str, re.Pattern[str]]] = [
    ("a design document kept outside the repository", re.compile(r"\b(?:DESIGN|OPS)\." + "md\\b")),
    ("a planning seed number", re.compile(r"\bseed[- ]?0\d\d\b", re.IGNORECASE)),
    ("an issue number", re.compile(r"\bissues? *#?\d+\b|(?<![\w&#/'\"=])#\d+\b", re.IGNORECASE)),
    ("an absolute path of a machine", re.compile(r"(?<![\w.~-])/(?:work|root|home|Users|mnt|srv)/")),
]
PARENT_PATH = re.compile(r"(?:\.\./)+[\w.-]*")


def tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\0") if f and not f.startswith(EXEMPT)]


def violations(relpath: str, text: str) -> list[str]:
    """``path:line: what 'match'`` for every reference that leaves the repository."""
    found = []
    here = (ROOT / relpath).parent
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in RULES:
            found += [f"{relpath}:{number}: {what} {m.group(0)!r}" for m in pattern.finditer(line)]
        for m in PARENT_PATH.finditer(line):  # a relative path is fine while it stays inside
            if not (here / m.group(0)).resolve().is_relative_to(ROOT):
                found.append(f"{relpath}:{number}: a path outside the repository {m.group(0)!r}")
    return found


def test_no_tracked_file_refers_outside_the_repository():
    found = []
    for relpath in tracked_text_files():
        try:
            text = (ROOT / relpath).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):  # binary, or deleted in the work tree
            continue
        found += violations(relpath, text)
    assert not found, "references outside the repository:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "semantics: see DESIGN" + ".md section 3",
        "the reference format of ../" + "shared/OPS" + ".md",
        "Meganeura's seed" + "-003 API",
        "fixed in issue " + "12",
        "see #" + "6 for the plan",
        "wrote /root" + "/out/x.json",
        "from the lead's tree: /work" + "/main/custom_ops",
        "the notes in ../" + "../notes.txt",
    ],
)
def test_the_check_catches_each_kind_of_outside_reference(line):
    assert violations("docs/example.md", line)


def test_the_check_accepts_paths_inside_the_repository():
    assert violations("custom_ops/README.md", "see [the architecture](../docs/architecture.md), seed=0, step 1 of 3") == []
