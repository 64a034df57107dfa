"""Every error prbench raises for a user to read, in one hierarchy, each with the exit code the CLI gives it.

The CLI (`prbench.cli.main`) prints a `PrbenchError` as one line on stderr and exits with its
`exit_code`: 2 for a usage or input error (the default), 1 for a run that finished but cannot be
trusted, 3 for a spending cap reached, 4 for provider batches submitted and not yet collected.
The modules that raise them re-export their own (`prbench.cost.BudgetExceeded` is this
`BudgetExceeded`), so older imports keep working. Interrupts are not errors: `prbench.runtime.interrupt`
gives them 130 / 143.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_USAGE = 2
EXIT_INVALID_RUN = 1
EXIT_BUDGET = 3
EXIT_BATCH_PENDING = 4


class PrbenchError(Exception):
    """A user-facing error: the message is the whole story, no traceback needed."""

    exit_code: ClassVar[int] = EXIT_USAGE


class DataError(PrbenchError):
    """Bad input data, located by file, line (or row) and field."""

    def __init__(self, file: str, line: int | None, field: str | None, reason: str):
        self.file, self.line, self.field, self.reason = file, line, field, reason
        where = file if line is None else f"{file}:{line}"
        super().__init__(f"{where}: {field + ': ' if field else ''}{reason}")


class MissingExtra(PrbenchError):
    """An optional dependency is not installed; names the extra that brings it."""

    def __init__(self, module: str, extra: str):
        super().__init__(f"'{module}' is not installed: pip install 'prbench[{extra}]'")


class SpecError(PrbenchError):
    """A model spec string that names nothing we can build."""


class OutdatedModel(PrbenchError):
    """A trained folder this prbench no longer scores the way it was trained (retrain it); never a wrong score."""


class NotARun(PrbenchError):
    """A folder holding none of the files a run kind reads (skipped quietly when scanning)."""


class RunBusy(PrbenchError):
    """Another process is writing the run folder."""


class CacheError(PrbenchError):
    """The cache file cannot be used; the message names it and the fix."""


class QuotaExhausted(PrbenchError):
    """The provider says the quota or credit is gone: stop now, resume later (results are cached)."""


class BatchFailed(PrbenchError):
    """A whole batch failed twice (the provider's reason is in the message): nothing more is sent."""


class InvalidRunError(PrbenchError):
    """A run that finished but cannot be trusted: too many invalid records (exit 1, not a usage error)."""

    exit_code: ClassVar[int] = EXIT_INVALID_RUN


class BudgetExceeded(PrbenchError):
    """The next request would take the run past --max-usd: stop, keep what is finished, resume later (exit 3)."""

    exit_code: ClassVar[int] = EXIT_BUDGET


class BatchPending(PrbenchError):
    """Batches are submitted and recorded; run the same command again to collect (exit 4)."""

    exit_code: ClassVar[int] = EXIT_BATCH_PENDING


__all__ = [
    "EXIT_BATCH_PENDING",
    "EXIT_BUDGET",
    "EXIT_INVALID_RUN",
    "EXIT_USAGE",
    "BatchFailed",
    "BatchPending",
    "BudgetExceeded",
    "CacheError",
    "DataError",
    "InvalidRunError",
    "MissingExtra",
    "NotARun",
    "PrbenchError",
    "QuotaExhausted",
    "RunBusy",
    "SpecError",
]
