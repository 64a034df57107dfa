"""One entry point for every data source: files, folders, hub datasets and the built-in sample.

Records are validated one at a time as they stream in, so a large benchmark is never held
twice; every error names file, line (or row) and field.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from prbench.errors import DataError, PrbenchError
from prbench.schema import CATEGORIES, Example, SourceItem, normalize_category

Kind = Literal["benchmark", "source"]
SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")
SAMPLE_FILES = {"sample": "benchmark.jsonl", "sample:source": "source.jsonl"}


def _record_class(kind: Kind) -> type[SourceItem]:
    return Example if kind == "benchmark" else SourceItem


def sample_path(name: str = "sample") -> Path:
    """Path of the built-in sample (`sample`) or its LaMP-QA source form (`sample:source`)."""
    return Path(str(resources.files("prbench.data") / "sample" / SAMPLE_FILES[name]))


def _loc(error: dict[str, Any]) -> str:
    parts: list[str] = []
    for p in error["loc"]:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "record"


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    msg = err["msg"]
    if err["type"] == "missing":
        msg = "missing required field"
    elif "input" in err and err["type"].endswith("_type"):
        msg = f"{msg} (got {type(err['input']).__name__})"
    return _loc(err), msg


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="strict")
    return path.open("r", encoding="utf-8", errors="strict")


def _iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        with _open_text(path) as fh:
            lineno = 0
            for lineno, line in enumerate(fh, 1):  # noqa: B007
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(str(path), lineno, None, f"invalid JSON: {exc.msg} at column {exc.colno}")
    except UnicodeDecodeError as exc:
        raise DataError(str(path), None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _iter_json(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(str(path), None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DataError(str(path), exc.lineno, None, f"invalid JSON: {exc.msg}") from None
    if isinstance(data, dict) and "data" in data and isinstance(data["data"], list):
        data = data["data"]
    if not isinstance(data, list):
        raise DataError(str(path), None, None, "a .json file must hold an array of records")
    for i, rec in enumerate(data):
        yield i, rec  # position in the array stands in for the line


def _iter_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise DataError(str(path), None, None, f"not a readable parquet file ({exc})") from None
    row = 0
    for batch in pf.iter_batches(batch_size=256):
        for rec in batch.to_pylist():
            row += 1
            yield row, rec


def _iter_file(path: Path) -> Iterator[tuple[int, Any]]:
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return _iter_jsonl(path)
    if name.endswith(".json"):
        return _iter_json(path)
    if name.endswith(".parquet"):
        return _iter_parquet(path)
    raise DataError(str(path), None, None, f"unsupported file type (use one of {', '.join(SUFFIXES)})")


def _iter_hub(dataset_id: str, split: str) -> Iterator[tuple[str, int, Any]]:
    """Rows of a Hugging Face dataset, each config in turn (the benchmark has one per category)."""
    import datasets

    name, _, config = dataset_id.partition(":")
    try:
        configs = [config] if config else datasets.get_dataset_config_names(name)
        for cfg in configs:
            ds = datasets.load_dataset(name, cfg, split=split, streaming=True)
            for row, rec in enumerate(ds, 1):
                yield f"{name}:{cfg}[{split}]", row, rec
    except (ConnectionError, OSError) as exc:
        raise PrbenchError(
            f"{dataset_id}: cannot reach the Hugging Face Hub ({type(exc).__name__}); "
            "download the dataset once with network access or pass a local file or folder"
        ) from None


def iter_raw(src: str | Path, split: str = "test") -> Iterator[tuple[str, int, Any]]:
    """(file label, line or row, raw record) for every record in `src`."""
    text = str(src)
    if text in SAMPLE_FILES:
        path = sample_path(text)
        yield from ((text, n, r) for n, r in _iter_jsonl(path))
        return
    path = Path(text)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES))
        if not files:
            raise DataError(text, None, None, f"folder holds no {', '.join(SUFFIXES)} files")
        for f in files:
            yield from ((str(f), n, r) for n, r in _iter_file(f))
        return
    if path.exists():
        yield from ((text, n, r) for n, r in _iter_file(path))
        return
    if "/" in text and not text.startswith((".", "/")) and not path.suffix:
        yield from _iter_hub(text, split)
        return
    raise DataError(text, None, None, "no such file, folder, built-in sample or hub dataset id")


def parse_record(raw: Any, cls: type[BaseModel], file: str, line: int, any_category: bool = False) -> Any:
    """Validate one raw record, raising a DataError that names file, line and field."""
    if not isinstance(raw, dict):
        raise DataError(file, line, None, f"a record must be a JSON object, got {type(raw).__name__}")
    if isinstance(raw.get("category"), str):
        raw = {**raw, "category": normalize_category(raw["category"])}
    try:
        rec = cls.model_validate(raw)
    except ValidationError as exc:
        field, reason = _first_error(exc)
        raise DataError(file, line, field, reason) from None
    if not any_category and rec.category not in CATEGORIES:
        raise DataError(file, line, "category", f"unknown category {rec.category!r} (known: {', '.join(CATEGORIES)})")
    return rec


def iter_examples(
    src: str | Path,
    kind: Kind = "benchmark",
    categories: Iterable[str] | None = None,
    split: str = "test",
    any_category: bool = False,
) -> Iterator[SourceItem]:
    """Validated records in file order; duplicate ids are an error naming both places."""
    cls = _record_class(kind)
    wanted = {normalize_category(c) for c in categories} if categories else None
    seen: dict[str, str] = {}
    for file, line, raw in iter_raw(src, split):
        rec = parse_record(raw, cls, file, line, any_category)
        if rec.id in seen:
            raise DataError(file, line, "id", f"duplicate id {rec.id!r} (first at {seen[rec.id]})")
        seen[rec.id] = f"{file}:{line}"
        if wanted is None or rec.category in wanted:
            yield rec


def load_examples(
    src: str | Path,
    kind: Kind = "benchmark",
    *,
    categories: Iterable[str] | None = None,
    limit: int | None = None,
    shuffle_seed: int | None = None,
    split: str = "test",
    any_category: bool = False,
) -> list[Any]:
    """Load and validate `src` (file, folder, hub id, or `sample` / `sample:source`).

    Order is file order, or a deterministic shuffle when `shuffle_seed` is given; `limit`
    applies after filtering and shuffling so a limited run is a fair subsample.
    """
    items = list(iter_examples(src, kind, categories, split, any_category))
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(items)
    return items[:limit] if limit is not None else items


def write_examples(items: Iterable[BaseModel], dst: str | Path) -> int:
    """Write records as .jsonl (optionally .gz), .json or .parquet; returns the count."""
    path = Path(dst)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [it.model_dump(mode="json", exclude_none=True) for it in items]
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
