"""`prbench data personalize`: annotator-level preference files -> personalized records (issue #47, item 3).

The file each test builds is what a lab holds: one row per judgment (who judged, prompt, answer
A, answer B, winner, ties allowed). Its annotators have a planted, learnable preference: half
prefer the answer that spends the time with a cat, half the one with a dog, each choosing their
side 90% of the time, on the same twelve prompts (so pairs get judged both ways by different
people). Ties, an annotator with too few choices, one with ties only and a person judging the same
pair twice are planted too.
"""

from __future__ import annotations

import csv
import json
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from prbench.errors import DataError

TOPICS = ("vegetable beds", "a bread recipe", "a weekend away", "a birthday present", "a free evening",
          "saving money", "a morning routine", "a new hobby", "a quick lunch", "a summer holiday",
          "exam preparation", "moving house")


def answers(what: str) -> tuple[str, str]:
    """(cat answer, dog answer) to the prompt about `what`."""
    return (f"For {what}, spend the time with your cat: cats purr, nap in the sun and keep you calm.",
            f"For {what}, take your dog along: dogs fetch, run in the park and keep you active.")


def planted_rows(n_people: int = 40, per_person: int = 8, seed: int = 0) -> tuple[list[dict[str, Any]], dict]:
    """Rows of the annotator-level file, and what was planted (ties, the too-few annotators)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n_people):
        person, likes_cats = f"w{i:03d}", i % 2 == 0
        for what in rng.sample(TOPICS, per_person):
            cat, dog = answers(what)
            a, b = (cat, dog) if rng.random() < 0.5 else (dog, cat)
            if rng.random() < 0.08:
                winner = "tie (bothbad)" if rng.random() < 0.5 else "tie"
            else:
                own_side = rng.random() < 0.9
                liked = cat if likes_cats else dog
                winner = "model_a" if (a == liked) == own_side else "model_b"
            rows.append({"judge": person, "question": f"Any idea for {what}?", "response_a": a,
                         "response_b": b, "winner": winner})
    # w000 judges one of its pairs again, answers swapped: that repeat must never be in a profile of that pair
    first = next(r for r in rows if r["judge"] == "w000")
    rows.append({**first, "response_a": first["response_b"], "response_b": first["response_a"],
                 "winner": {"model_a": "model_b", "model_b": "model_a"}.get(first["winner"], first["winner"])})
    cat, dog = answers(TOPICS[0])
    rows += [{"judge": "few", "question": f"Any idea for {TOPICS[0]}?", "response_a": cat, "response_b": dog,
              "winner": "model_a"},
             {"judge": "few", "question": f"Any idea for {TOPICS[1]}?", "response_a": answers(TOPICS[1])[0],
              "response_b": answers(TOPICS[1])[1], "winner": "model_b"}]
    rows += [{"judge": "tier", "question": f"Any idea for {t}?", "response_a": answers(t)[0],
              "response_b": answers(t)[1], "winner": "tie"} for t in TOPICS[:4]]
    planted = {"ties": sum(r["winner"].startswith("tie") for r in rows), "too_few": 2, "too_few_choices": 2,
               "rows": len(rows), "annotators": n_people + 2}
    return rows, planted


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from prbench.cli import _register, app

    _register()
    return CliRunner().invoke(app, [str(a) for a in args])


def main_cli(*args: str) -> Any:
    """The real entry point in a subprocess: what a user sees on stderr and as the exit code."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "prbench", *map(str, args)], check=False, capture_output=True,
                          text=True)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def key(prompt: str, a: str, b: str) -> tuple[str, frozenset[str]]:
    return prompt, frozenset((a, b))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("personalize")
    rows, planted = planted_rows()
    src = write_jsonl(rows, tmp / "judgments.jsonl")
    res = cli("data", "personalize", src, "--by", "judge", "--out", tmp / "out")
    assert res.exit_code == 0, res.output
    return tmp / "out", planted, rows


