"""The `prbench` command: a thin typer app over the public API."""

from __future__ import annotations

import copy
import importlib
import os
import sys
from typing import Annotated, Any, NoReturn

import typer
from typer.models import CommandInfo

from prbench import __version__
from prbench.errors import PrbenchError
from prbench.registry import RUNKINDS, resolve
from prbench.runtime import interrupt

app = typer.Typer(
    name="prbench",
    help="Personalized reward-model benchmarking: does your RM know this user?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain click help: readable at 80 columns and in logs
)
_DEBUG = {"on": False}
_REGISTERED = {"done": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"prbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    _DEBUG["on"] = debug


# Every command of `prbench`, in the order its help lists them (typer lists groups of commands after the rest).
# A name without a target is a run kind: its command is the kind's `command`, read from RUNKINDS as a plug-in
# kind's is (kinds not named here follow, by name). The others make no run of a kind: "module:attr" of a typer
# command function or of a typer app (a group of commands).
COMMANDS: dict[str, str | None] = {
    "eval": None, "leaderboard": "prbench.cli.leaderboard:leaderboard_cmd",
    "compare": "prbench.cli.leaderboard:compare_cmd",
    "study": "prbench.cli.study:study_cmd", "demo": "prbench.cli.study:demo_cmd",
    "power": "prbench.cli.power:power_cmd", "sample": None, "bon": None, "rl": None,
    "serve-reward": "prbench.cli.downstream:serve_reward", "rgd": None, "policy-accuracy": None, "icl": None,
    "meta": "prbench.cli.meta:meta", "report": "prbench.cli.meta:report",
    "data": "prbench.cli.data:app", "build": None, "train": "prbench.cli.train:app", "plan": None,
    "export": "prbench.cli.export:app", "view": "prbench.cli.view:view_cmd",
}


def _register() -> None:
    """Attach every command once (main() may run many times in one process: tests, notebooks).

    A run kind's command comes from the kind (built-in and plug-in kinds alike, one path); a kind no entry
    names follows the table."""
    if _REGISTERED["done"]:
        return
    _REGISTERED["done"] = True
    for name in [*COMMANDS, *(n for n in RUNKINDS.names() if n not in COMMANDS)]:
        try:
            _add(app, name)
        except PrbenchError as exc:  # a broken plug-in: every other command still works; this line says why
            print(f"warning: {exc}", file=sys.stderr)


def command_app(*names: str) -> typer.Typer:
    """An app of only the named commands of `prbench`, each made as `prbench` makes it (`APP NAME ARGS`)."""
    sub = typer.Typer()
    sub.callback()(lambda: None)
    for name in names:
        if name not in COMMANDS and name not in RUNKINDS:
            raise PrbenchError(f"no command {name!r} in prbench")
        _add(sub, name)
    return sub


def _add(to: typer.Typer, name: str) -> None:
    """`NAME` on `to`: COMMANDS' target, else the run kind's `command` (a plug-in kind's as a built-in's): a typer
    app (a group), a typer `CommandInfo` (a function with its click settings: help class, epilog) or a function."""
    target = COMMANDS.get(name)
    if target is None and name in RUNKINDS:
        target = getattr(type(RUNKINDS.get(name)), "command", None)  # the class's: a function, not a method
    command = resolve(target)
    if command is None:
        return
    if isinstance(command, typer.Typer):
        to.add_typer(command, name=name)
    elif isinstance(command, CommandInfo):
        info = copy.copy(command)
        info.name = name
        to.registered_commands.append(info)
    else:
        to.command(name)(command)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2; interrupts exit 130 / 143."""
    # Library chatter (weight-loading bars, advisory warnings) drowns our own progress display.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _register()
    errors = _click_exceptions()
    restore = interrupt.sigterm_as_interrupt()
    try:
        command = typer.main.get_command(app)
        _metavars(command)
        command(standalone_mode=False, prog_name="prbench")
        stopped = interrupt.last()  # typer returns 130 for an interrupt instead of raising it
        if stopped is not None:
            _exit_interrupted(stopped)
    except PrbenchError as exc:
        if _DEBUG["on"]:
            raise
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except (typer.Exit, getattr(errors, "Exit", typer.Exit)) as exc:
        sys.exit(getattr(exc, "exit_code", 0))
    except errors.NoArgsIsHelpError as exc:  # `prbench` or `prbench data` alone: the help was shown
        if str(exc):
            print(str(exc))
        sys.exit(0)
    except errors.UsageError as exc:
        print(_usage_error(exc), file=sys.stderr)
        sys.exit(2)
    except (typer.Abort, getattr(errors, "Abort", typer.Abort), KeyboardInterrupt) as exc:
        _exit_interrupted(interrupt.last() or interrupt.interrupted_by(exc) or interrupt.Interrupted())
    except errors.ClickException as exc:
        exc.show()
        sys.exit(2)
    except Exception as exc:  # the unexpected
        if _DEBUG["on"]:
            raise
        print(f"error: {type(exc).__name__}: {_one_line(str(exc))} (run with --debug for the traceback)",
              file=sys.stderr)
        sys.exit(1)
    finally:
        restore()


def _exit_interrupted(stopped: interrupt.Interrupted) -> NoReturn:
    """One line, then exit 130 / 143. Worker threads (an engine's pool) would keep computing and
    hold up the interpreter's exit, so with any still running the process ends at once: every
    finished record is already fsynced."""
    import threading

    print(stopped.message(_command_line()), file=sys.stderr)
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if busy:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(stopped.exit_code)
    sys.exit(stopped.exit_code)


def _click_exceptions() -> Any:
    """The exception module of the click that typer runs on (typer >= 0.2x vendors its own)."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


def _command_line() -> str:
    import shlex

    return shlex.join(["prbench", *sys.argv[1:]])


def _closest(typed: str, candidates: list[str]) -> list[str]:
    """The candidates nearly as close to what was typed as the closest one (at most 3), closest first."""
    import difflib

    ratio = {c: difflib.SequenceMatcher(None, typed, c).ratio() for c in candidates}
    best = max(ratio.values())
    return sorted((c for c in candidates if ratio[c] >= best - 0.1), key=lambda c: (-ratio[c], c))[:3]


def _usage_error(exc: Exception) -> str:
    """The command's usage line, then the error in one line with a suggestion and where to read more."""
    ctx = getattr(exc, "ctx", None)
    close = getattr(exc, "possibilities", None)
    text = getattr(exc, "message", "") if close else ""
    message = _one_line(text or (exc.format_message() if hasattr(exc, "format_message") else str(exc)))
    if close and "did you mean" not in message.lower():
        message += f"; did you mean {' or '.join(_closest(getattr(exc, 'option_name', None) or '', close))}?"
    if ctx is not None:
        usage, path = ctx.get_usage(), ctx.command_path
    else:  # raised by the parser before a context existed: name the command from argv
        import itertools

        words = ["prbench", *itertools.takewhile(lambda w: not w.startswith("-"), sys.argv[1:3])]
        path = " ".join(words)
        usage = f"Usage: {path} [OPTIONS]"
    return f"{usage}\nerror: {message} (see '{path} --help')"


def _metavars(command: Any) -> None:
    """Name option values as users expect (SPEC, PATH, N) instead of typer's <str> / <int>."""
    import typing
    from pathlib import Path

    for param in getattr(command, "params", []):
        if param.metavar is not None or getattr(param, "is_flag", False):
            continue
        ann = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        if ann is None:  # older typer on real click: the click type says it
            ann = {"integer": int, "float": float, "path": Path, "boolean": bool}.get(
                getattr(param.type, "name", ""), str)
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if typing.get_origin(ann) is list or (args and typing.get_origin(args[0]) is list):
            ann = typing.get_args(ann if typing.get_origin(ann) is list else args[0])[0]
        elif args:
            ann = args[0]
        metavar = _metavar(param.name or "", ann, Path)
        if metavar:
            param.metavar = metavar
        if getattr(param, "param_type_name", "") == "argument" and hasattr(param, "display_type_rich"):
            param.metavar = (param.name or "arg").upper()
            param.display_type_rich = lambda ctx: None  # the name says it; typer would add <str>
    for sub in getattr(command, "commands", {}).values():
        _metavars(sub)


_SPEC_NAMES = {"model", "rm", "policy", "grader", "planner", "generator", "validator", "encoder", "retriever",
               "engine", "judge", "base_model"}


def _metavar(name: str, kind: object, path_type: type) -> str | None:
    if kind is bool:
        return None
    if kind is int:
        return "N"
    if kind is float:
        return "X"
    if name in _SPEC_NAMES or name.endswith(("_rm", "_model")):
        return "SPEC"
    if name in ("data", "source", "eval_data", "adapt_data", "train_data"):
        return "DATA"
    if kind is path_type or name in ("out", "samples", "runs") or name.endswith(("_file", "_dir", "_path")):
        return "PATH"
    if name in ("condition", "conditions"):
        return "COND"
    if name.endswith("key_env"):
        return "VAR"
    if name.endswith("base_url"):
        return "URL"
    return name.rsplit("_", 1)[-1].upper() if name else "TEXT"


def _one_line(message: str, limit: int = 2000) -> str:
    """An error as one line (a file name or a library message may hold newlines), of bounded length."""
    text = " ".join(part.strip() for part in message.splitlines() if part.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."
