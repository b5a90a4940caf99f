"""Loading a user's model file: a Python file defining ``build(**kwargs) -> Graph``.

A model file is Python code that runs with the user's permissions when a command loads it: only
pass files you trust. Its failures (syntax errors, exceptions while importing or in ``build``)
are reported as one-line errors naming the file.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click


def parse_sets(items: tuple[str, ...]) -> dict[str, Any]:
    """``("batch=64", "name=tiny")`` -> ``{"batch": 64, "name": "tiny"}`` (Python literals, else strings)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def load_module(path: str | Path) -> ModuleType:
    path = Path(path)
    if not path.is_file():
        raise click.BadParameter(f"no such file: {path}", param_hint="MODEL")
    name = f"meganeura_user_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        raise click.BadParameter(f"{path} is not valid Python: {e.msg} (line {e.lineno})", param_hint="MODEL") from e
    except Exception as e:
        sys.modules.pop(name, None)
        raise click.ClickException(f"model file {path} raised {type(e).__name__} while loading: {e}") from e
    return module


def build_graph(path: str | Path, sets: dict[str, Any]) -> Any:
    """Call the model file's ``build(**sets)``; it must return a Graph with outputs set."""
    from meganeura_onnx import Graph

    module = load_module(path)
    if not callable(getattr(module, "build", None)):
        raise click.BadParameter(
            f"{path} defines no build() function (the model file contract: build(**kwargs) -> Graph)", param_hint="MODEL"
        )
    try:
        graph = module.build(**sets)
    except TypeError as e:
        raise click.BadParameter(f"build() rejected the --set values {sets}: {e}", param_hint="--set") from e
    except Exception as e:
        raise click.ClickException(f"build() in {path} raised {type(e).__name__} with --set values {sets}: {e}") from e
    if not isinstance(graph, Graph):
        raise click.BadParameter(f"build() in {path} returned {type(graph).__name__}, expected a meganeura_onnx.Graph", param_hint="MODEL")
    return graph