def test_records_validate_and_profiles_are_the_persons_other_choices(built):
    out, _, rows = built
    for part in ("train", "test"):
        res = cli("data", "validate", out / f"{part}.jsonl")
        assert res.exit_code == 0 and "valid records" in res.output, res.output
    judged = defaultdict(set)  # what each person chose, as the file says (ties left out)
    for r in rows:
        if not r["winner"].startswith("tie"):
            chosen, rejected = ((r["response_a"], r["response_b"]) if r["winner"] == "model_a"
                                else (r["response_b"], r["response_a"]))
            judged[r["judge"]].add((r["question"], chosen, rejected))
    records = read_jsonl(out / "train.jsonl") + read_jsonl(out / "test.jsonl")
    assert records and all(rec["profile"] for rec in records)
    for rec in records:
        own = key(rec["question"], rec["chosen"], rec["rejected"])
        assert (rec["question"], rec["chosen"], rec["rejected"]) in judged[rec["user_id"]]  # a real choice
        for item in rec["profile"]:
            assert set(item) == {"id", "prompt", "chosen", "rejected"}  # the documented past-choice shape
            assert key(item["prompt"], item["chosen"], item["rejected"]) != own  # never the judged pair
            assert (item["prompt"], item["chosen"], item["rejected"]) in judged[rec["user_id"]]  # their own
    # the person who judged one pair twice: neither judgment shows up in the profile of the other
    twice = [rec for rec in records if rec["user_id"] == "w000"]
    assert twice, "w000 is in one of the parts"
    repeats = Counter(key(r["question"], r["chosen"], r["rejected"]) for r in twice)
    for rec in twice:
        assert not {key(i["prompt"], i["chosen"], i["rejected"]) for i in rec["profile"]} & {
            key(rec["question"], rec["chosen"], rec["rejected"])}
    assert max(repeats.values()) <= 2


def test_split_is_person_disjoint_and_test_is_mirrored(built):
    out, _, _ = built
    train, test = read_jsonl(out / "train.jsonl"), read_jsonl(out / "test.jsonl")
    assert not {r["user_id"] for r in train} & {r["user_id"] for r in test}
    sides: dict[Any, Counter] = defaultdict(Counter)
    people: dict[Any, list[str]] = defaultdict(list)
    for r in test:
        sides[key(r["question"], r["chosen"], r["rejected"])][r["chosen"]] += 1
        people[key(r["question"], r["chosen"], r["rejected"])].append(r["user_id"])
    assert len(test) == 2 * sum(min(c.values()) for c in sides.values() if len(c) == 2)
    for pair, counts in sides.items():
        assert len(counts) == 2 and len(set(counts.values())) == 1, pair  # as many one way as the other
        assert len(set(people[pair])) == len(people[pair])  # each record a different person
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["records"] == {"train": len(train), "test": len(test)}
    assert manifest["test_pairs"] * 2 == len(test)
    assert manifest["people"]["test_in_records"] == len({r["user_id"] for r in test}) <= manifest["people"]["test"]
    assert manifest["people"]["train"] == len({r["user_id"] for r in train})


def test_profile_blind_scorer_gets_exactly_half(built, tmp_path):
    """baseline:length reads the answer only: a mirrored test gives it exactly 50.0%, each couple one right, one wrong."""
    from prbench import evaluate

    out, _, _ = built
    res = evaluate("baseline:length", str(out / "test.jsonl"), "none")
    credits = [r.credit for r in res.records]
    assert None not in credits and len(credits) == len(read_jsonl(out / "test.jsonl"))
    assert res.summary.accuracy == 0.5
    assert set(credits) == {0.0, 1.0}  # decided pairs (the answers differ in length), not ties


