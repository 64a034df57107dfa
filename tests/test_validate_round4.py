"""`prbench data validate` refuses what a later step chokes on, every fault of a file with their count
(#50.6, #51.2, #51.3, #51.7): each test failed on the code before for the reason its docstring gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prbench.data import load_examples
from prbench.data.pairs import load_training_pairs
from prbench.errors import DataError
from prbench.testing.cli import run_cli
from prbench.testing.records import make_record, make_records


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def errors(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("error:")]


def leaky(i: int, how: str) -> dict[str, Any]:
    """A pair whose profile holds its own answer: the judged pair as a past choice, or the chosen text as a post."""
    rec = make_record(i)
    item = {"prompt": rec["question"], "chosen": rec["chosen"], "rejected": rec["rejected"]} if how == "pair" \
        else {"text": rec["chosen"]}
    rec["profile"] = [*rec["profile"], item]
    return rec


# -- #50.6: every fault, did-you-mean, JSON errors in words -----------------------------------------------------
def test_validate_reports_every_fault_with_the_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: only the first of three faults was printed."""
    recs = make_records(6)
    recs[1]["question"] = 3
    recs[3]["profile"][0]["stance"] = "disagre"
    del recs[5]["chosen"]
    path = write_jsonl(tmp_path / "three.jsonl", recs)
    code, out, err = run_cli(capsys, "data", "validate", str(path))
    assert code == 2 and out == ""
    assert errors(err) == [
        f"error: {path}:2: question: Input should be a valid string (got int)",
        (f"error: {path}:4: profile[0].stance: unknown stance 'disagre' (use agree, agreed, like, liked, upvote, "
        "chose, chosen, wrote, endorse, disagree, disagreed, dislike, disliked, downvote, rejected, reject, pass, "
        "neutral, unsure)"),
        f"error: {path}:6: chosen: missing required field",
        f"error: {path}: 3 faults, 3 valid records"]
    code, out, err = run_cli(capsys, "data", "validate", str(path), "--max-faults", "1", "--json")
    assert code == 2
    got = json.loads(out)
    assert (got["valid"], got["records"], got["faults"], len(got["shown"])) == (False, 3, 3, 1)
    assert errors(err) == [f"error: {path}: 3 faults, 3 valid records; the first 1 shown (--max-faults)"]


def test_a_near_miss_of_a_known_field_is_a_fault_and_unknown_fields_are_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `userid` was accepted silently (the user read as absent: every pair its own user), and so was a
    profile item's `stnace` (a judgment read as a post the user wrote)."""
    recs = make_records(3)
    recs[1]["userid"] = recs[1].pop("user_id")
    path = write_jsonl(tmp_path / "userid.jsonl", recs)
    code, _, err = run_cli(capsys, "data", "validate", str(path))
    assert code == 2 and errors(err) == [
        f"error: {path}:2: userid: unknown field: did you mean 'user_id'? (a misspelt field is read as absent)"]
    with pytest.raises(DataError, match="did you mean 'user_id'"):  # eval and train read through the same check
        load_examples(path)
    with pytest.raises(DataError, match="did you mean 'user_id'"):
        load_training_pairs(path, split="test")

    recs = make_records(2)
    recs[0]["profile"][1] = {"id": "x", "text": "I hate crowds.", "stnace": "disagree"}
    code, _, err = run_cli(capsys, "data", "validate", str(write_jsonl(tmp_path / "stance.jsonl", recs)))
    assert code == 2 and "stance.jsonl:1: profile[1].stnace: unknown field: did you mean 'stance'?" in err

    recs = make_records(3)  # a column nothing reads, far from every known name: kept, and named
    for r in recs[:2]:
        r["annotator"] = "a1"
    code, out, err = run_cli(capsys, "data", "validate", str(write_jsonl(tmp_path / "extra.jsonl", recs)))
    assert code == 0 and "3 valid records" in out
    assert "note: fields no reader uses (kept with the records): annotator (2 records)" in err


