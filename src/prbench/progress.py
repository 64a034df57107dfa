"""Progress for long jobs, shared by the library and the CLI (the library never imports the CLI)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

console = Console(stderr=True)


@contextmanager
def progress(quiet: bool = False) -> Iterator[Progress]:
    """A rich progress display that is silent under --quiet or when not a terminal."""
    p = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console, disable=quiet or not console.is_terminal,
    )
    with p:
        yield p