def test_ties_and_too_few_annotators_are_counted_and_printed(built, tmp_path):
    out, planted, rows = built
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["rows"] == planted["rows"] and m["counts"]["ties"] == planted["ties"] > 0
    assert m["counts"]["annotators"] == planted["annotators"]
    assert m["too_few"] == {"annotators": planted["too_few"], "choices": planted["too_few_choices"]}
    assert m["config"]["min_choices"] == 3 and m["config"]["test_fraction"] == 0.5
    everyone = {r["user_id"] for part in ("train", "test") for r in read_jsonl(out / f"{part}.jsonl")}
    assert not everyone & {"few", "tier"}
    res = cli("data", "personalize", write_jsonl(rows, tmp_path / "j.jsonl"), "--by", "judge", "--out",
              tmp_path / "o")
    assert f"left out: {planted['ties']} ties" in res.output
    assert f"{planted['too_few']} annotators with fewer than 3 choices" in res.output


def test_a_reused_folder_is_refused_and_overwrite_replaces_it(built, tmp_path):
    out, _, rows = built
    src = write_jsonl(rows, tmp_path / "j.jsonl")
    res = main_cli("data", "personalize", src, "--by", "judge", "--out", out)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "train.jsonl: exists" in res.stderr and "--overwrite" in res.stderr
    res = main_cli("data", "personalize", src, "--by", "judge", "--out", tmp_path / "again", "--seed", "1")
    assert res.returncode == 0, res.stderr
    res = main_cli("data", "personalize", src, "--by", "judge", "--out", tmp_path / "again", "--overwrite")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "again" / "test.jsonl").read_bytes() == (out / "test.jsonl").read_bytes()  # seed 0 again


