"""Issue 50.2: a headline that answers the toolkit's question and never crowns a model whose validity fails.

The quick start's report called a judge answering "A" to every item (kappa 0.00) "the best reward model", and
never said whether any RM uses the person. Now the headline of `prbench leaderboard` and of the report first
answers "does an RM use the person?" (the condition minus its wrong-user control, paired over the same pairs:
`metrics.paired_comparison`, the statistics of `prbench compare`), then names the best model among those whose
checks hold (`prbench.evaluation.validity.faults`: constant answers, kappa <= 0 with the labels, ties on most pairs, people
it was trained on); a model scoring higher that fails one is named with the reason.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from prbench.testing.cli import run_ok as run_cli
from tests.test_meta import write_eval_run


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and headlines at a fixed width (COLUMNS), whatever the terminal or an earlier test left."""
    monkeypatch.setenv("COLUMNS", "200")

IDS = [f"item-{i:03d}" for i in range(20)]




def _with_card(root: Path, spec: str, right: int, control_right: int, **kw) -> None:
    """A profile run and its wrong-profile control; the card written by the real `validity.attach`."""
    from prbench.evaluation import validity
    from prbench.store.runs import read_json, read_records

    write_eval_run(root, spec, [1.0] * right + [0.0] * (20 - right), ids=IDS, condition="profile", **kw)
    ctrl = write_eval_run(root, spec, [1.0] * control_right + [0.0] * (20 - control_right), ids=IDS,
                          condition="wrong-profile", **kw)
    validity.attach(ctrl, read_json(ctrl / "summary.json", ""), read_records(ctrl / "examples.jsonl"), n_boot=200)


def test_faults_name_constant_answers_kappa_zero_ties_and_seen_people(tmp_path: Path) -> None:
    from prbench.evaluation import validity
    from prbench.runkinds import open_run
    from prbench.store.records import EvalSummary

    def faults(path: Path) -> list[str]:
        run = open_run(path)
        return validity.faults(run.summary_as(EvalSummary), run.items)

    # write_eval_run shows the chosen answer as A, B, A, B, ...: a verdict follows the credit
    good = write_eval_run(tmp_path, "judge:good", [1.0] * 16 + [0.0] * 4, ids=IDS, pairwise=True)
    always_a = write_eval_run(tmp_path, "judge:a", [1.0, 0.0] * 10, ids=IDS, pairwise=True)  # A whatever the pair
    blind = write_eval_run(tmp_path, "judge:blind", [1.0, 0.0, 0.0, 1.0] * 5, ids=IDS, pairwise=True)  # A,A,B,B
    ties = write_eval_run(tmp_path, "rm:ties", [0.5] * 15 + [1.0] * 5, ids=IDS)
    assert faults(good) == []
    assert faults(always_a) == ['answers "A" on 100% of 20 items', "kappa 0.00 with the labels"]
    assert faults(blind) == ["kappa 0.00 with the labels"]  # half A, half B, blind to where the chosen answer is
    assert faults(ties) == ["ties on 75% of 20 pairs"]
    # the same judge scored on 4 people, 3 of whom it was trained on (the summary's per_user, as evaluate writes it)
    seen = write_eval_run(tmp_path, "judge:good-seen", [1.0] * 16 + [0.0] * 4, ids=IDS, pairwise=True,
                          users=[f"u{j % 4}" for j in range(20)], seen_users={"u0", "u1", "u2"})
    assert faults(seen) == ["trained on 3 of its 4 people"]
    summary = json.loads((seen / "summary.json").read_text())
    s = EvalSummary.model_validate(summary)  # without records: the summary's own counts
    assert validity.faults(s) == ["trained on 3 of its 4 people"]


