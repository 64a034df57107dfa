"""Progress for long jobs, shared by the library and the CLI (the library never imports the CLI).

On a terminal: a rich bar. Off a terminal (a log file, nohup, CI): plain lines on stderr, one
when a stage starts and at most one per `PRBENCH_PROGRESS_SECONDS` (default 10) per stage with
items done / total, elapsed time and ETA (counts, never a rate: a stage of six slow items would
read "0.00 items/s"), so a log shows a job is alive without drowning in lines.
Between two counts, the loops that can run for minutes (token steps of generation, batches of
scoring) call `beat` with what is under way, and a ticker thread prints it (with how long that
step has run) whenever no line came for the interval: a line at least every interval.
`--quiet` silences all of it. `announce` says when one-time set-up work starts and how long it takes.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

console = Console(stderr=True)
_STATE: dict[str, Any] = {"quiet": False, "last_line": 0.0, "plain": 0, "detail": None, "detail_since": 0.0}
# Unfinished tasks of every open plain progress, oldest first: the newest is what is under way; when it
# finishes, the one it ran inside (a study's stage) is again, so the ticker is never left with nothing to say.
_OPEN: list[_Task] = []
_LOCK = threading.RLock()  # the ticker thread and the loops print through the same state


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("PRBENCH_PROGRESS_SECONDS", "10")))
    except ValueError:
        return 10.0


def _plain(description: str) -> str:
    """Descriptions are rich markup (escaped by the callers); logs get the plain text."""
    return Text.from_markup(description).plain


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


@dataclass(eq=False)  # tasks are told apart by identity (two may read alike)
class _Task:
    description: str
    total: float | None
    completed: float = 0
    started: float = 0.0
    last_line: float = 0.0
    finished: bool = False
    announced: bool = False
    eta: bool = True  # False for counts of unlike steps (a study's stages): an ETA from them misleads


class LogProgress:
    """The subset of rich's Progress API the commands use, printing plain, rate-limited lines."""

    def __init__(self, stream: Any = None, interval: float | None = None):
        self.stream = stream
        self.interval = _interval() if interval is None else interval
        self.tasks: dict[int, _Task] = {}

    def _print(self, line: str) -> None:
        with _LOCK:
            stream = self.stream or sys.stderr
            stream.write(line + "\n")
            stream.flush()
            _STATE["last_line"] = time.monotonic()

    def add_task(self, description: str, total: float | None = None, eta: bool = True, **_: Any) -> int:
        tid = len(self.tasks)
        now = time.monotonic()
        self.tasks[tid] = _Task(_plain(description), total, started=now, last_line=now, eta=eta)
        with _LOCK:
            _OPEN.append(self.tasks[tid])
            _STATE["last_line"], _STATE["detail"], _STATE["detail_since"] = now, None, now
        return tid  # the start line waits for the first count, so an error at start stays one line

    def update(self, task_id: int, *, completed: float | None = None, total: float | None = None,
               description: str | None = None, advance: float | None = None, **_: Any) -> None:
        t = self.tasks[task_id]
        if description is not None and _plain(description) != t.description:
            t.description, t.announced = _plain(description), True  # counted now, never "started" late
            with _LOCK:
                _STATE["detail"] = None  # what the last step was doing is over
            self._print(f"{t.description}: {t.completed:g}/{'?' if t.total is None else f'{t.total:g}'} done")
        if total is not None:
            t.total = total
        if advance is not None:
            t.completed += advance
        if completed is not None:
            t.completed = completed
        if completed is None and advance is None:
            return
        now = time.monotonic()
        done = t.total is not None and t.completed >= t.total
        if done and t.finished:
            return
        if not t.announced:
            t.announced = True
            shown = "?" if t.total is None else f"{t.total:g}"
            self._print(f"{t.description}: started, {t.completed:g}/{shown} done")
            if not done:
                return
        if done or now - t.last_line >= self.interval:
            t.last_line, t.finished = now, done
            self._print(self.line(t, now))
        if done:
            _close(t)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def remove_task(self, task_id: int) -> None:
        t = self.tasks.pop(task_id, None)
        if t is not None:
            _close(t)

    @staticmethod
    def line(t: _Task, now: float) -> str:
        elapsed = max(now - t.started, 1e-9)
        parts = [f"{t.description}: {t.completed:g}/{'?' if t.total is None else f'{t.total:g}'}"]
        if t.total:
            parts[0] += f" ({100 * t.completed / t.total:.0f}%)"
        if t.total is not None and t.completed >= t.total:
            parts.append(f"done in {_duration(elapsed)}")
            return ", ".join(parts)
        parts.append(f"{_duration(elapsed)} elapsed")
        if t.eta and t.total is not None and t.completed > 0:
            parts.append(f"ETA {_duration((t.total - t.completed) * elapsed / t.completed)}")
        return ", ".join(parts)

    def __enter__(self) -> LogProgress:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        for t in self.tasks.values():
            _close(t)


