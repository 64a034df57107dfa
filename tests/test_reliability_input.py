"""Bad input never crashes prbench: one line naming file, line (or row) and field; exit code 2.

The corpus lives in tests/data/bad (regenerate with `python tests/data/bad/make_corpus.py`);
MANIFEST.json holds where each planted defect must be reported. Every file goes through the
real entry point (`prbench.cli.main`) twice: `prbench data validate FILE` and
`prbench eval -m baseline:length --data FILE`. The 50 MB lines are generated here, in tmp.
Property-based tests (hypothesis) feed arbitrary bytes and JSON values to the loaders and
arbitrary text to every parser of model output: each input either loads/parses or raises a
DataError (loaders) / returns "unreadable" (parsers); no other exception, ever.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prbench.data import load_examples
from prbench.errors import DataError
from prbench.testing.cli import run_cli
from prbench.testing.records import make_record, make_records

BAD = Path(__file__).parent / "data" / "bad"
MANIFEST: dict[str, dict[str, Any]] = json.loads((BAD / "MANIFEST.json").read_text(encoding="utf-8"))
FAST = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def error_lines(err: str) -> list[str]:
    """The `error: ...` lines of stderr (a progress display may print its last state above them when
    stderr is not a terminal: see test_progress_display_is_silent_when_stderr_is_not_a_terminal)."""
    return [ln for ln in err.splitlines() if ln.startswith("error:")]


def expected_prefix(path: Path, expect: dict[str, Any]) -> str:
    where = str(path) if expect["line"] in (None, "any") else f"{path}:{expect['line']}"
    return f"error: {where}" + (f": {expect['field']}: " if expect["field"] else "")


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_corpus_manifest_covers_every_file() -> None:
    files = {p.name for p in BAD.iterdir() if p.is_file()} - {"MANIFEST.json", "make_corpus.py"}
    assert files == set(MANIFEST)
    assert len(MANIFEST) >= 35


# -- the corpus, through the API ----------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_loader_names_file_line_and_field(name: str) -> None:
    expect = MANIFEST[name]
    path = BAD / name
    with pytest.raises(DataError) as err:
        load_examples(path)
    e = err.value
    assert e.file == str(path)
    if expect["line"] != "any":
        assert e.line == expect["line"], str(e)
    assert e.field == expect["field"], str(e)
    assert expect["reason"] in e.reason, str(e)
    assert "\n" not in str(e) and len(str(e)) < 400


# -- the corpus, through the CLI ------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_cli_one_line_error_exit_2(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect = MANIFEST[name]
    path = BAD / name
    prefix = expected_prefix(path, expect)
    for args in (["data", "validate", str(path)],
                 ["eval", "-m", "baseline:length", "--data", str(path), "--out", str(tmp_path / "runs")]):
        code, out, err = run_cli(capsys, *args)
        assert code == 2, (args, err)
        errors = error_lines(err)
        if args[0] == "data" and len(errors) > 1:  # validate reports every fault, then their count (#50)
            assert re.fullmatch(rf"error: {re.escape(str(path))}: {len(errors) - 1} faults, \d+ valid records",
                                errors[-1]), (args, err)
            errors = errors[:1]
        assert errors[0].startswith(prefix) and expect["reason"] in errors[0], (args, err)
        assert err.endswith(error_lines(err)[-1] + "\n") and "Traceback" not in err and out == ""
    # nothing half-done is left behind: a run over bad data writes no run folder at all
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("examples.jsonl"))


@pytest.mark.parametrize("name", ["truncated_json.jsonl", "profile_as_string.parquet", "empty.jsonl"])
def test_debug_shows_the_traceback_in_process(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """With --debug the error propagates out of main() (Python prints the traceback)."""
    from prbench.cli import main

    with mock.patch.object(sys, "argv", ["prbench", "--debug", "data", "validate", str(BAD / name)]), \
            pytest.raises(DataError):
        main()


def test_real_process_exit_codes_and_tracebacks() -> None:
    """The installed entry point in a real process: exit 2 + one line, or a traceback with --debug."""
    path = str(BAD / "wrong_type_question.jsonl")
    plain = subprocess.run([sys.executable, "-m", "prbench", "data", "validate", path],
                           capture_output=True, text=True, timeout=120, check=False)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.splitlines() == [f"error: {path}:3: question: Input should be a valid string (got int)"]
    debug = subprocess.run([sys.executable, "-m", "prbench", "--debug", "eval", "-m", "baseline:length",
                            "--data", path, "--out", "/nonexistent-never-written"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert "DataError" in debug.stderr and f"{path}:3: question" in debug.stderr


# -- 50 MB lines, generated -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def fifty_mb(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("big")
    big_text = "word " * (10 * 1024 * 1024)  # 50 MiB of answer
    good = json.dumps(make_record(0)) + "\n"
    huge = json.dumps(make_record(1, chosen=big_text)) + "\n"
    assert len(huge) > 50 * 1024 * 1024
    paths = {
        "valid": root / "huge_valid.jsonl",           # a 50 MB record is still a record
        "truncated": root / "huge_truncated.jsonl",   # cut mid-string: a crashed writer
        "garbage": root / "huge_garbage.jsonl",       # 50 MB of non-JSON without a newline
    }
    paths["valid"].write_text(good + huge, encoding="utf-8")
    paths["truncated"].write_text(good + huge[: 50 * 1024 * 1024], encoding="utf-8")
    with paths["garbage"].open("wb") as fh:
        fh.write(good.encode())
        fh.write(b"x" * (50 * 1024 * 1024))
    return paths


def test_fifty_mb_line(fifty_mb: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "data", "validate", str(fifty_mb["valid"]))
    assert code == 0 and "2 valid records" in out
    for kind in ("truncated", "garbage"):
        path = fifty_mb[kind]
        for args in (["data", "validate", str(path)],
                     ["eval", "-m", "baseline:length", "--data", str(path), "--out", str(tmp_path)]):
            code, out, err = run_cli(capsys, *args)
            assert code == 2, err
            [line] = error_lines(err)
            assert line.startswith(f"error: {path}:2: invalid JSON") and err.endswith(line + "\n")
            assert len(err) < 400  # the 50 MB are never echoed


def test_line_length_guard(fifty_mb: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Over MAX_LINE_BYTES a line is refused before it is held in memory (guard scaled down here)."""
    from prbench import raw as loaders  # the raw-record layer holds the guard

    monkeypatch.setattr(loaders, "MAX_LINE_BYTES", 1024 * 1024)
    with pytest.raises(DataError) as err:
        load_examples(fifty_mb["valid"])
    assert err.value.line == 2 and "line longer than 1048576 bytes" in err.value.reason
    assert len(load_examples("sample", limit=3)) == 3  # ordinary records are far below the guard