@pytest.mark.parametrize(("change", "field", "reason"), [
    (lambda r: {k: v for k, v in r.items() if k != "winner"}, "winner", "missing field"),
    (lambda r: {**r, "winner": "maybe"}, "winner", "unknown winner 'maybe'"),
    (lambda r: {k: v for k, v in r.items() if k != "judge"}, "judge", "missing field"),
    (lambda r: {**r, "response_b": ""}, "response_b", "must not be empty"),
    (lambda r: {**r, "judge": None}, "judge", "an annotator id is text or a whole number"),
])
def test_a_row_that_does_not_fit_is_one_line_with_file_line_and_field(tmp_path, change, field, reason):
    rows, _ = planted_rows(6, 4)
    rows[2] = change(rows[2])
    src = write_jsonl(rows, tmp_path / "bad.jsonl")
    res = main_cli("data", "personalize", src, "--by", "judge", "--out", tmp_path / "out")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {src}:3: {field}: {reason}"), res.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_csv_parquet_and_json_read_as_jsonl(tmp_path):
    """The same judgments in every file type give the same records (ids are lines, so they may differ)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from prbench.data.personalize import PersonalizeConfig, read_choices

    rows, _ = planted_rows(12, 6)
    with (tmp_path / "j.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "j.parquet")
    (tmp_path / "j.json").write_text(json.dumps(rows), encoding="utf-8")
    cfg = PersonalizeConfig(by="judge")
    want = [(c.person, c.prompt, c.chosen, c.rejected) for c in read_choices(
        write_jsonl(rows, tmp_path / "j.jsonl"), cfg)[0]]
    for name in ("j.csv", "j.parquet", "j.json"):
        got = read_choices(tmp_path / name, cfg)[0]
        assert [(c.person, c.prompt, c.chosen, c.rejected) for c in got] == want, name
    csv_lines = [c.line for c in read_choices(tmp_path / "j.csv", cfg)[0]]
    assert csv_lines[0] == 2  # the header is line 1: an error points at the row in the file


def test_arena_and_mt_bench_shapes(tmp_path):
    """Chatbot Arena / MT-Bench human judgments: conversations, model_a / model_b / tie, the judged turn."""
    from prbench.data.personalize import PersonalizeConfig, read_choices

    def conv(*turns: str) -> list[dict[str, str]]:
        return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]

    rows = [
        {"question_id": 81, "model_a": "m1", "model_b": "m2", "winner": "model_b", "judge": "author_0", "turn": 1,
         "conversation_a": conv("Q1", "A1 by m1", "Q2", "A2 by m1"),
         "conversation_b": conv("Q1", "A1 by m2", "Q2", "A2 by m2")},
        {"question_id": 81, "model_a": "m1", "model_b": "m2", "winner": "model_a", "judge": "author_0", "turn": 2,
         "conversation_a": conv("Q1", "A1 by m1", "Q2", "A2 by m1"),
         "conversation_b": conv("Q1", "A1 by m2", "Q2", "A2 by m2")},
        {"question_id": 82, "model_a": "m1", "model_b": "m3", "winner": "tie (bothbad)", "judge": "arena_user_7",
         "turn": 1, "conversation_a": conv("Hi", "Hello"), "conversation_b": conv("Hi", "Hey")},
    ]
    choices, counts, fields, _ = read_choices(write_jsonl(rows, tmp_path / "mt.jsonl"), PersonalizeConfig(by="judge"))
    assert [(c.prompt, c.chosen, c.rejected) for c in choices] == [
        ("Q1", "A1 by m2", "A1 by m1"), ("Q1\n\nQ2", "A2 by m1", "A2 by m2")]
    assert counts.ties == 1 and fields["a"] == "conversation_a" and fields["prompt"].startswith("the user turns")
    rows[0]["conversation_b"] = conv("Other question", "A1 by m2")
    with pytest.raises(DataError, match=r"mt.jsonl:1: conversation_b: its user turns differ"):
        read_choices(write_jsonl(rows, tmp_path / "mt.jsonl"), PersonalizeConfig(by="judge"))


def test_winner_values_and_profile_cap(tmp_path):
    from prbench.data.personalize import PersonalizeConfig, personalize, read_choices

    rows = [{"worker": "u1", "prompt": f"P{i}", "answer_a": f"a{i}", "answer_b": f"b{i}", "pref": v, "t": 10 - i}
            for i, v in enumerate([-2, 3, 0, -1])]
    choices, counts, _, _ = read_choices(write_jsonl(rows, tmp_path / "hs.jsonl"),
                                         PersonalizeConfig(by="worker", winner="pref", signed=True))
    assert [c.chosen for c in choices] == ["a0", "b1", "a3"] and counts.ties == 1
    with pytest.raises(DataError, match=r"hs.jsonl:1: pref: unknown winner -2"):
        read_choices(tmp_path / "hs.jsonl", PersonalizeConfig(by="worker", winner="pref"))
    # --profile-order recent with --time: the latest choices by the time field, not by file order
    rows, _ = planted_rows(10, 12)
    for n, r in enumerate(rows):
        r["when"] = 1000 - n
    m = personalize(write_jsonl(rows, tmp_path / "j.jsonl"), tmp_path / "out",
                    PersonalizeConfig(by="judge", profile_max=2, profile_order="recent", time="when"))
    assert m.profile["max"] == 2
    choices = [(r["judge"], key(r["question"], r["response_a"], r["response_b"]), r["when"]) for r in rows
               if not r["winner"].startswith("tie")]
    for rec in read_jsonl(tmp_path / "out" / "test.jsonl"):
        own = key(rec["question"], rec["chosen"], rec["rejected"])
        latest = sorted(t for p, k, t in choices if p == rec["user_id"] and k != own)[-2:]
        shown = {key(i["prompt"], i["chosen"], i["rejected"]) for i in rec["profile"]}
        assert sorted(t for p, k, t in choices if p == rec["user_id"] and k in shown) == latest


@pytest.mark.slow
def test_the_recommended_method_beats_wrong_profile_on_the_mirrored_test(built, tmp_path):
    """Acceptance (issue #47): `prbench train --data train.jsonl` (no method named: the recommendation), then
    its RM on the mirrored test under `profile` beats `wrong-profile` beyond chance (paired bootstrap CI)."""
    from prbench import evaluate
    from prbench.stats.metrics import paired_comparison

    out, _, _ = built
    res = cli("train", "--data", out / "train.jsonl", "--out", tmp_path / "rm", "--json")
    assert res.exit_code == 0, res.output
    spec = json.loads(res.stdout)["loads_as"]
    profile, wrong = evaluate(spec, str(out / "test.jsonl"), ["profile", "wrong-profile"])
    a = {r.id: r.credit for r in profile.records}
    b = {r.id: r.credit for r in wrong.records}
    assert set(a) == set(b) and None not in a.values()
    import numpy as np

    ids = sorted(a)
    cmp = paired_comparison(np.array([a[i] for i in ids]), np.array([b[i] for i in ids]), seed=0, n_boot=1000)
    assert cmp["ci_low"] > 0, (spec, profile.summary.accuracy, wrong.summary.accuracy)


def test_mirrored_couples_are_two_different_people_and_never_a_torn_one():
    """A person who chose one pair both ways is on neither side; the rest pair up one-to-one."""
    from prbench.data.personalize import Choice, mirrored

    def choice(person: str, chosen: str, line: int) -> Choice:
        return Choice(person, "P", chosen, {"x": "y", "y": "x"}[chosen], line, line, None)

    test = [choice("torn", "x", 1), choice("torn", "y", 2), choice("ann", "x", 3), choice("ann", "x", 4),
            choice("bob", "y", 5), choice("cy", "x", 6)]
    pairs, unmatched = mirrored(test, seed=0)
    assert len(pairs) == 1 and unmatched == 4
    (c, d), = pairs
    assert {c.chosen, d.chosen} == {"x", "y"} and d.person == "bob" and c.person in {"ann", "cy"}


def test_options_out_of_range_are_one_line(tmp_path):
    rows, _ = planted_rows(6, 4)
    src = write_jsonl(rows, tmp_path / "j.jsonl")
    for args, says in ((["--test-fraction", "1.5"], "--test-fraction: Input should be less than 1"),
                       (["--profile-order", "latest"], "--profile-order: Input should be 'sample' or 'recent'"),
                       (["--min-choices", "1"], "--min-choices: Input should be greater than or equal to 2")):
        res = main_cli("data", "personalize", src, "--by", "judge", "--out", tmp_path / "o", *args)
        assert res.returncode == 2 and res.stderr.strip() == f"error: {says}", res.stderr


POLIS = Path(__file__).resolve().parents[2] / "shared" / "data" / "polis-dev"


@pytest.mark.skipif(not (POLIS / "test.jsonl").exists(), reason="needs ../shared/data/polis-dev (not in a fresh clone)")
def test_polis_dev_votes_as_past_choices_on_real_people(tmp_path):
    """scripts/polis_past_choices.py on the real polis-dev files, then `data personalize` on its annotator file."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "polis_past_choices.py"
    res = subprocess.run([sys.executable, str(script), str(POLIS), str(tmp_path)], capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    shipped = read_jsonl(POLIS / "test.jsonl")
    rendered = read_jsonl(tmp_path / "same-split" / "test.jsonl")
    assert [(r["id"], r["user_id"], r["chosen"], r["rejected"]) for r in rendered] == [
        (r["id"], r["user_id"], r["chosen"], r["rejected"]) for r in shipped]  # the same mirrored test
    for rec in rendered:
        assert rec["profile"] and all(set(i) == {"id", "prompt", "chosen", "rejected"} for i in rec["profile"])
        assert not {rec["chosen"], rec["rejected"]} & {t for i in rec["profile"] for t in (i["chosen"], i["rejected"])}
    res = cli("data", "personalize", tmp_path / "annotator.jsonl", "--by", "participant", "--a", "statement_a",
              "--b", "statement_b", "--category", "conversation", "--out", tmp_path / "p")
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["counts"]["annotators"] == len({r["user_id"] for r in read_jsonl(POLIS / "train.jsonl") + shipped})
    assert m["test_pairs"] > 100 and m["counts"]["ties"] == 0
    train, test = read_jsonl(tmp_path / "p" / "train.jsonl"), read_jsonl(tmp_path / "p" / "test.jsonl")
    assert not {r["user_id"] for r in train} & {r["user_id"] for r in test}
    for rec in test:  # a vote is in one choice only: the judged statements are nowhere in the profile
        assert rec["category"].startswith("polis:")
        assert not {rec["chosen"], rec["rejected"]} & {t for i in rec["profile"] for t in (i["chosen"], i["rejected"])}
