"""Issue 47.5: never a training person's score as the answer.

A `style` RM trained on a 40-person file (real training, `prbench train style`) and scored on that same file
read 96% and was "the best reward model" in the report, with no word from eval, leaderboard, report or export,
although the summary knew (`per_user.seen.n_users 40`, `unseen 0`). Here every reader marks the number as seen
people's (their share, their accuracy apart from unseen people's) and the report's headline never names it
best; scored on a file of 40 seen and 10 new people, the two parts' numbers stand apart.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path
from unittest import mock

import pytest

from prbench.testing.cli import run_ok as run_cli


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and headlines at a fixed width (COLUMNS), whatever the terminal or an earlier test left."""
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A style RM trained on 40 synthetic people (of a 50-person file), with `own.jsonl` its training file."""
    from prbench.data.loaders import write_examples
    from prbench.data.synth_users import synth_examples

    root = tmp_path_factory.mktemp("seen")
    items = synth_examples(50, 4, seed=0)
    people = sorted({it.user_id for it in items})
    write_examples([it for it in items if it.user_id in people[:40]], root / "own.jsonl")
    write_examples(items, root / "mixed.jsonl")
    with mock.patch.dict("os.environ", {"PRBENCH_CACHE_DIR": str(root / "cache")}), \
            pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        with mock.patch.object(sys, "argv", ["prbench", "train", "style", "--data", "own.jsonl", "--out", "rm",
                                             "--steps", "30", "--no-protocol", "--json"]):
            from prbench.cli import main

            try:
                main()
            except SystemExit as exc:
                assert exc.code in (0, None)
    return root


@pytest.fixture()
def at(trained: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(trained)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(trained / "cache"))
    return trained


def test_scored_on_its_own_training_file_every_reader_says_seen_people(at: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(capsys, "eval", "-m", "style:rm", "--data", "own.jsonl", "-c", "profile,wrong-profile",
                  "--out", "own")
    row = next(ln for ln in out.splitlines() if "│ style:rm" in ln and "│ profile " in ln)
    assert " seen │" in row  # eval's table: the number itself is marked
    assert "style:rm [profile]: seen people 40 of 40 (100%)" in out and "a score on people it was trained on" in out

    board = run_cli(capsys, "leaderboard", "own")
    assert "not named best: style:rm under profile" in board and "trained on 40 of its 40 people" in board
    assert "the best reward model" not in board
    assert "seen 40/40:" in board and "unseen 0: -" in board  # seen people's accuracy apart, no unseen one
    with (at / "own" / "leaderboard.csv").open(encoding="utf-8") as fh:
        rows = {r["condition"]: r for r in csv.DictReader(fh)}
    assert rows["profile"]["seen people"] == "40" and rows["profile"]["unseen people"] == "0"
    assert float(rows["profile"]["seen share"]) == 1.0 and "trained on 40" in rows["profile"]["not ranked because"]
    lb = json.loads((at / "own" / "leaderboard.json").read_text())
    assert any("not named best: style:rm" in line for lines in lb["headlines"] for line in lines)

    run_cli(capsys, "report", "own", "-o", "own.html", "-q")
    page = (at / "own.html").read_text(encoding="utf-8")
    heads = re.findall(r'<p class="headline[^"]*">(.*?)</p>', page)
    assert not any("the best reward model" in h and "style:rm" in h for h in heads), heads
    assert any("not named best: <b>style:rm</b>" in h and "trained on 40 of its 40 people" in h for h in heads)
    card = re.search(r"Validity, style:rm \[profile\]: (.*?)</p>", page).group(1)
    assert "seen people 40 of 40 (100%)" in card and "not ranked: trained on 40 of its 40 people" in card
    board_html = page.split('<section id="leaderboard">')[1].split("</section>")[0]
    assert "seen people 100%" in board_html and 'class="num best"' not in board_html

    res = json.loads(run_cli(capsys, "export", "eee", "own", "--out", "eee", "--json"))
    from tests.test_export_eee import check  # the typed models and, where present, the upstream JSON Schema

    got = check(res["written"])
    results = [r for v in got.values() for r in v["agg"]["evaluation_results"]]
    main = next(r for r in results if r["evaluation_result_id"] == "accuracy:profile")
    assert main["evaluation_name"].endswith("[profile, seen people 100%]")
    details = main["score_details"]["details"]
    assert details["seen_people"] == "40" and details["unseen_people"] == "0"
    assert "trained on 40 of its 40 people" in details["not_a_ranking"]
    assert any(r["evaluation_result_id"] == "accuracy:profile:seen-people" for r in results)
    assert not any(r["evaluation_result_id"].endswith("unseen-people") for r in results)  # no unseen person


def test_seen_and_unseen_people_stand_apart(at: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prbench.runkinds import scan_runs
    from prbench.store.records import EvalSummary

    run_cli(capsys, "eval", "-m", "style:rm", "--data", "mixed.jsonl", "-c", "profile", "--out", "mixed", "-q")
    (run,) = scan_runs([at / "mixed"]).of("benchmark")
    pu = run.summary_as(EvalSummary).per_user
    assert pu is not None and pu.seen is not None and pu.unseen is not None
    assert (pu.seen.n_users, pu.unseen.n_users) == (40, 10)
    board = run_cli(capsys, "leaderboard", "mixed", "--wide")
    seen, unseen = f"{100 * pu.seen.pair_accuracy:.1f}", f"{100 * pu.unseen.pair_accuracy:.1f}"
    assert f"seen 40/50: {seen}; unseen 10: {unseen}" in board and " seen 80%" in board
    res = json.loads(run_cli(capsys, "export", "eee", "mixed", "--out", "eee-mixed", "--json"))
    from tests.test_export_eee import check

    results = {r["evaluation_result_id"]: r for v in check(res["written"]).values()
               for r in v["agg"]["evaluation_results"]}
    assert results["accuracy:profile:seen-people"]["score_details"]["score"] == pytest.approx(pu.seen.pair_accuracy)
    assert results["accuracy:profile:unseen-people"]["score_details"]["score"] == pytest.approx(
        pu.unseen.pair_accuracy)
    assert results["accuracy:profile"]["evaluation_name"].endswith("[profile, seen people 80%]")
