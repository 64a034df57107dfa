"""Printing for people (rich) and scripts (--json), chosen once per command."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from prbench.runtime.progress import console, progress  # noqa: F401  (re-exported for the commands)

T = TypeVar("T")


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], keep_first: bool = False,
          max_width: int | None = None) -> None:
    """keep_first: the first column's lines are never folded (names broken where the caller chose); max_width: at
    most this many columns even on a wider terminal (cells wrap at spaces)."""
    t = Table(title=title, min_width=len(title))  # the title on one line
    for i, c in enumerate(columns):
        t.add_column(str(c), overflow="fold", no_wrap=keep_first and i == 0)  # a long name wraps, never "baselin..."
    for r in rows:
        t.add_row(*["" if v is None else escape(str(v)) for v in r])
    out = Console()
    if not out.is_terminal:  # files and pipes: never squeeze numbers into ellipses (COLUMNS when set)
        out = Console(width=int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 220)
    if max_width is not None and out.width > max_width:
        out = Console(width=max_width, force_terminal=out.is_terminal)
    out.print(t)