# -- more ways to be empty or wrong --------------------------------------------------------------
def test_categories_filter_that_matches_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arts_only = write_jsonl(tmp_path / "arts.jsonl", [r for r in make_records(6) if r["category"].startswith("Art")])
    with pytest.raises(DataError, match=r"categories: no records in 'Society_and_Culture' "
                                        r"\(the data has: 'Art_and_Entertainment'\)"):
        load_examples(arts_only, categories=["society"])
    with pytest.raises(DataError, match=r"categories: no records in 'cooking' \(the data has"):
        load_examples(arts_only, categories=["cooking"])  # any category is a category (#37): absent, named
    assert len(load_examples(arts_only, categories=["arts"])) == 2
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", str(arts_only),
                           "--categories", "society", "--out", str(tmp_path / "runs"))
    assert code == 2 and error_lines(err)[0].startswith(f"error: {arts_only}: categories: no records in")
    code, _, err = run_cli(capsys, "data", "stats", str(arts_only), "--categories", "arts,cooking")
    assert code == 2 and "no records in 'cooking'" in err  # one of two absent: still refused, never a smaller run


def test_empty_folder_and_folder_of_empty_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    code, _, err = run_cli(capsys, "data", "validate", str(empty_dir))
    assert code == 2 and "folder holds no" in err
    (empty_dir / "a.jsonl").write_text("", encoding="utf-8")
    (empty_dir / "b.jsonl").write_text("\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", str(empty_dir),
                           "--out", str(tmp_path / "runs"))
    assert code == 2 and error_lines(err) == [f"error: {empty_dir}: no records (the source is empty)"]
    # one good file among empty ones is fine
    write_jsonl(empty_dir / "c.jsonl", make_records(2))
    assert len(load_examples(empty_dir)) == 2


