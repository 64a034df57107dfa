"""Loaders: every format round-trips through convert; bad input names file, line and field."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from prbench.data import load_examples, write_examples
from prbench.errors import DataError
from prbench.schema import Example
from prbench.testing.records import make_record, make_records


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prbench", *args], check=False, capture_output=True, text=True)


@pytest.fixture()
def good(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "good.jsonl", make_records(12))


def test_load_jsonl_and_fields(good: Path) -> None:
    items = load_examples(good)
    assert len(items) == 12 and all(isinstance(x, Example) for x in items)
    assert items[0].profile[0].id == "u0-p0" and items[0].rubric_aspects[1].aspect == "Low cost"


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".json", ".parquet"])
def test_round_trip_every_format(good: Path, tmp_path: Path, suffix: str) -> None:
    original = load_examples(good)
    dst = tmp_path / f"out{suffix}"
    assert write_examples(original, dst) == 12
    back = load_examples(dst)
    assert [x.model_dump() for x in back] == [x.model_dump() for x in original]


def test_folder_of_category_files(tmp_path: Path) -> None:
    recs = make_records(9)
    folder = tmp_path / "bench"
    folder.mkdir()
    for cat in {r["category"] for r in recs}:
        write_examples(load_examples(write_jsonl(tmp_path / f"{cat}.jsonl", [r for r in recs if r["category"] == cat])),
                       folder / f"{cat}.parquet")
    items = load_examples(folder)
    assert sorted(x.id for x in items) == sorted(r["id"] for r in recs)


def test_filter_shuffle_limit(good: Path) -> None:
    arts = load_examples(good, categories=["arts"])
    assert arts and all(x.category == "Art_and_Entertainment" for x in arts)
    a = [x.id for x in load_examples(good, shuffle_seed=3)]
    b = [x.id for x in load_examples(good, shuffle_seed=3)]
    c = [x.id for x in load_examples(good, shuffle_seed=4)]
    assert a == b and a != c and sorted(a) == sorted(x.id for x in load_examples(good))
    assert len(load_examples(good, limit=5)) == 5


def test_unknown_fields_are_kept(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [make_record(0, extra_col={"a": 1})])
    assert load_examples(path)[0].model_dump()["extra_col"] == {"a": 1}


def test_integer_ids_become_text(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [make_record(0, id=17)])
    assert load_examples(path)[0].id == "17"


@pytest.mark.parametrize(
    "mutate, line, field",
    [
        (lambda r: r.pop("question"), 2, "question"),
        (lambda r: r.update(question=5), 2, "question"),
        (lambda r: r.update(chosen="   "), 2, "chosen"),
        (lambda r: r["profile"][1].pop("text"), 2, "profile[1].text"),
        (lambda r: r["rubric_aspects"][0].update(aspect=""), 2, "rubric_aspects[0].aspect"),
        (lambda r: r.update(category="  "), 2, "category"),  # any name, never a blank one
        (lambda r: r.update(profile=None), 2, "profile"),
    ],
)
def test_bad_record_names_file_line_field(tmp_path: Path, mutate, line: int, field: str) -> None:
    recs = make_records(3)
    mutate(recs[1])
    path = write_jsonl(tmp_path / "bad.jsonl", recs)
    with pytest.raises(DataError) as err:
        load_examples(path)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), line, field)
    assert str(err.value).startswith(f"{path}:{line}: {field}: ")


def test_broken_json_line_and_duplicate_id(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(make_record(0)) + "\n" + '{"id": "ex-001", "question": \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.jsonl:2: invalid JSON"):
        load_examples(path)
    dup = write_jsonl(tmp_path / "dup.jsonl", [make_record(0), make_record(1), make_record(2, id="ex-000")])
    with pytest.raises(DataError, match=r"dup\.jsonl:3: id: duplicate id 'ex-000' \(first at .*dup\.jsonl:1\)"):
        load_examples(dup)


def test_not_utf8_and_wrong_shape(tmp_path: Path) -> None:
    raw = tmp_path / "latin1.jsonl"
    raw.write_bytes(json.dumps(make_record(0)).encode() + b"\n\xff\xfe{}\n")
    with pytest.raises(DataError, match="not UTF-8"):
        load_examples(raw)
    arr = tmp_path / "list.jsonl"
    arr.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"list\.jsonl:1: a record must be a JSON object"):
        load_examples(arr)
    gz = tmp_path / "x.jsonl.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write(json.dumps(make_record(0)) + "\n")
    assert len(load_examples(gz)) == 1


def test_cli_validate_stats_convert(good: Path, tmp_path: Path) -> None:
    ok = cli("data", "validate", str(good))
    assert ok.returncode == 0 and "12 valid records" in ok.stdout
    stats = cli("data", "stats", str(good), "--json")
    assert stats.returncode == 0
    s = json.loads(stats.stdout)
    longer = sum(len(r["chosen"].split()) > len(r["rejected"].split()) for r in make_records(12)) / 12
    assert s["items"] == 12 and s["users"] == 4 and s["share_chosen_longer"] == round(longer, 4)
    assert s["per_category"] == {"Art_and_Entertainment": 4, "Lifestyle_and_Personal_Development": 4,
                                 "Society_and_Culture": 4}
    out = tmp_path / "c.parquet"
    conv = cli("data", "convert", str(good), str(out))
    assert conv.returncode == 0 and len(load_examples(out)) == 12
    recs = make_records(3)
    recs[2]["profile"][0]["text"] = 7
    bad = write_jsonl(tmp_path / "bad.jsonl", recs)
    res = cli("data", "validate", str(bad))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"error: {bad}:3: profile[0].text: Input should be a valid string (got int)"]
