"""Errors that the CLI turns into one clear line and exit code 2."""

from __future__ import annotations


class PrbenchError(Exception):
    """A user-facing error: the message is the whole story, no traceback needed."""


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