def test_missing_path_and_odd_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "data", "validate", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "no such file" in err
    odd = tmp_path / "two\nlines.jsonl"
    odd.write_text("{broken\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "data", "validate", str(odd))
    assert code == 2 and err.count("\n") == 1 and "invalid JSON" in err  # a newline in a name stays one line
    code, _, err = run_cli(capsys, "data", "validate", "x" * 5000 + ".jsonl")
    assert code == 2 and err.count("\n") == 1
    (tmp_path / "data.csv").write_text("a,b\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "data", "validate", str(tmp_path / "data.csv"))
    assert code == 2 and "unsupported file type" in err


def test_progress_display_is_silent_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", str(BAD / "empty_chosen.jsonl"))
    assert code == 2 and err.count("\n") == 1


def test_byte_order_mark_and_crlf_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "windows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(json.dumps(r).encode() + b"\r\n" for r in make_records(3)))
    assert [x.id for x in load_examples(path)] == ["ex-000", "ex-001", "ex-002"]
    as_json = tmp_path / "windows.json"
    as_json.write_bytes(b"\xef\xbb\xbf" + json.dumps(make_records(2)).encode())
    assert len(load_examples(as_json)) == 2


def test_gzip_and_parquet_round_trip_still_work(tmp_path: Path) -> None:
    gz = tmp_path / "x.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in make_records(5)))
    assert len(load_examples(gz)) == 5


def test_profile_of_only_stopwords_and_punctuation_is_ranked_not_fatal(tmp_path: Path) -> None:
    from prbench import evaluate

    rec = make_record(0, profile=[{"id": "p0", "text": "..."}, {"id": "p1", "text": "!!! \U0001f602"}])
    path = write_jsonl(tmp_path / "odd_user.jsonl", [rec, make_record(1)])
    res = evaluate("baseline:lexical", str(path), "profile", n_boot=10)
    assert res.summary.n_total == 2


# -- property-based: the loaders ----------------------------------------------------------------
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=12)
FIELDS = ["id", "question", "profile", "rubric_aspects", "category", "chosen", "rejected", "narrative", "user_id"]


def _load_or_data_error(path: Path) -> None:
    try:
        items = load_examples(path)
    except DataError as exc:
        assert exc.file and "\n" not in exc.reason
        return
    assert items  # loaded: never an empty success


@FAST
@given(data=st.binary(max_size=400))
@example(data=b"")
@example(data=b"\xff\xfe\x00{")
@example(data=b"[" * 5000)
@example(data=b'{"id": ' + b"1" * 5000 + b"}")
@example(data=b"\xef\xbb\xbf\n")
def test_arbitrary_bytes_load_or_raise_data_error(tmp_path: Path, data: bytes) -> None:
    for suffix in (".jsonl", ".json", ".jsonl.gz", ".parquet"):
        path = tmp_path / f"x{suffix}"
        path.write_bytes(data)
        _load_or_data_error(path)
    gz = tmp_path / "y.jsonl.gz"
    gz.write_bytes(gzip.compress(data, mtime=0))
    _load_or_data_error(gz)


@FAST
@given(values=st.lists(JSON_VALUES, min_size=0, max_size=4))
def test_arbitrary_json_values_load_or_raise_data_error(tmp_path: Path, values: list[Any]) -> None:
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in values), encoding="utf-8")
    _load_or_data_error(path)
    arr = tmp_path / "v.json"
    arr.write_text(json.dumps(values), encoding="utf-8")
    _load_or_data_error(arr)