def test_the_best_is_crowned_only_where_its_checks_hold(tmp_path: Path) -> None:
    from prbench.leaderboard import headlines, leaderboard

    _with_card(tmp_path, "rm:good", 15, 8)  # uses the person: +35 points over its wrong-profile control
    _with_card(tmp_path, "rm:blind", 11, 11)  # no gain
    write_eval_run(tmp_path, "judge:a", [1.0, 0.0] * 10, ids=IDS, pairwise=True, condition="profile")
    write_eval_run(tmp_path, "rm:ties", [0.5] * 4 + [1.0] * 16, ids=IDS, condition="profile")  # 90%, few ties
    write_eval_run(tmp_path, "rm:seen", [1.0] * 19 + [0.0], ids=IDS, condition="profile",  # 95%, trained on them
                   users=[f"u{j % 4}" for j in range(20)], seen_users={"u0", "u1", "u2", "u3"})
    write_eval_run(tmp_path, "baseline:length", [1.0] * 12 + [0.0] * 8, ids=IDS, condition="profile")
    rows = leaderboard(tmp_path)
    (h,) = headlines(rows)
    assert h.best is not None and h.best.model == "rm:ties"  # 90%, ties on 20%: its checks hold
    assert [r.model for r in h.not_ranked] == ["rm:seen"]  # above the best, failed a check: named with why
    assert h.person is not None and h.person.model == "rm:good"
    text = "\n".join(h.lines())
    assert "does an RM use the person? yes: rm:good: profile - wrong-profile +35.0 points" in text
    assert "not named best: rm:seen under profile" in text and "trained on 4 of its 4 people" in text
    assert "best reward model (not a baseline) is rm:ties under profile" in text
    assert "best baseline, baseline:length under profile" in text


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick start's shape: baselines with their wrong-profile control, and a judge answering "A" always."""
    from prbench.testing.openai_server import serve

    root = tmp_path_factory.mktemp("headline")
    env = {"PRBENCH_CACHE_DIR": str(root / "cache"), "MY_KEY": "loopback-key"}
    with mock.patch.dict("os.environ", env), serve(lambda body: "Result: A") as server:
        from prbench.cli import main

        for args in (["eval", "-m", "baseline:lexical", "-m", "baseline:embedding", "-c", "none,profile,wrong-profile",
                      "--limit", "24"],
                     ["eval", "-m", "judge:openai:stand-in", "--base-url", server.base_url, "--api-key-env", "MY_KEY",
                      "-c", "none,profile,wrong-profile", "--limit", "12"]):
            with mock.patch.object(sys, "argv", ["prbench", *args, "--out", str(root / "runs"), "-q"]):
                try:
                    main()
                except SystemExit as exc:
                    assert exc.code in (0, None)
    return root


def test_the_quick_start_judge_is_not_crowned_and_the_person_question_is_answered(
        quick: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from prbench.capabilities.eval.kind import KIND as EVAL
    from prbench.runkinds import scan_runs
    from prbench.stats import metrics
    from prbench.store.records import EvalSummary

    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(quick / "cache"))
    board = run_cli(capsys, "leaderboard", str(quick / "runs"))
    shown = [ln for ln in board.splitlines() if not ln.startswith("wrote ")]  # the files' paths are this machine's
    assert all(len(line) <= 120 for line in shown), max(shown, key=len)
    assert "best reward model (not a baseline) is" not in board  # the only model answers "A" to everything
    assert re.search(r'not named best: judge:openai:stand-in under \w+, .*answers "A" on 100% of 12\s+items; kappa '
                     r"0.00 with\s+the labels", board), board
    # does an RM use the person: the largest gain over the wrong-user control among runs whose checks hold,
    # paired over the same pairs (the statistics `prbench compare` gives)
    runs = {(s.model, s.condition): r for r in scan_runs([quick / "runs"]).of("benchmark")
            if (s := r.summary_as(EvalSummary))}
    gains = {}
    for m in ("baseline:lexical", "baseline:embedding"):
        a, b = EVAL.credits(runs[(m, "profile")]), EVAL.credits(runs[(m, "wrong-profile")])
        shared = sorted(a.keys() & b.keys())
        gains[m] = metrics.paired_comparison(np.array([a[i] for i in shared]), np.array([b[i] for i in shared]),
                                             seed=0, n_boot=1000)
    flat = " ".join(board.split())
    top = next(m for m in gains if re.search(rf"use the person\? (yes|not beyond chance): {m} ", flat))
    assert gains[top]["diff"] == max(g["diff"] for g in gains.values())  # the largest gain (ties: the first row)
    g = gains[top]
    said = (f"{top} (a baseline; no other RM with its control passed its checks): profile - wrong-profile "
            f"{100 * g['diff']:+.1f} points [{100 * g['ci_low']:+.1f}, {100 * g['ci_high']:+.1f}], "
            f"p = {g['mcnemar_p']:.2g}, paired over 24 pairs.")
    assert said in flat, board
    rows = json.loads((quick / "runs" / "leaderboard.json").read_text())["rows"]
    judge = [r for r in rows if r["model"] == "judge:openai:stand-in"]
    assert len(judge) == 3 and all('answers "A" on 100% of 12 items' in r["faults"] for r in judge)
    run_cli(capsys, "report", str(quick / "runs"), "-o", str(quick / "report.html"), "-q")
    page = (quick / "report.html").read_text(encoding="utf-8")
    heads = re.findall(r'<p class="headline[^"]*">(.*?)</p>', page)
    assert heads[0].startswith("sample: does an RM use the person? ") and f"<b>{top}</b>" in heads[0]
    assert "no reward model (not a baseline) is named best" in heads[1]
    assert all("not named best: <b>judge:openai:stand-in</b>" in h for h in heads[2:]) and len(heads) >= 3
