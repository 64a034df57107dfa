"""Re-runs and interrupts as users expect: a larger --limit extends a run (the finished items are
kept, only the new ones are scored), a smaller one reads the stored records, the reuse is said in
one line, and an interrupt keeps what finished (the first append comes after the first RM call)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import pytest

import prbench

COUNTING_RM = '''
from prbench.rewards import PointwiseRM, Score

CALLS = []

class Counting(PointwiseRM):
    """Scores by length; raises KeyboardInterrupt (a Ctrl-C) on call number STOP_AT."""
    uses_context = False
    stop_at = None

    def __init__(self, **options):
        pass

    def score(self, batch):
        CALLS.append(len(batch))
        if Counting.stop_at is not None and len(CALLS) >= Counting.stop_at:
            raise KeyboardInterrupt
        return [Score(float(len(response))) for _, response in batch]
'''


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def lines(path: Path) -> list[str]:
    return (path / "examples.jsonl").read_text(encoding="utf-8").splitlines()


def test_a_larger_limit_extends_the_run_and_a_smaller_one_reads_it(here: Path) -> None:
    small = prbench.evaluate("baseline:length", "sample", "profile", out="runs", limit=5)
    first = lines(small.path)
    assert len(first) == 5
    big = prbench.evaluate("baseline:length", "sample", "profile", out="runs", limit=12)
    assert big.path == small.path and not big.reused and big.summary.resumed_from == 5
    assert lines(big.path)[:5] == first and len(lines(big.path)) == 12  # the five kept byte for byte
    assert json.loads((big.path / "config.json").read_text())["limit"] == 12
    fresh = prbench.evaluate("baseline:length", "sample", "profile", out="fresh", limit=12)
    assert lines(fresh.path) == lines(big.path)  # extending gives the run one clean run would
    part = prbench.evaluate("baseline:length", "sample", "profile", out="runs", limit=3)
    assert part.reused and part.summary.n_total == 3 and [r.id for r in part.records] == [
        json.loads(x)["id"] for x in first[:3]]
    assert len(lines(big.path)) == 12  # reading fewer items drops nothing from the folder
    assert json.loads((big.path / "summary.json").read_text())["n_total"] == 12
    whole = prbench.evaluate("baseline:length", "sample", "profile", out="runs")
    assert whole.summary.n_total == 63 and whole.summary.resumed_from == 12


def test_the_same_command_twice_says_reused_in_one_line(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prbench.cli import main

    def run() -> str:
        with mock.patch.object(sys, "argv", ["prbench", "eval", "-m", "baseline:length", "--limit", "6", "--out", "runs"]):
            try:
                main()
            except SystemExit as exc:
                assert exc.code in (0, None)
        return capsys.readouterr().err

    assert "reused" not in run()
    again = [ln for ln in run().splitlines() if "reused" in ln]
    assert len(again) == 1 and "runs/" in again[0] and "--overwrite" in again[0], again


def test_an_interrupt_after_the_first_rm_call_keeps_that_call(here: Path) -> None:
    (here / "counting.py").write_text(COUNTING_RM, encoding="utf-8")
    from prbench.rewards import load_rm

    rm = load_rm("py:counting.py:Counting")
    type(rm).stop_at = 2  # Ctrl-C during the second RM call
    with pytest.raises(KeyboardInterrupt):
        prbench.evaluate(rm, "sample", "none", out="runs", batch_size=4)
    [run] = [p.parent for p in Path("runs").rglob("config.json")]
    assert len(lines(run)) == 4  # the first call's batch of 4 is on disk
    type(rm).stop_at = None
    res = prbench.evaluate(rm, "sample", "none", out="runs", batch_size=4)
    assert res.summary.resumed_from == 4 and res.summary.n_total == 63