@FAST
@given(field=st.sampled_from(FIELDS), value=JSON_VALUES, drop=st.booleans(), where=st.sampled_from(
    [None, ("profile", 0, "text"), ("profile", 1, "id"), ("rubric_aspects", 0, "aspect"), ("rubric_aspects", 1, "reason")]))
def test_mutated_records_load_or_name_the_field(tmp_path: Path, field: str, value: Any, drop: bool, where) -> None:
    recs = make_records(3)
    if where is None:
        if drop:
            recs[1].pop(field, None)
        else:
            recs[1][field] = value
    else:
        key, i, sub = where
        recs[1][key][i][sub] = value
    path = write_jsonl(tmp_path / "m.jsonl", recs)
    try:
        load_examples(path)
    except DataError as exc:
        assert exc.line == 2 and exc.file == str(path)


# -- property-based: parsers of model output ----------------------------------------------------
MODEL_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(["Result:", " A", " B", "tie", "[[A]]", "\\boxed{B}", "Score:", " 7", "/10", "10",
                              "<think>", "</think>", "{", "}", "[", "]", '"winner": "A"', '"score": 5', "\n", "1.",
                              "2:", "Response A is better", "or B", "**", "```json", "```", '"grades": [', "5/5",
                              "factuality: 4", "relevance: 5", "helpfulness=3", "rubric fit: 2", "\u00b2", "-1",
                              "1e999", "NaN", "inf", "'", ",", "9" * 50]), max_size=30).map("".join),
)


@FAST
@given(text=MODEL_TEXT)
@example(text="")
@example(text="Score: " + "9" * 5000)
@example(text="[[" + "1" * 400 + "]]")
def test_judge_parsers_never_crash(text: str) -> None:
    from prbench.rewards.judges import parse_score, parse_verdict

    assert parse_verdict(text) in ("A", "B", "tie", None)
    for scale in ((1, 10), (0, 1), (1, 5)):
        s = parse_score(text, scale)
        assert s is None or (math.isfinite(s) and scale[0] <= s <= scale[1])


@FAST
@given(text=MODEL_TEXT)
@example(text='{"factuality": 4, "relevance": 5, "helpfulness": 3, "rubric_fit": 2}')
def test_validator_score_parser_never_crashes(text: str) -> None:
    from prbench.build.validate import SCALES, parse_scores

    got = parse_scores(text)
    assert got is None or (set(got) == set(SCALES) and all(1 <= v <= 5 for v in got.values()))


@FAST
@given(text=MODEL_TEXT, n=st.integers(min_value=1, max_value=6))
@example(text='{"grades": [{"aspect": 1, "score": 2}]}', n=1)
def test_grader_parser_never_crashes(text: str, n: int) -> None:
    from prbench.downstream.grader import parse_grades

    got = parse_grades(text, n)
    assert len(got) == n and all(v in (0, 1, 2, None) for v in got)


# Replies that once crashed the parsers: deep nesting, 5000-digit numbers, non-ASCII digits ('\u00b2').
CRASHERS = ["[" * 100000 + "]" * 100000, '{"grades": ' * 3000 + "1" + "}" * 3000, '{"\u00b2": 1}',
            "1" * 5000 + ": 2", '{"' + "1" * 5000 + '": 2}', "{" * 100000]


def test_validator_parser_survives_deep_nesting() -> None:
    from prbench.build.validate import parse_scores

    for text in CRASHERS:
        assert parse_scores(text) is None


def test_grader_parser_survives_hostile_replies() -> None:
    from prbench.downstream.grader import parse_grades

    for text in CRASHERS:
        got = parse_grades(text, 3)
        assert len(got) == 3


def test_model_options_that_cannot_name_a_run_are_refused_in_one_line(tmp_path) -> None:
    from prbench import evaluate
    from prbench.errors import PrbenchError
    from prbench.store.cache import Cache

    with pytest.raises(PrbenchError, match=r"model_options must be plain values.*pass it instead of its spec"):
        evaluate("baseline:lexical", "sample", "profile", model_options={"encoder_cache": Cache(tmp_path / "c.sqlite")})
