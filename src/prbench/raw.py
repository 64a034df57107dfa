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
from prbench.schema import CATEGORIES, Example, SourceItem, normalize_category, same_texts

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


def json_words(exc: json.JSONDecodeError) -> str:
    """What a JSON syntax error means, in words (the parser's own terms, e.g. "Invalid control character at",
    name the symptom, not the usual cause: an unterminated string)."""
    doc, pos = exc.doc if isinstance(exc.doc, str) else "", exc.pos
    rest, before = doc[pos:], doc[:pos].rstrip()
    at_end = not rest.strip()
    msg = exc.msg
    if msg.startswith(("Invalid control character", "Unterminated string")):
        if msg.startswith("Unterminated") or (rest[:1] in ("\n", "\r") and at_end):
            return "a string is not closed (its closing quote is missing before the end of the line)"
        if rest[:1] in ("\n", "\r"):
            return "a line break inside a string (write it as \\n)"
        return f"a raw control character {rest[:1]!r} inside a string (escape it, e.g. \\t)"
    if msg.startswith("Expecting property name"):
        return "a trailing comma before '}'" if before.endswith(",") else "a key must be text in double quotes"
    if msg.startswith("Expecting ':'"):
        return "a key must be followed by ':'"
    if msg.startswith("Expecting ','"):
        return "the record ends early (a closing '}' or ']' is missing)" if at_end else \
            "a comma is missing between two items"
    if msg.startswith("Expecting value"):
        if not doc.strip():
            return "no value at all"
        return "the record ends early (a value is missing)" if at_end else \
            "a value is expected here (text in double quotes, a number, true, false, null, an object or a list)"
    if msg.startswith("Extra data"):
        return "more than one JSON value (one record per line, or one array per .json file)"
    if msg.startswith("Invalid \\uXXXX"):
        return "a broken \\u escape (four hex digits expected)"
    if msg.startswith("Invalid \\escape"):
        return "an unknown backslash escape in a string (write a backslash as \\\\)"
    return msg