@contextmanager
def progress(quiet: bool = False) -> Iterator[Any]:
    """A rich bar on a terminal, plain rate-limited lines off one, nothing under --quiet."""
    before = _STATE["quiet"]
    _STATE["quiet"] = quiet or before
    try:
        if not quiet and not console.is_terminal:
            ticker = _Ticker(_interval()) if _interval() > 0 else None
            _STATE["plain"] += 1
            if ticker:
                ticker.start()
            log = LogProgress()
            try:
                yield log
            finally:
                log.__exit__()
                _STATE["plain"] -= 1
                if ticker:
                    ticker.stop.set()
                    ticker.join()
            return
        p = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            console=console, disable=quiet,
        )
        with p:
            yield p
    finally:
        _STATE["quiet"] = before


def beat(detail: str | Callable[[], str]) -> None:
    """Called from inside long loops (a token step, a scoring batch): says what is under way now.

    Off a terminal, a line is printed when none came for `PRBENCH_PROGRESS_SECONDS`, here or by
    the ticker thread, which covers a single step that takes longer (one forward pass of a big
    batch) and says how long that step has been running. Cheap when not due: `detail` may be a
    callable, formatted only when a line is printed."""
    if _STATE["quiet"] or not _STATE["plain"]:  # only inside a command's plain (off-terminal) progress
        return
    with _LOCK:
        _STATE["detail"], _STATE["detail_since"] = detail, time.monotonic()
    _due_line()


def _close(task: _Task) -> None:
    """A finished task is no longer under way; what it ran inside is again, and its step detail ends."""
    with _LOCK:
        if task in _OPEN:
            _OPEN.remove(task)
            _STATE["detail"] = None


@contextmanager
def step(detail: str) -> Iterator[None]:
    """`beat(detail)` for one long step (loading a model): the detail ends when the step does, so a
    line never says "loading X (running 2m37s)" long after X was loaded."""
    beat(detail)
    try:
        yield
    finally:
        with _LOCK:
            if _STATE["detail"] == detail:  # what comes next is timed from now, not from the step's start
                _STATE["detail"], _STATE["detail_since"] = None, time.monotonic()


def _due_line() -> None:
    """Print what is under way if no line came for the interval (from a loop or the ticker)."""
    with _LOCK:
        now = time.monotonic()
        if not _OPEN or now - _STATE["last_line"] < _interval():
            return
        _STATE["last_line"] = now
        detail, age = _STATE["detail"], now - _STATE["detail_since"]
        text = (detail() if callable(detail) else detail) if detail else "working"
        running = f" (running {_duration(age)})" if age >= max(1.0, _interval() / 2) else ""  # a long single step
        sys.stderr.write(f"{_OPEN[-1].description}: {text}{running}\n")
        sys.stderr.flush()


class _Ticker(threading.Thread):
    """Wakes a few times per interval and prints the current activity when no line came for it."""

    def __init__(self, interval: float):
        super().__init__(name="prbench-progress", daemon=True)
        self.interval, self.stop = interval, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(min(1.0, self.interval / 4)):
            _due_line()


def announce(message: str) -> None:
    """One line on stderr for one-time work a user would otherwise take for a hang (silent under --quiet)."""
    if _STATE["quiet"]:
        return
    if console.is_terminal:
        console.print(message, markup=False, highlight=False)
    else:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


@contextmanager
def quiet() -> Iterator[None]:
    """Silence `announce` (and mark progress quiet) for a block: what `--quiet` sets for a command."""
    before = _STATE["quiet"]
    _STATE["quiet"] = True
    try:
        yield
    finally:
        _STATE["quiet"] = before
