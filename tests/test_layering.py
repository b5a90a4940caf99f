"""Imports flow one way: IR -> ops -> (graph) -> nn / transforms / export -> runtime -> io -> models -> cli.

A module may import its own layer or those below it, never one above (lazy imports inside
functions included): the op table must not know about export, runtime about io, and so on.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "meganeura_onnx"
RANK = {
    "ir": 0,
    "ops": 1,
    "graph": 1.5,
    "init": 1.5,
    "reference": 1.5,
    "nn": 2,
    "transforms": 2,
    "export": 2,
    "training_artifacts": 2,
    "runtime": 3,
    "io": 4,
    "generation": 4,
    "models": 4.5,
    "cli": 5,
    "__init__": 6,
}


def layer_of(path: Path) -> str:
    if path.is_relative_to(ROOT / "cli"):
        return "cli"
    if path.is_relative_to(ROOT / "models"):  # installed as meganeura_onnx.models
        return "models"
    first = path.relative_to(PACKAGE).parts[0]
    return first.removesuffix(".py")


def imported_layers(path: Path, source: str | None = None) -> set[str]:
    """Layers of meganeura_onnx that ``path`` imports (absolute or relative, anywhere in the file)."""
    layer = layer_of(path)
    pkg_parts = ["meganeura_onnx", layer] if layer in ("cli", "models") else ["meganeura_onnx", *path.relative_to(PACKAGE).parts[:-1]]
    out = set()
    for node in ast.walk(ast.parse(source if source is not None else path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            names = [target] if len(target) > 1 else [[*target, a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        for t in names:
            if t[0] == "meganeura_onnx" and len(t) > 1:
                out.add(t[1])
    return out


FILES = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "cli").glob("*.py"), *(ROOT / "models").glob("*.py")])


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_imports_only_its_own_or_lower_layers(path):
    here = layer_of(path)
    assert here in RANK, f"{path}: layer {here!r} has no rank; add it to RANK where it belongs"
    upward = {t for t in imported_layers(path) if t in RANK and RANK[t] > RANK[here]}
    assert not upward, f"{path.relative_to(ROOT)} ({here}) imports higher layers {sorted(upward)}"


def test_the_layer_check_catches_an_upward_import():
    rope = PACKAGE / "ops" / "rope.py"
    lazy = rope.read_text() + "\n\ndef _late():\n    from ..runtime import Session\n    return Session\n"
    assert "runtime" in imported_layers(rope, lazy)
    assert "runtime" not in imported_layers(rope)
