"""The CLI leaderboard as a researcher reads it: one table per data set (a number of one benchmark
never sits under another's column), and --by-category as a long table that reads at 100 columns."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from unittest import mock

import pytest


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    from prbench.cli import main

    capsys.readouterr()
    with mock.patch.object(sys, "argv", ["prbench", *args]):
        try:
            main()
        except SystemExit as exc:
            assert exc.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def test_one_table_per_data_set_and_categories_at_100_columns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    run_cli(capsys, "eval", "-m", "baseline:length", "-m", "baseline:lexical", "-c", "none,profile,oracle,wrong-profile",
            "--out", "runs", "-q")
    run_cli(capsys, "eval", "-m", "baseline:random", "--data", "sample:hh-rlhf", "--out", "runs", "-q")
    monkeypatch.setenv("COLUMNS", "100")
    out = run_cli(capsys, "leaderboard", "runs", "--by-category")
    assert all(len(line) <= 100 for line in out.splitlines()), max(out.splitlines(), key=len)
    assert "…" not in out and "..." not in out  # no name or number cut
    titles = [ln.strip() for ln in out.splitlines() if ": accuracy %" in ln]
    assert titles == ["sample: accuracy % [95% CI]", "sample: accuracy % by category",
                      "sample:hh-rlhf: accuracy % [95% CI]", "sample:hh-rlhf: accuracy % by category"]
    sample_part, hh_part = out.split("sample:hh-rlhf: accuracy % [95% CI]")
    assert "baseline:random" not in sample_part and "baseline:lexical" not in hh_part
    by_cat = sample_part.split("sample: accuracy % by category")[1]
    assert by_cat.count("baseline:lexical") == 1 and "Lifestyle" in by_cat and "/" not in by_cat
    with (tmp_path / "runs" / "leaderboard.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["data"], r["model"]) for r in rows} == {
        ("sample", "baseline:length"), ("sample", "baseline:lexical"), ("sample:hh-rlhf", "baseline:random")}
