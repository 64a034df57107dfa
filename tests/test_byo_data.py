"""Bring your own personalized data (#37 item 1): the minimal `prb` record, conditions that need what it
lacks refused before scoring, shapes no reader knows refused (never guessed), a row's `split` kept (#42 10b)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prbench.data import load_examples
from prbench.data.pairs import iter_pairs, load_training_pairs
from prbench.errors import DataError
from prbench.formats import detect
from prbench.schema import NO_CATEGORY
from prbench.testing.cli import run_cli
from prbench.train.methods import METHODS, spec_for

MINIMAL = ("id", "user_id", "question", "profile", "chosen", "rejected")


def _minimal(n_users: int = 6) -> list[dict[str, Any]]:
    """Per user: statements they agreed and disagreed with; the judged pair follows their votes."""
    rows = []
    for u in range(n_users):
        likes_trees = u % 2 == 0
        green, grey = "Plant trees along every street.", "Widen the ring road for more cars."
        profile = [{"text": "I agree: Parks make a city liveable." if likes_trees else "I agree: Traffic jams cost us."},
                   {"text": "More parking downtown.", "stance": "disagree" if likes_trees else "agree"},
                   "I walk to the market on Saturdays." if likes_trees else "I drive to the market on Saturdays."]
        rows.append({"id": f"u{u}", "user_id": f"person-{u}", "question": "What should the city spend on next?",
                     "profile": profile, "chosen": green if likes_trees else grey,
                     "rejected": grey if likes_trees else green})
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_minimal_record_validates_and_reads_with_defaults(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "mine.jsonl", _minimal())
    assert all(set(r) == set(MINIMAL) for r in _minimal())
    code, out, err = run_cli(capsys, "data", "validate", str(path))
    assert code == 0 and "6 valid records" in out, err
    assert detect(path) == "prb"
    items = load_examples(path)
    assert {it.category for it in items} == {NO_CATEGORY} and not any(it.rubric_aspects or it.narrative for it in items)


def test_any_category_is_a_category_and_a_filter_for_an_absent_one_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "cooking.jsonl", [{**r, "category": "cooking" if i % 2 else "gardening"}
                                              for i, r in enumerate(_minimal())])
    assert {it.category for it in load_examples(path)} == {"cooking", "gardening"}
    assert len(load_examples(path, categories=["cooking"])) == 3
    with pytest.raises(DataError, match=r"categories: no records in 'baking' \(the data has: 'cooking', 'gardening'\)"):
        load_examples(path, categories=["cooking", "baking"])  # one name absent: refused, never a smaller run


def test_minimal_file_evaluates_under_none_profile_wrong_profile(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "mine.jsonl", _minimal())
    code, out, err = run_cli(capsys, "eval", "-m", "baseline:lexical", "--data", str(path), "-c",
                             "none,profile,wrong-profile", "--out", str(tmp_path / "runs"), "--json", "-q")
    assert code == 0, err
    runs = {r["condition"]: r for r in json.loads(out)}
    assert set(runs) == {"none", "profile", "wrong-profile"} and all(r["n"] == 6 for r in runs.values())


@pytest.mark.parametrize(("condition", "extra", "want"), [
    ("oracle", [], "condition 'oracle' needs rubric_aspects, which 6 of 6 records lack (first: 'u0')"),
    ("none,profile,oracle", [], "condition 'oracle' needs rubric_aspects, which 6 of 6 records lack"),
    ("planner", [], "condition 'planner' needs planner output: give --planner-file"),
    ("planner", ["planner.jsonl"], "condition 'planner' needs planner output, which 5 of 6 records lack (first: 'u1')"),
])
def test_a_condition_needing_a_missing_field_is_one_line_before_scoring(tmp_path: Path, capsys, condition: str,
                                                                       extra: list[str], want: str) -> None:
    path = _write(tmp_path / "mine.jsonl", _minimal())
    args = []
    if extra:
        _write(tmp_path / extra[0], [{"id": "u0", "aspects": [{"aspect": "greener streets"}]}])
        args = ["--planner-file", str(tmp_path / extra[0])]
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:lexical", "--data", str(path), "-c", condition, *args,
                           "--out", str(tmp_path / "runs"), "-q")
    assert code == 2 and err.count("\n") == 1 and want in err, err
    assert not list((tmp_path / "runs").rglob("examples.jsonl"))  # nothing was scored, not even `none`


def test_oracle_runs_where_every_record_has_a_rubric(tmp_path: Path, capsys) -> None:
    rows = [{**r, "rubric_aspects": [{"aspect": "names a concrete project"}]} for r in _minimal()]
    path = _write(tmp_path / "rubric.jsonl", rows)
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:lexical", "--data", str(path), "-c", "oracle",
                           "--out", str(tmp_path / "runs"), "-q")
    assert code == 0, err


# -- detection never guesses ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("row", "field", "parts"), [
    ({"foo": 1, "question": "q"}, "id, profile",
     ["format 'lamp-qa', the closest", "also near: prb (missing id, profile, chosen, rejected)"]),
    ({"query": "q", "answer_good": "a", "answer_bad": "b"}, "responses", ["format 'dsp'"]),
    ({"user_input": "q", "completion_a": "a"}, "completion_b", ["format 'psoups'"]),
])
def test_detect_names_the_closest_formats_and_every_missing_field(tmp_path: Path, capsys, row: dict[str, Any],
                                                                  field: str, parts: list[str]) -> None:
    path = _write(tmp_path / "odd.jsonl", [row])
    with pytest.raises(DataError) as err:
        detect(path)
    assert (err.value.line, err.value.field) == (1, field) and all(p in err.value.reason for p in parts), str(err.value)
    for cmd in ("detect", "validate"):
        code, _, out = run_cli(capsys, "data", cmd, str(path))
        assert code == 2 and out.count("\n") == 1 and f":1: {field}: missing required field" in out, out


def test_detect_refuses_columns_no_format_has(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no known format has these columns \(a, b\)"):
        detect(_write(tmp_path / "odd.jsonl", [{"a": 1, "b": 2}]))


def test_a_prb_row_lacking_several_fields_names_them_all_at_once(tmp_path: Path) -> None:
    row = {k: v for k, v in _minimal()[0].items() if k not in ("id", "profile")}
    with pytest.raises(DataError) as err:
        load_examples(_write(tmp_path / "x.jsonl", [row]))
    assert (err.value.field, err.value.reason) == ("id, profile", "missing required fields")


# -- a row's split (#42 10b) ---------------------------------------------------------------------------------
def _split_rows() -> list[dict[str, Any]]:
    rows = _minimal(6)
    return [{**r, "split": "test" if i >= 4 else "train"} for i, r in enumerate(rows)]


def test_a_test_row_is_never_trained_on_nor_a_train_row_scored(tmp_path: Path) -> None:
    path = _write(tmp_path / "split.jsonl", _split_rows())
    assert [p.id for p in load_training_pairs(path)] == ["u0", "u1", "u2", "u3"]
    assert [ex.id for ex in load_examples(path)] == ["u4", "u5"]  # eval reads --split test (the default)
    assert [p.id for p in iter_pairs(path, "test")] == ["u4", "u5"]
    only_test = _write(tmp_path / "test-only.jsonl", [r for r in _split_rows() if r["split"] == "test"])
    with pytest.raises(DataError, match=r"no train pairs: all 2 pairs are in the test split"):
        load_training_pairs(only_test)


def test_split_marks_must_be_all_or_none(tmp_path: Path) -> None:
    rows = _split_rows()
    del rows[2]["split"]
    with pytest.raises(DataError) as err:
        load_training_pairs(_write(tmp_path / "mixed.jsonl", rows))
    assert (err.value.line, err.value.field) == (3, "split") and "some rows name a split" in err.value.reason
    with pytest.raises(DataError, match=r"no rows in split 'dev' \(the data has: test, train\)"):
        load_examples(_write(tmp_path / "s.jsonl", _split_rows()), split="dev")
    bad = [{**r, "split": 3} for r in _minimal(2)]
    with pytest.raises(DataError, match=r"split: must be the name of a split, got 3"):
        load_examples(_write(tmp_path / "b.jsonl", bad))


def test_train_cli_trains_on_train_rows_only(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "split.jsonl", _split_rows())
    code, _, err = run_cli(capsys, "train", "bt", "--data", str(path), "--frozen-encoder", "--no-protocol",
                           "--epochs", "1", "--out", str(tmp_path / "m"), "--json")
    assert code == 0, err
    assert json.loads((tmp_path / "m" / "config.json").read_text())["train"]["pairs"] == 4  # not the 2 test rows


def test_the_documented_minimal_record_validates(tmp_path: Path) -> None:
    """docs/formats.md's minimal personalized record is a valid record (the page stays true)."""
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text(encoding="utf-8")
    section = page[page.index("## Your own personalized data"):]
    record = json.loads(re.search(r"```json\n(.*?)```", section, re.DOTALL).group(1))
    assert set(record) == set(MINIMAL)
    [item] = load_examples(_write(tmp_path / "doc.jsonl", [record]))
    assert [p.stance for p in item.profile] == [None, "agree", "disagree", "chose"]


