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


def test_n_column_mixed_n_settings_gain_label_names_and_modes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41 items 4 and 5: a row mixing 12 and 40 pairs says so, top_k shows where it differs between rows,
    the gain says what it subtracts, names break only at ':' at 100 columns, both files share one mode."""
    import json
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    run_cli(capsys, "eval", "-m", "baseline:lexical", "-c", "profile,wrong-profile", "--limit", "40", "--out", "runs", "-q")
    run_cli(capsys, "eval", "-m", "baseline:lexical", "-c", "none", "--limit", "12", "--out", "runs", "-q")
    run_cli(capsys, "eval", "-m", "baseline:length", "-c", "profile,wrong-profile", "--top-k", "5", "--limit", "40",
            "--out", "runs", "-q")
    monkeypatch.setenv("COLUMNS", "100")
    out = run_cli(capsys, "leaderboard", "runs")
    assert all(len(line) <= 100 for line in out.splitlines()), max(out.splitlines(), key=len)
    lines = out.splitlines()
    lex = next(ln for ln in lines if "baseline:lexical" in ln)  # the whole name on one line, never "baseline:lexi / cal"
    length = next(ln for ln in lines if "baseline:length" in ln)
    assert "MIXED 12," in lex and "MIXED" not in length and "│ 40 " in length
    assert "top_k=10" in lex and "top_k=5" in length  # the setting that changes the profile number
    assert "gain:" in out and "profile -" in out  # profile minus its wrong-profile control, not "profile +5.0"
    rows = json.loads((tmp_path / "runs" / "leaderboard.json").read_text())["rows"]
    assert {r["model"]: r["settings"]["top_k"] for r in rows} == {"baseline:lexical": 10, "baseline:length": 5}
    modes = {os.stat(tmp_path / "runs" / f"leaderboard.{ext}").st_mode & 0o777 for ext in ("csv", "json")}
    mask = os.umask(0)
    os.umask(mask)
    assert modes == {0o666 & ~mask}
    with (tmp_path / "runs" / "leaderboard.csv").open(encoding="utf-8") as fh:
        by_model = {r["model"]: r for r in csv.DictReader(fh)}
    assert by_model["baseline:lexical"]["n"] == "12 40" and by_model["baseline:length"]["top_k"] == "5"


def test_wrap_name_breaks_only_after_separators() -> None:
    from prbench.leaderboard import wrap_name

    assert wrap_name("baseline:embedding") == "baseline:embedding"
    assert wrap_name("judge[likelihood]:smollm2-135m-instruct") == "judge[likelihood]:\nsmollm2-135m-instruct"
    assert "".join(wrap_name("hf:org/a-long-model-name:rev").split("\n")) == "hf:org/a-long-model-name:rev"