def _parse_json(text: str | bytes, file: str, line: int | None) -> Any:
    """json.loads with every way it can fail turned into a DataError (never another exception)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if line is not None else f"line {exc.lineno} column {exc.colno}"
        raise DataError(file, line, None, f"invalid JSON: {json_words(exc)} ({where})") from None
    except RecursionError:
        raise DataError(file, line, None, "invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer over Python's 4300-digit conversion limit
        raise DataError(file, line, None, f"invalid JSON: {str(exc).split(';')[0][:120]}") from None


def _open_binary(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else path.open("rb")


def _iter_jsonl(path: Path, faults: list[DataError] | None = None) -> Iterator[tuple[int, Any]]:
    """Records of a JSON Lines file (optionally gzipped), read line by line in bounded memory. With `faults`, a
    line that is not UTF-8 or not JSON is added to it and reading goes on (`prbench data validate`)."""
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
                    if lineno == 1:
                        text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
                    if not text.strip():
                        continue
                    parsed = _parse_json(text.rstrip("\r\n"), file, lineno)  # columns within the line
                except UnicodeDecodeError as exc:
                    fault = DataError(file, lineno, None,
                                      f"not UTF-8 text ({exc.reason} at byte {exc.start + 1} of the line)")
                    if faults is None:
                        raise fault from None
                    faults.append(fault)
                    continue
                except DataError as fault:
                    if faults is None:
                        raise
                    faults.append(fault)
                    continue
                yield lineno, parsed
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


def _iter_file(path: Path, faults: list[DataError] | None = None) -> Iterator[tuple[int, Any]]:
    from prbench.store.runs import regular_file

    # a FIFO or device: a reader would block (format detection opens the file a second time) or never end
    regular_file(path, "give a regular file")
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return _iter_jsonl(path, faults)
    if name.endswith(".json"):
        return _iter_json(path)
    if name.endswith(".parquet"):
        return _iter_parquet(path)
    raise DataError(str(path), None, None, f"unsupported file type (use one of {', '.join(SUFFIXES)})")


def _iter_hub(dataset_id: str, split: str) -> Iterator[tuple[str, int, Any]]:
    """Rows of a Hugging Face dataset, each config in turn (the benchmark has one per category)."""
    import datasets

    from prbench.runtime.hub import check_ref

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


def lone_surrogate(value: Any) -> str | None:
    """Where in a parsed record a text holds a lone surrogate (JSON's "\\ud800" escape decodes to one), or None.

    Why refuse it where it is read: such a text is no Unicode, so it cannot be encoded as UTF-8; it passed every
    check and then failed deep inside a later step (a cache key, a tokenizer) naming no file, line or field."""
    stack: list[tuple[tuple[int | str, ...], Any]] = [((), value)]
    while stack:
        loc, v = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    return _loc(loc)
        elif isinstance(v, dict):
            for k, item in reversed(v.items()):
                if isinstance(k, str) and lone_surrogate(k):
                    return _loc(loc) if loc else "record"
                stack.append(((*loc, str(k)), item))
        elif isinstance(v, list):
            stack.extend(((*loc, i), item) for i, item in reversed(list(enumerate(v))))
    return None


def _checked(file: str, rows: Iterator[tuple[int, Any]], faults: list[DataError] | None
             ) -> Iterator[tuple[str, int, Any]]:
    for n, r in rows:
        if (where := lone_surrogate(r)) is not None:
            fault = DataError(file, n, where, "a lone surrogate (an unpaired \\ud800-\\udfff escape): not text "
                                              "that can be written as UTF-8; fix or drop the character")
            if faults is None:
                raise fault
            faults.append(fault)
            continue
        yield file, n, r


def iter_raw(src: str | Path, split: str = "test", faults: list[DataError] | None = None
             ) -> Iterator[tuple[str, int, Any]]:
    """(file label, line or row, raw record) for every record in `src`. With `faults`, a line that cannot be a
    record (not UTF-8, not JSON, a lone surrogate) is added to it and reading goes on; else it is raised."""
    text = str(src)
    if text in SAMPLE_FILES:
        path = sample_path(text)
        yield from _checked(text, _iter_jsonl(path, faults), faults)
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
            yield from _checked(str(f), _iter_file(f, faults), faults)
        return
    if exists:
        yield from _checked(text, _iter_file(path, faults), faults)
        return
    if "/" in text and not text.startswith((".", "/")) and not path.suffix:
        for label, n, r in _iter_hub(text, split):
            yield from _checked(label, iter([(n, r)]), faults)
        return
    raise DataError(text, None, None, "no such file, folder, built-in sample or hub dataset id")


M = TypeVar("M", bound=BaseModel)


def _models(m: BaseModel, loc: tuple[int | str, ...] = ()) -> Iterator[tuple[tuple[int | str, ...], BaseModel]]:
    """The record and every record inside it (profile items, rubric aspects, messages, history), with places."""
    yield loc, m
    for name in type(m).model_fields:
        value = getattr(m, name)
        if isinstance(value, BaseModel):
            yield from _models(value, (*loc, name))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from _models(item, (*loc, name, i))


def unknown_fields(rec: BaseModel) -> list[str]:
    """Fields of a record (and the records inside it) that its schema does not name, as `profile[].stnace`:
    kept with the record (datasets grow columns) but read by nothing."""
    found: dict[str, None] = {}
    for loc, m in _models(rec):
        for key in m.model_extra or {}:
            place = "".join("[]" if isinstance(p, int) else f".{p}" for p in (*loc, key))
            found[place.removeprefix(".")] = None
    return list(found)


def near_miss(rec: BaseModel) -> tuple[str, str] | None:
    """(place, known name) of the first unknown field that is a near-miss of a field the record left unset
    (`userid` for `user_id`), or None. Why a fault and not a note: the misspelt field is read as absent, so a
    file's users, stances or categories would silently vanish from every number."""
    import difflib

    for loc, m in _models(rec):
        unset = [f for f in type(m).model_fields if f not in m.model_fields_set]
        for key in m.model_extra or {}:
            close = difflib.get_close_matches(key.lower(), unset, n=1, cutoff=0.8)
            if close:
                return _loc((*loc, key)), close[0]
    return None


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
    chosen, rejected = getattr(rec, "chosen", None), getattr(rec, "rejected", None)
    if isinstance(chosen, str) and isinstance(rejected, str) and same_texts(chosen, rejected):
        raise DataError(file, line, "rejected", "the same text as chosen: a pair with nothing to prefer cannot be "
                                                "judged")
    if (miss := near_miss(rec)) is not None:
        raise DataError(file, line, miss[0], f"unknown field: did you mean {miss[1]!r}? (a misspelt field is read "
                                             "as absent)")
    category = None if any_category else getattr(rec, "category", None)  # a record without one is refused
    if not any_category and category not in CATEGORIES:
        raise DataError(file, line, "category",
                        f"unknown category {short_text(category)} (known: {', '.join(CATEGORIES)})")
    return rec

def split_rows(src: str | Path, split: str, faults: list[DataError] | None = None) -> Iterator[tuple[str, int, Any]]:
    """The raw rows of `split` in a `prb` / pair file: rows that name a `split` are read only in it.

    Why: a row marked `split: test` must never be trained on (nor a `train` row scored). A file
    whose rows name no split is one part, read whole in any split (as always). Some rows naming a
    split and others not is refused (which part would the others be?), and so is a split no row has.
    """
    marked: bool | None = None
    present: set[str] = set()
    n_rows = 0
    for file, line, raw in iter_raw(src, split, faults):
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
