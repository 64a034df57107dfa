"""Raw records of every data source (files, folders, hub datasets, the built-in samples), each with
its file and line: the layer both prbench's own loader and the format readers read through.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from prbench.errors import DataError, PrbenchError
from prbench.schema import CATEGORIES, Example, SourceItem, normalize_category

Kind = Literal["benchmark", "source"]
SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")
SAMPLE_FILES = {"sample": "sample/benchmark.jsonl", "sample:source": "sample/source.jsonl",
                # 24 rows of HH-RLHF harmless-base test (MIT), the shipped sample of a general format
                "sample:hh-rlhf": "sample_formats/hh-rlhf-harmless-test-sample.jsonl"}
# One record per line: a longer line is a broken file (a missing newline, a binary blob), not a
# record, and reading it whole could exhaust memory. Real records are kilobytes.
MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_JSON_BYTES = 512 * 1024 * 1024  # a .json array is parsed whole: larger data belongs in .jsonl or .parquet
_TYPE_NAMES = {"NoneType": "null"}


def _record_class(kind: Kind) -> type[SourceItem]:
    return Example if kind == "benchmark" else SourceItem


def sample_path(name: str = "sample") -> Path:
    """Path of a built-in sample: `sample`, its LaMP-QA source form `sample:source`, `sample:hh-rlhf`."""
    return Path(str(resources.files("prbench.data").joinpath(*SAMPLE_FILES[name].split("/"))))


def _loc(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for p in loc:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "record"


def _first_error(exc: ValidationError) -> tuple[str, str]:
    errors = exc.errors()
    err = errors[0]
    msg = err["msg"]
    missing = [e["loc"] for e in errors if e["type"] == "missing" and e["loc"][:-1] == err["loc"][:-1]]
    if err["type"] == "missing" and len(missing) > 1:  # every missing field of the record at once, not one a run
        return ", ".join(_loc(loc) for loc in missing), "missing required fields"
    if err["type"] == "missing":
        msg = "missing required field"
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif "input" in err and err["type"].endswith("_type"):
        got = type(err["input"]).__name__
        msg = f"{msg} (got {_TYPE_NAMES.get(got, got)})"
    return _loc(err["loc"]), msg


def short_text(value: Any, limit: int = 80) -> str:
    """repr() of a value from the data, cut so an error message stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"


def _parse_json(text: str | bytes, file: str, line: int | None) -> Any:
    """json.loads with every way it can fail turned into a DataError (never another exception)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f", column {exc.colno}" if line is not None else f", line {exc.lineno} column {exc.colno}"
        raise DataError(file, line, None, f"invalid JSON ({exc.msg}{where})") from None
    except RecursionError:
        raise DataError(file, line, None, "invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer over Python's 4300-digit conversion limit
        raise DataError(file, line, None, f"invalid JSON: {str(exc).split(';')[0][:120]}") from None


def _open_binary(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else path.open("rb")


def _iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Records of a JSON Lines file (optionally gzipped), read line by line in bounded memory."""
    file = str(path)
    lineno = 0
    try:
        with _open_binary(path) as fh:
            while True:
                raw = fh.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                lineno += 1
                if len(raw) > MAX_LINE_BYTES:
                    raise DataError(file, lineno, None,
                                    f"line longer than {MAX_LINE_BYTES} bytes (one JSON record per line expected)")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(file, lineno, None,
                                    f"not UTF-8 text ({exc.reason} at byte {exc.start + 1} of the line)") from None
                if lineno == 1:
                    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
                if not text.strip():
                    continue
                yield lineno, _parse_json(text, file, lineno)
    except (OSError, EOFError, zlib.error) as exc:
        reason = "truncated gzip stream" if isinstance(exc, EOFError) else (
            f"cannot read ({getattr(exc, 'strerror', None) or exc})")
        raise DataError(file, lineno + 1 if lineno else None, None, reason) from None