def test_json_errors_say_what_is_wrong_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: "invalid JSON (Invalid control character at, column 655)" for a string left open."""
    good = json.dumps(make_record(0))
    path = tmp_path / "open.jsonl"
    path.write_text(good + "\n" + good[:120] + "\n" + json.dumps(make_record(2))[:-1] + ",}\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "data", "validate", str(path))
    assert code == 2
    opened = good[:120].rindex('"') + 1  # the column of the quote that opens the cut string
    assert errors(err)[:2] == [
        (f"error: {path}:2: invalid JSON: a string is not closed (its closing quote is missing before the end of the "
        f"line) (column {opened})"),
        f"error: {path}:3: invalid JSON: a trailing comma before '}}' (column {len(json.dumps(make_record(2))) + 1})"]

    path.write_text(good[:50] + "\n" + good + "\n" + json.dumps(make_record(2, question=5)) + "\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "data", "validate", str(path))  # a broken first row: the format is detected
    assert code == 2 and errors(err) == [                          # from the first row that parses
        f"error: {path}:1: invalid JSON: the record ends early (a value is missing) (column 51)",
        f"error: {path}:3: question: Input should be a valid string (got int)",
        f"error: {path}: 2 faults, 1 valid records"]


@pytest.mark.parametrize("prefix", ["style", "stance", "synthesizeme", "finetune"])
def test_a_missing_trained_folder_is_no_trained_model(prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `-m style:rmm` (no such folder) said "expected config.json and model.safetensors", as if a
    folder were there and damaged."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "eval", "-m", f"{prefix}:rmm", "--limit", "2", "--out", "r")
    assert code == 2
    assert errors(err) == [(f"error: {prefix}:rmm: no trained model at rmm (no such folder; train one with "
                           f"`prbench train {prefix} ... --out rmm`)")]


# -- #51.2: the answer key in the profile ---------------------------------------------------------------------
def test_a_profile_holding_the_judged_pair_is_refused_by_validate_and_eval_with_the_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: "6 valid records", and `eval -c profile` read 100% (the lexical baseline found the chosen text in
    the profile it was shown)."""
    recs = [leaky(0, "pair"), leaky(1, "post"), leaky(2, "pair"), *make_records(6)[3:]]
    path = write_jsonl(tmp_path / "leak.jsonl", recs)
    code, _, err = run_cli(capsys, "data", "validate", str(path))
    assert code == 2 and errors(err) == [
        f"error: {path}:1: profile[6]: the profile holds the judged pair itself (its chosen over its rejected)",
        f"error: {path}:2: profile[6]: the profile holds the chosen text as a post",
        f"error: {path}:3: profile[6]: the profile holds the judged pair itself (its chosen over its rejected)",
        f"error: {path}: 3 faults (3 records whose profile holds its own answer), 3 valid records"]
    code, out, err = run_cli(capsys, "eval", "-m", "baseline:lexical", "-c", "profile", "--data", str(path),
                             "--out", str(tmp_path / "runs"))
    assert code == 2 and out == "" and not (tmp_path / "runs").exists()
    assert errors(err) == [(f"error: {path}:1: profile[6]: the profile holds the judged pair itself (its chosen over "
                           "its rejected): 3 of 6 records do (the RM is shown the profile, so the answer would reach "
                           "the scorer); remove the pair from those profiles")]
    # the same texts elsewhere (another pair's answer in this profile) are the point of a profile: accepted
    other = make_record(3)
    other["profile"] = [*other["profile"], {"text": make_record(4)["chosen"].replace("chess", "hiking")}]
    assert len(load_examples(write_jsonl(tmp_path / "fine.jsonl", [other]))) == 1


# -- #51.3: chosen == rejected --------------------------------------------------------------------------------
def test_a_pair_of_one_text_is_refused_at_validate_eval_and_train(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: accepted everywhere; every model scored it 50.0 [50.0, 50.0] and `train` wrote a 50% model."""
    recs = make_records(4)
    recs[2]["rejected"] = recs[2]["chosen"] + "  "
    path = write_jsonl(tmp_path / "same.jsonl", recs)
    want = f"error: {path}:3: rejected: the same text as chosen: a pair with nothing to prefer cannot be judged"
    code, _, err = run_cli(capsys, "data", "validate", str(path))
    assert code == 2 and errors(err) == [want]
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:length", "--data", str(path), "--out", str(tmp_path / "r"))
    assert code == 2 and errors(err) == [want]
    pairs = tmp_path / "pairs.jsonl"  # prbench's own pair file, what `train` reads
    write_jsonl(pairs, [{"user_id": "u", "prompt": "Which?", "chosen": "Tea.", "rejected": "Tea."}])
    with pytest.raises(DataError, match=r"pairs.jsonl:1: rejected: the same text as chosen"):
        load_training_pairs(pairs, split="test")


# -- #51.7: a lone surrogate ----------------------------------------------------------------------------------
def test_a_lone_surrogate_is_refused_where_it_is_read_with_file_line_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: validate and train passed it, then eval failed with a UnicodeEncodeError in cache.content_key that
    named no file, line or field."""
    recs = make_records(3)
    path = tmp_path / "surrogate.jsonl"
    lines = [json.dumps(r) for r in recs]
    lines[1] = lines[1].replace('"chosen": "Spend', '"chosen": "abc\\ud800def Spend')
    lines[2] = lines[2].replace('"text": "Post 2', '"text": "\\udfff Post 2')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    why = "a lone surrogate (an unpaired \\ud800-\\udfff escape): not text that can be written as UTF-8"
    code, _, err = run_cli(capsys, "data", "validate", str(path))
    assert code == 2 and errors(err)[:2] == [f"error: {path}:2: chosen: {why}; fix or drop the character",
                                             f"error: {path}:3: profile[2].text: {why}; fix or drop the character"]
    code, _, err = run_cli(capsys, "eval", "-m", "baseline:lexical", "-c", "profile", "--data", str(path),
                           "--out", str(tmp_path / "r"))
    assert code == 2 and errors(err) == [f"error: {path}:2: chosen: {why}; fix or drop the character"]
    assert "UnicodeEncodeError" not in err
    with pytest.raises(DataError, match=r"surrogate.jsonl:2: chosen: a lone surrogate"):
        load_training_pairs(path, split="test")