def test_training_under_oracle_without_a_rubric_is_refused(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "mine.jsonl", _minimal())
    code, _, err = run_cli(capsys, "train", "bt", "--data", str(path), "--condition", "oracle", "--frozen-encoder",
                           "--no-protocol", "--epochs", "1", "--out", str(tmp_path / "m"))
    assert code == 2 and err.count("\n") == 1 and "condition 'oracle' needs rubric_aspects, which 6 of 6" in err, err


def _judge(body: dict[str, Any]) -> str:
    """SynthesizeMe's engine: a persona from the shown choices when asked for one, else a middling score."""
    text = body["messages"][-1]["content"]
    return "This person favours green city projects." if "describe this person" in text else "Fair.\nScore: 6"


def _method_options(method: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    """The least each method needs to train in seconds (the others train with their defaults)."""
    if method == "synthesizeme":
        srv = request.getfixturevalue("fake_openai")(_judge)
        key_env = request.getfixturevalue("api_key_env")[0]
        return ["--engine", "openai:judge", "--base-url", srv.base_url, "--api-key-env", key_env, "--no-protocol"]
    if method == "finetune":
        return ["--base-model", str(request.getfixturevalue("tiny_rm")), "--max-steps", "2", "--no-protocol"]
    return {"context-bt": ["--frozen-encoder"], "gpo": ["--steps", "20"]}.get(method, [])


def _command(method: str) -> str:
    """`context-bt` trains through `prbench train bt --frozen-encoder`; every other method is its own command."""
    return "bt" if method == "context-bt" else method


@pytest.mark.parametrize("method", sorted(METHODS.names()))
def test_every_method_trains_on_the_minimal_file_and_evaluates(method: str, tmp_path: Path, capsys,
                                                               request: pytest.FixtureRequest) -> None:
    """#37's acceptance: a file with only the minimal fields trains every method, and the trained folder
    evaluates under none / profile / wrong-profile."""
    path = _write(tmp_path / "mine.jsonl", _minimal(8))
    out = tmp_path / "rm"
    code, _, err = run_cli(capsys, "train", _command(method), "--data", str(path), "--out", str(out),
                           *_method_options(method, tmp_path, request))
    assert code == 0, err
    code, stdout, err = run_cli(capsys, "eval", "-m", spec_for(method, out), "--data", str(path), "-c",
                                "none,profile,wrong-profile", "--out", str(tmp_path / "runs"), "--json")
    assert code == 0, err
    rows = json.loads(stdout)
    assert sorted(r["condition"] for r in rows) == ["none", "profile", "wrong-profile"]
    assert all(r["n"] == 8 for r in rows), rows
