"""Run the real CLI entry point in this process, for tests: (exit code, stdout, stderr)."""

from __future__ import annotations

import sys
from typing import Any
from unittest import mock


def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    """`prbench ARGS` through `prbench.cli.main`; `capsys` is pytest's capture fixture."""
    from prbench.cli import main

    capsys.readouterr()
    code = 0
    with mock.patch.object(sys, "argv", ["prbench", *args]):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def run_ok(capsys: Any, *args: str) -> str:
    """`run_cli` for a command that must succeed: its stdout (a failure shows its stderr)."""
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    return out