def _iter_json(path: Path) -> Iterator[tuple[int, Any]]:
    file = str(path)
    try:
        if (size := path.stat().st_size) > MAX_JSON_BYTES:
            raise DataError(file, None, None, f"{size} bytes: a .json file is read whole, and this is more than "
                                              f"{MAX_JSON_BYTES}; write the records as .jsonl or .parquet")
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(file, None, None, f"cannot read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(file, line, None, f"not UTF-8 text ({exc.reason} at byte {exc.start + 1})") from None
    data = _parse_json(text, file, None)
    if isinstance(data, dict) and "data" in data and isinstance(data["data"], list):
        data = data["data"]
    if not isinstance(data, list):
        raise DataError(file, None, None, "a .json file must hold an array of records")
    yield from enumerate(data, 1)  # position in the array (1-based) stands in for the line


def _iter_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a broken file
        raise DataError(str(path), None, None, f"not a readable parquet file ({str(exc)[:200]})") from None
    row = 0
    batches = pf.iter_batches(batch_size=256)
    while True:
        try:
            batch = next(batches, None)
            rows = batch.to_pylist() if batch is not None else []
        except Exception as exc:  # noqa: BLE001 - a corrupt page or column chunk: name where reading stopped
            raise DataError(str(path), row + 1, None, f"unreadable parquet data ({str(exc)[:200]})") from None
        if batch is None:
            return
        for rec in rows:
            row += 1
            yield row, rec


def _iter_file(path: Path) -> Iterator[tuple[int, Any]]:
    from prbench.runs import regular_file

    # a FIFO or device: a reader would block (format detection opens the file a second time) or never end
    regular_file(path, "give a regular file")
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

    from prbench.hub import check_ref

    name, _, config = dataset_id.partition(":")
    check_ref(name, "", repo_type="dataset")  # offline or unreachable: one line now, not a retry loop
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
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte in it
        raise DataError(text[:200], None, None, f"not a usable path ({exc})") from None
    if is_dir:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES))
        if not files:
            raise DataError(text, None, None, f"folder holds no {', '.join(SUFFIXES)} files")
        for f in files:
            yield from ((str(f), n, r) for n, r in _iter_file(f))
        return
    if exists:
        yield from ((text, n, r) for n, r in _iter_file(path))
        return
    if "/" in text and not text.startswith((".", "/")) and not path.suffix:
        yield from _iter_hub(text, split)
        return
    raise DataError(text, None, None, "no such file, folder, built-in sample or hub dataset id")


M = TypeVar("M", bound=BaseModel)


def parse_record(raw: Any, cls: type[M], file: str, line: int, any_category: bool = True) -> M:
    """Validate one raw record, raising a DataError that names file, line and field.

    Any category is accepted (a personalized file of one's own has its own topics, or none);
    LaMP-QA's spellings map to its config names. `any_category=False` keeps the LaMP-QA three only.
    """
    if not isinstance(raw, dict):
        raise DataError(file, line, None, f"a record must be a JSON object, got {type(raw).__name__}")
    if isinstance(raw.get("category"), str):
        raw = {**raw, "category": normalize_category(raw["category"])}
    try:
        rec = cls.model_validate(raw)
    except ValidationError as exc:
        field, reason = _first_error(exc)
        raise DataError(file, line, field, reason) from None
    category = None if any_category else getattr(rec, "category", None)  # a record without one is refused
    if not any_category and category not in CATEGORIES:
        raise DataError(file, line, "category",
                        f"unknown category {short_text(category)} (known: {', '.join(CATEGORIES)})")
    return rec

def split_rows(src: str | Path, split: str) -> Iterator[tuple[str, int, Any]]:
    """The raw rows of `split` in a `prb` / pair file: rows that name a `split` are read only in it.

    Why: a row marked `split: test` must never be trained on (nor a `train` row scored). A file
    whose rows name no split is one part, read whole in any split (as always). Some rows naming a
    split and others not is refused (which part would the others be?), and so is a split no row has.
    """
    marked: bool | None = None
    present: set[str] = set()
    n_rows = 0
    for file, line, raw in iter_raw(src, split):
        n_rows += 1
        has = isinstance(raw, dict) and "split" in raw
        if marked is None:
            marked = has
        elif has != marked:
            raise DataError(file, line, "split", "some rows name a split and others do not: give every row one "
                                                 "(train, test, ...) or none")
        if not has:
            yield file, line, raw
            continue
        part = raw["split"]
        if not isinstance(part, str) or not part.strip():
            raise DataError(file, line, "split", f"must be the name of a split, got {short_text(part)}")
        present.add(part)
        if part == split:
            yield file, line, raw
    if marked and n_rows and split not in present:
        raise DataError(str(src), None, "split", f"no rows in split {split!r} (the data has: "
                                                 f"{', '.join(sorted(present))})")
