"""The `prbench` command: a thin typer app over the public API."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated

import typer

from prbench import __version__
from prbench.errors import PrbenchError

app = typer.Typer(
    name="prbench",
    help="Personalized reward-model benchmarking: does your RM know this user?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
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


def _register() -> None:
    """Attach the sub-apps once (main() may run many times in one process: tests, notebooks)."""
    if _REGISTERED["done"]:
        return
    _REGISTERED["done"] = True
    from prbench.cli import build as build_cmds
    from prbench.cli import data as data_cmds
    from prbench.cli import plan as plan_cmds
    from prbench.cli import train as train_cmds

    data_cmds.app.command("synth-users")(train_cmds.synth_users)
    app.add_typer(data_cmds.app, name="data")
    app.add_typer(build_cmds.app, name="build")
    app.add_typer(train_cmds.app, name="train")
    app.add_typer(plan_cmds.app, name="plan")
    for module in _COMMAND_MODULES:
        __import__(f"prbench.cli.{module}")
    for module in _REGISTER_MODULES:
        importlib.import_module(f"prbench.cli.{module}").register(app)


# Modules that add top-level commands to `app` when imported.
_COMMAND_MODULES: list[str] = ["eval", "study"]
# Modules that expose register(app).
_REGISTER_MODULES: list[str] = ["downstream", "rgd", "meta", "export"]


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    # Library chatter (weight-loading bars, advisory warnings) drowns our own progress display.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _register()
    try:
        app(standalone_mode=False)
    except PrbenchError as exc:
        if _DEBUG["on"]:
            raise
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # click usage errors and the unexpected
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(2)
        if _DEBUG["on"]:
            raise
        print(f"error: {type(exc).__name__}: {_one_line(str(exc))} (run with --debug for the traceback)",
              file=sys.stderr)
        sys.exit(1)


def _one_line(message: str, limit: int = 2000) -> str:
    """An error as one line (a file name or a library message may hold newlines), of bounded length."""
    text = " ".join(part.strip() for part in message.splitlines() if part.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."
