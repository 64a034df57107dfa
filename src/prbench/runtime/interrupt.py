"""Ctrl-C and SIGTERM end a run cleanly: what was scored is kept, and the user is told how to resume.

Drivers catch `KeyboardInterrupt` around their loop, flush what is finished and attach a note
("12 of 63 items saved in runs/..."); the CLI prints one line with those notes and the command
that resumes, and exits 130 (SIGINT) or 143 (SIGTERM), as shells and schedulers expect.
"""

from __future__ import annotations

import signal
import threading
from typing import Any


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that knows its signal (SIGTERM arrives as one too, see `sigterm_as_interrupt`)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def message(self, command: str) -> str:
        saved = "; ".join(notes(self)) or "work finished before it is kept"
        return (f"interrupted ({signal.Signals(self.signum).name}): {saved}; "
                f"resume with: {resume_command(command)}")


def note(exc: BaseException, text: str) -> None:
    """Attach what a driver saved before the interrupt went on up."""
    exc.__dict__.setdefault("prbench_saved", []).append(text)


def notes(exc: BaseException) -> list[str]:
    return list(exc.__dict__.get("prbench_saved", []))


def interrupted_by(exc: BaseException) -> Interrupted | None:
    """The interrupt behind `exc` (click turns KeyboardInterrupt into Abort), carrying its notes."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        if isinstance(cur, KeyboardInterrupt):
            found = cur if isinstance(cur, Interrupted) else Interrupted()
            for e in seen:
                for text in notes(e):
                    if text not in notes(found):
                        note(found, text)
            return found
        cur = cur.__cause__ or cur.__context__
    return None


def resume_command(command: str) -> str:
    """The same command without `--overwrite` (which would discard what was just saved)."""
    import shlex

    return shlex.join(a for a in shlex.split(command) if a != "--overwrite")


_LAST: list[Interrupted] = []


def _raise(signum: int, _frame: Any) -> None:
    exc = Interrupted(signum)
    _LAST.append(exc)  # typer turns a KeyboardInterrupt into a bare exit code; the CLI reads it here
    raise exc


def last() -> Interrupted | None:
    """The interrupt the handlers raised in this process, if any (with the notes drivers attached)."""
    return _LAST[-1] if _LAST else None


def sigterm_as_interrupt() -> Any:
    """SIGTERM (and SIGINT) raise `Interrupted` in the main thread, so `finally` blocks and flushes run.

    Returns a function that puts the previous handlers back (main() may run inside a test process).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    _LAST.clear()
    before = {sig: signal.signal(sig, _raise) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return restore
