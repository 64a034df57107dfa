"""Readers for the data formats people already hold, one module per format.

Each reader is registered in `prbench.registry.FORMATS` (third-party packages add theirs under
the `prbench.formats` entry point) and is chosen by `--format NAME[:OPTIONS]` or detected from
the columns of the first row. Every reader yields validated `prbench.schema` records and
raises one-line `DataError`s naming file, line and field. See docs/readme/formats.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prbench.errors import DataError, SpecError
from prbench.formats.base import Reader


def load_reader(spec: str, **options: Any) -> Reader:
    """`name[:options]` -> a reader; an unknown name lists the known ones."""
    from prbench.registry import FORMATS

    reader = FORMATS.build(spec, **options)
    if not isinstance(reader, Reader):
        raise SpecError(f"format {spec!r}: its factory returned {type(reader).__name__}, not a prbench.formats Reader")
    return reader


def _first_row(src: str | Path, split: str) -> tuple[str, int, Any]:
    from prbench.raw import iter_raw

    for file, line, raw in iter_raw(src, split):
        return file, line, raw
    raise DataError(str(src), None, None, "no records (the source is empty)")


def _claims(row: Any) -> str | None:
    from prbench.registry import FORMATS

    if not isinstance(row, dict):
        return None
    candidates = []
    for name in FORMATS.names():
        cls = FORMATS.get(name)
        matches = getattr(cls, "matches", None)
        if callable(matches) and matches(row):
            candidates.append((getattr(cls, "priority", 50), name))
    return min(candidates)[1] if candidates else None


def detect(src: str | Path, split: str = "test") -> str:
    """The name of the format whose columns the first row has (`prb` when none claims it).

    In a folder, files are tried in name order until one's first row is claimed (a LaMP
    folder's gold-output file is not an array of rows, its questions file is).
    """
    from prbench.raw import SUFFIXES

    path = Path(str(src))
    try:
        is_dir = path.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte: the loader reports it with its location
        return "prb"
    if is_dir:
        for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES)):
            try:
                name = _claims(_first_row(f, split)[2])
            except DataError:
                continue  # the reader (or today's loader) reports it with its location
            if name:
                return name
        return "prb"
    return _claims(_first_row(src, split)[2]) or "prb"


def resolve(src: str | Path, spec: str | None, split: str = "test") -> Reader:
    """The reader named by `spec`, else the detected one."""
    return load_reader(spec or detect(src, split))


def format_score(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The benchmark's own headline, by the rule of the format that read the records.

    Readers with a rule of their own name themselves in each record (`format`); that reader's
    `score` computes the headline. Records of several such formats in one run have none.
    """
    from prbench.registry import FORMATS

    names = {r["format"] for r in records if r.get("format")}
    if len(names) != 1:
        if len(names) > 1:
            import warnings

            warnings.warn(f"records of several formats ({', '.join(sorted(names))}) in one run: no benchmark "
                          "headline (score each benchmark in its own run)", stacklevel=2)
        return None
    score = getattr(FORMATS.get(names.pop()), "score", None)
    return score(records) if callable(score) else None


def describe() -> list[dict[str, str]]:
    """Name, kind, source, fields read and headline rule of every registered format (docs and the CLI)."""
    from prbench.registry import FORMATS

    out = []
    for name in FORMATS.names():
        cls = FORMATS.get(name)
        out.append({"name": name, "kind": getattr(cls, "kind", "?"), "source": getattr(cls, "source", ""),
                    "fields": getattr(cls, "fields", ""), "headline": getattr(cls, "headline", "")})
    return out

