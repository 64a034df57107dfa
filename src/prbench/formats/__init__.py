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
from prbench.registry import FORMATS


def load_reader(spec: str, **options: Any) -> Reader:
    """`name[:options]` -> a reader; an unknown name lists the known ones."""
    reader = FORMATS.build(spec, **options)
    if not isinstance(reader, Reader):
        raise SpecError(f"format {spec!r}: its factory returned {type(reader).__name__}, not a prbench.formats Reader")
    return reader


def _first_row(src: str | Path, split: str, skip_bad: bool = False) -> tuple[str, int, Any]:
    """The first row; with `skip_bad`, the first that parses (`prbench data validate` reports the others)."""
    from prbench.raw import iter_raw

    for file, line, raw in iter_raw(src, split, [] if skip_bad else None):
        return file, line, raw
    raise DataError(str(src), None, None, EMPTY)


EMPTY = "no records (the source is empty)"


def _claims(row: Any) -> str | None:
    if not isinstance(row, dict):
        return None
    candidates = []
    for name in FORMATS.names():
        cls = FORMATS.get(name)
        matches = getattr(cls, "matches", None)
        if callable(matches) and matches(row):
            candidates.append((getattr(cls, "priority", 50), name))
    return min(candidates)[1] if candidates else None


def detect(src: str | Path, split: str = "test", skip_bad: bool = False) -> str:
    """The name of the format whose columns the first row has.

    In a folder, files are tried in name order until one's first row is claimed (a LaMP
    folder's gold-output file is not an array of rows, its questions file is). A row no reader
    claims is refused, never guessed: the error names the closest formats and every column
    each of them misses (`nearest`).
    """
    from prbench.raw import SUFFIXES

    path = Path(str(src))
    try:
        is_dir = path.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte: the loader reports it with its location
        return "prb"
    if not is_dir:
        file, line, row = _first_row(src, split, skip_bad)
        return _claims(row) or _unclaimed(file, line, row)
    first: tuple[str, int, Any] | None = None
    problem: DataError | None = None
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES))
    for f in files:
        try:
            found = _first_row(f, split)
        except DataError as exc:
            if exc.reason != EMPTY:  # an empty file says nothing; a folder of them is an empty source
                problem = problem or exc  # another file may still name the format
            continue
        if name := _claims(found[2]):
            return name
        first = first or found
    if first is None:  # nothing to detect from: what the loader would say, never a format read from nothing
        raise problem or DataError(str(src), None, None, EMPTY if files else f"folder holds no {', '.join(SUFFIXES)} files")
    return _unclaimed(*first)


def nearest(row: Any, n: int = 3) -> list[tuple[str, list[str]]]:
    """The formats whose columns (`Reader.shapes`) are closest to the row's: (name, missing columns),
    most columns shared first, then fewest missing; only formats sharing a column with the row."""
    keys = set(row) if isinstance(row, dict) else set()
    scored = []
    for name in FORMATS.names():
        cls = FORMATS.get(name)
        for shape in getattr(cls, "shapes", ()):
            have = keys & set(shape)
            if have:
                missing = [c for c in shape if c not in keys]
                scored.append(((-len(have), len(missing), getattr(cls, "priority", 50), name), missing))
    best: dict[str, tuple[tuple[Any, ...], list[str]]] = {}
    for key, missing in sorted(scored):
        best.setdefault(key[-1], (key, missing))
    return [(key[-1], missing) for key, missing in sorted(best.values())[:n]]


def _unclaimed(file: str, line: int, row: Any) -> str:
    """Refuse a row no reader claims, in one line: the closest formats and every column each misses."""
    if not isinstance(row, dict):
        raise DataError(file, line, None, f"a record must be a JSON object, got {type(row).__name__}")
    cols = ", ".join(k if k.isprintable() else repr(k) for k in map(str, list(row)[:12])) + (
        ", ..." if len(row) > 12 else "")  # a column named "\n" stays on the one line
    close = nearest(row)
    if not close:
        raise DataError(file, line, None, f"no known format has these columns ({cols or 'none'}): see `prbench "
                                          "data formats`, or name the reader with --format")
    (name, missing), others = close[0], close[1:]
    also = "; also near: " + ", ".join(f"{o} (missing {', '.join(m) or 'nothing: check the column types'})"
                                       for o, m in others) if others else ""
    if not missing:
        raise DataError(file, line, None, f"the columns of format {name!r} are there ({cols}) but their types are "
                                          f"not its own: see `prbench data formats`{also}")
    raise DataError(file, line, ", ".join(missing),
                    f"missing required field{'s' if len(missing) > 1 else ''} of format {name!r}, the closest to this "
                    f"row's columns ({cols}){also}; or name the reader with --format")


def resolve(src: str | Path, spec: str | None, split: str = "test", skip_bad: bool = False) -> Reader:
    """The reader named by `spec`, else the detected one (from the first row that parses, with `skip_bad`)."""
    return load_reader(spec or detect(src, split, skip_bad))


def format_score(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The benchmark's own headline, by the rule of the format that read the records.

    Readers with a rule of their own name themselves in each record (`format`); that reader's
    `score` computes the headline. Records of several such formats in one run have none.
    """
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
    out = []
    for name in FORMATS.names():
        cls = FORMATS.get(name)
        out.append({"name": name, "kind": getattr(cls, "kind", "?"), "source": getattr(cls, "source", ""),
                    "fields": getattr(cls, "fields", ""), "headline": getattr(cls, "headline", "")})
    return out

