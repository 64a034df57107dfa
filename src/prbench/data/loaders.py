"""One entry point for every data source: files, folders, hub datasets and the built-in sample.

Records are validated one at a time as they stream in, so a large benchmark is never held
twice; every error names file, line (or row) and field.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from prbench.errors import DataError, PrbenchError
from prbench.raw import (  # noqa: F401  (the loader's public names, as before the split)
    SAMPLE_FILES,
    SUFFIXES,
    Kind,
    _record_class,
    iter_raw,
    parse_record,
    sample_path,
    short_text,
    split_rows,
)
from prbench.schema import CATEGORIES, Example, SourceItem, answer_leak, normalize_category


def check_one_format(src: str | Path, split: str = "test") -> None:
    """Refuse a folder whose files hold different formats, naming a file of each.

    Why: a folder is read by one reader, detected from its first claimed file; a RewardBench file
    next to a TRL file would otherwise be read as TRL (losing its sections), silently.
    """
    from prbench.formats import _claims, _first_row

    path = Path(str(src))
    try:
        if not path.is_dir():
            return
    except (OSError, ValueError):
        return
    first: dict[str, str] = {}
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES)):
        try:
            name = _claims(_first_row(f, split)[2])
        except DataError:
            continue  # the reader reports it with its location
        if name:
            first.setdefault(name, str(f))
    if len(first) > 1:
        shown = "; ".join(f"{f} is {name}" for name, f in sorted(first.items(), key=lambda kv: kv[1]))
        raise DataError(str(src), None, None, f"the folder mixes formats ({shown}): give one format per folder, "
                                              "or name the reader with --format")


def iter_examples(
    src: str | Path,
    kind: Kind | None = "benchmark",
    categories: Iterable[str] | None = None,
    split: str = "test",
    any_category: bool = True,
    format: str | None = None,
    faults: list[DataError] | None = None,
) -> Iterator[SourceItem]:
    """Validated records in file order; duplicate ids are an error naming both places.

    A pair whose profile holds its own answer (`schema.answer_leak`) is refused after the whole source is read,
    with the count of such records. With `faults` (`prbench data validate`), every fault is added to that list
    and reading goes on (a `prb` / `lamp-qa` file; another format's reader stops at its first fault).

    `format` names a reader of `prbench.formats` (`rewardbench2`, `prism:user`...); without it
    the format is detected from the first row's columns (a shape no reader knows is refused,
    naming the closest formats and what each misses). Every format keeps its own categories;
    `any_category=False` holds a `prb` / `lamp-qa` file to LaMP-QA's three. `kind=None` takes
    the kind the format holds (pairs or sources). Rows of a `prb` file that name a `split`
    are read only in that split (`split_rows`).

    A source with no records is an error ("no records"), and so is a `categories` filter that
    names a category no record has: a run over nothing (or over less than asked for) must never
    look like a finished run.
    """
    reader, kind = _reader(src, format, split, kind, faults)
    native = reader.name in ("prb", "lamp-qa")
    any_category = any_category or not native  # other formats name their own categories
    cls = _record_class(kind)
    wanted = _wanted(src, categories, any_category)
    seen: dict[str, str] = {}
    found: set[str] = set()
    leaks: list[DataError] = []
    kept = 0

    def fault(error: DataError) -> None:
        if faults is None:
            raise error
        faults.append(error)

    if native:
        records: Iterable[tuple[str, int, Any]] = (
            (file, line, rec) for file, line, raw in split_rows(src, split, faults)
            if (rec := _native_or_fault(raw, cls, file, line, any_category, fault)) is not None)
    else:
        records = _stop_at_fault(reader.read(src, split), faults)
    for file, line, rec in records:
        if rec.id in seen:
            fault(DataError(file, line or None, "id", f"duplicate id {short_text(rec.id)} (first at {seen[rec.id]})"))
            continue
        seen[rec.id] = f"{file}:{line}"
        if isinstance(rec, Example) and (leak := answer_leak(rec)) is not None:
            where, _, why = leak.partition(": ")
            leaks.append(DataError(file, line or None, where, why))
            if faults is not None:
                faults.append(leaks[-1])
            continue
        found.add(rec.category)
        if wanted is None or rec.category in wanted:
            kept += 1
            yield rec
    if leaks and faults is None:
        first = leaks[0]
        raise DataError(first.file, first.line, first.field, f"{first.reason}: {len(leaks)} of {len(seen)} records "
                        "do (the RM is shown the profile, so the answer would reach the scorer); remove the pair "
                        "from those profiles")
    if not seen and not faults:
        raise DataError(str(src), None, None, "no records (the source is empty)")
    if wanted and (absent := wanted - found):  # a misspelt category must not shrink a run silently
        raise DataError(str(src), None, "categories",
                        f"no records in {', '.join(sorted(map(short_text, absent)))} "
                        f"(the data has: {', '.join(sorted(map(short_text, found)))})")




def _reader(src: str | Path, format: str | None, split: str, kind: Kind | None, faults: list[DataError] | None
            ) -> tuple[Any, Kind]:
    """The format reader of `src` and the kind of item to read (a format holding another kind is refused)."""
    from prbench.formats import resolve

    if format is None:
        check_one_format(src, split)
    try:
        reader = resolve(src, format, split, skip_bad=faults is not None)
    except DataError:
        if faults is None:
            raise
        reader = resolve(src, format, split)  # no row parses at all: the first row's own error, raised
    native = reader.name in ("prb", "lamp-qa")
    if (format or not native) and kind is not None and reader.kind != kind:
        raise DataError(str(src), None, None, f"format {reader.name!r} holds {reader.kind} items, not {kind} items "
                                                 f"(read them as such: --kind {reader.kind})")
    return reader, kind if kind is not None else reader.kind


def _wanted(src: str | Path, categories: Iterable[str] | None, any_category: bool) -> set[str] | None:
    """The categories asked for, normalized; outside LaMP-QA's three refused unless any category is allowed."""
    wanted = {normalize_category(c) for c in categories} if categories else None
    unknown = sorted(c for c in wanted or () if c not in CATEGORIES)
    if unknown and not any_category:
        raise DataError(str(src), None, "categories", f"unknown categor{'y' if len(unknown) == 1 else 'ies'} "
                        f"{', '.join(map(short_text, unknown))} (known: {', '.join(CATEGORIES)})")
    return wanted


