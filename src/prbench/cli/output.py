"""Printing for people (rich) and scripts (--json), chosen once per command."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

console = Console(stderr=True)
T = TypeVar("T")


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    t = Table(title=title)
    for c in columns:
        t.add_column(str(c))
    for r in rows:
        t.add_row(*["" if v is None else escape(str(v)) for v in r])
    out = Console()
    if not out.is_terminal:
        out = Console(width=220)  # files and pipes: never squeeze numbers into ellipses
    out.print(t)


@contextmanager
def progress(quiet: bool = False) -> Iterator[Progress]:
    """A rich progress display that is silent under --quiet or when not a terminal."""
    p = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console, disable=quiet or not console.is_terminal,
    )
    with p:
        yield p
