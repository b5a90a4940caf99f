"""Loading a model for a command: a Python file defining ``build(**kwargs) -> Graph``, or the name of
a built-in model (a module of ``meganeura_onnx.models``: ``mnist_mlp``, ``llama``, ``tiny_llama``,
``bert``).

A model file is Python code that runs with the user's permissions when a command loads it: only
pass files you trust. Its failures (syntax errors, exceptions while importing or in ``build``)
are reported as one-line errors naming the file.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click


def builtin_models() -> list[str]:
    """Names of the built-in models: the modules of the ``meganeura_onnx.models`` package."""
    from meganeura_onnx import models

    return sorted(m.name for m in pkgutil.iter_modules(models.__path__) if not m.name.startswith("_"))


class ModelParam(click.ParamType):
    """A ``MODEL`` argument: an existing ``.py`` file or a built-in model's name (a file wins)."""

    name = "MODEL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        value = str(value)
        if Path(value).is_file() or value in builtin_models():
            return value
        if Path(value).is_dir():
            self.fail(f"{value!r} is a folder; expected a .py model file or a built-in model", param, ctx)
        self.fail(f"no such file {value!r}, and no built-in model of that name (built-in: {', '.join(builtin_models())})", param, ctx)


MODEL = ModelParam()


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


def load_module(model: str | Path) -> ModuleType:
    """The module of ``model``: a ``.py`` file (loaded under a private name) or a built-in model."""
    path = Path(model)
    if not path.is_file():
        if str(model) in builtin_models():
            return importlib.import_module(f"meganeura_onnx.models.{model}")
        raise click.BadParameter(
            f"no such file {str(model)!r}, and no built-in model of that name (built-in: {', '.join(builtin_models())})", param_hint="MODEL"
        )
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


def build_graph(model: str | Path, sets: dict[str, Any]) -> Any:
    """Call the model's ``build(**sets)``; it must return a Graph with outputs set."""
    from meganeura_onnx import Graph

    module = load_module(model)
    if not callable(getattr(module, "build", None)):
        raise click.BadParameter(
            f"{model} defines no build() function (the model file contract: build(**kwargs) -> Graph)", param_hint="MODEL"
        )
    try:
        graph = module.build(**sets)
    except TypeError as e:
        raise click.BadParameter(f"build() rejected the --set values {sets}: {e}", param_hint="--set") from e
    except Exception as e:
        raise click.ClickException(f"build() in {model} raised {type(e).__name__} with --set values {sets}: {e}") from e
    if not isinstance(graph, Graph):
        raise click.BadParameter(f"build() in {model} returned {type(graph).__name__}, expected a meganeura_onnx.Graph", param_hint="MODEL")
    return graph