def _native_or_fault(raw: Any, cls: type, file: str, line: int, any_category: bool,
                     fault: Callable[[DataError], None]) -> Any:
    """`_native`, or None after handing its error to `fault` (which raises it unless faults are collected)."""
    try:
        return _native(raw, cls, file, line, any_category)
    except DataError as error:
        fault(error)
        return None


def _stop_at_fault(records: Iterable[tuple[str, int, Any]], faults: list[DataError] | None
                   ) -> Iterator[tuple[str, int, Any]]:
    """A format reader's records; its first error ends them, added to `faults` when those are collected (a
    reader cannot go on past its own error)."""
    try:
        yield from records
    except DataError as error:
        if faults is None:
            raise
        faults.append(error)


def _native(raw: Any, cls: type, file: str, line: int, any_category: bool) -> Any:
    """A prbench record; a row in TRL's shape with a user (prbench's pair-file shape) names the reader that reads it."""
    if (cls is not SourceItem and isinstance(raw, dict) and "question" not in raw
            and {"prompt", "chosen", "rejected"} <= set(raw)):
        raise DataError(file, line, "question", "missing required field (the row has TRL's prompt, chosen and "
                                                "rejected: read the file with --format trl, which keeps user_id)")
    return parse_record(raw, cls, file, line, any_category)


def take_items(records: Iterable[Any], limit: int | None) -> Iterator[Any]:
    """The first `limit` items: the pairs of a multi-response item (same `item_id`) count as one
    and are never cut apart, so an item is always scored over all its responses."""
    if limit is None:
        yield from records
        return
    seen: set[str] = set()
    for rec in records:
        key = getattr(rec, "item_id", None) or rec.id
        if key not in seen:
            if len(seen) >= limit:
                return
            seen.add(key)
        yield rec


def load_examples(
    src: str | Path,
    kind: Kind | None = "benchmark",
    *,
    categories: Iterable[str] | None = None,
    limit: int | None = None,
    shuffle_seed: int | None = None,
    split: str = "test",
    any_category: bool = True,
    format: str | None = None,
) -> list[Any]:
    """Load and validate `src` (file, folder, hub id, or `sample` / `sample:source`).

    `format` names the reader (see `iter_examples`); order is file order, or a deterministic
    shuffle when `shuffle_seed` is given; `limit` applies after filtering and shuffling so a
    limited run is a fair subsample.
    """
    items = list(iter_examples(src, kind, categories, split, any_category, format))
    if shuffle_seed is not None:  # whole items move: the pairs of one item stay together, in order
        groups: dict[str, list[Any]] = {}
        for it in items:
            groups.setdefault(getattr(it, "item_id", None) or it.id, []).append(it)
        keys = list(groups)
        random.Random(shuffle_seed).shuffle(keys)
        items = [it for k in keys for it in groups[k]]
    return list(take_items(items, limit))


_OPTIONAL_EMPTY = ("context", "history", "persona")  # fields other formats add; absent stays absent


def _dump(item: BaseModel) -> dict[str, Any]:
    row = item.model_dump(mode="json", exclude_none=True)
    for key in _OPTIONAL_EMPTY:
        if key in row and not row[key]:
            del row[key]
    return row


def write_examples(items: Iterable[BaseModel], dst: str | Path) -> int:
    """Write records as .jsonl (optionally .gz), .json or .parquet; returns the count."""
    path = Path(dst)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [_dump(it) for it in items]
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        keys = list(dict.fromkeys(k for r in rows for k in r))  # union, first-seen order
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows]), path)
    elif name.endswith(".json"):
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    elif name.endswith((".jsonl", ".jsonl.gz")):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "wt", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    else:
        raise PrbenchError(f"{dst}: unsupported output type (use .jsonl, .jsonl.gz, .json or .parquet)")
    return len(rows)
