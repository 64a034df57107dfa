"""The CLI leaderboard as a researcher reads it: one table per data set (a number of one benchmark
never sits under another's column), and --by-category as a long table that reads at 100 columns."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from prbench.testing.cli import run_ok as run_cli


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
    sample_part, hh_part = out.split("sample:hh-rlhf: does an RM use the person?")  # its headline, then its tables
    assert "baseline:random" not in sample_part and "baseline:lexical" not in hh_part
    by_cat = sample_part.split("sample: accuracy % by category")[1]
    assert by_cat.count("baseline:lexical") == 1 and "Lifestyle" in by_cat and "/" not in by_cat
    with (tmp_path / "runs" / "leaderboard.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["data"], r["model"]) for r in rows} == {
        ("sample", "baseline:length"), ("sample", "baseline:lexical"), ("sample:hh-rlhf", "baseline:random")}


def test_n_column_mixed_n_settings_gain_label_names_and_modes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41 items 4 and 5, issue 50.3: one row per model x condition (so no row mixes 12 and 40 pairs), top_k
    shows where it differs between rows, the gain says what it subtracts, names break only at ':' at 100 columns,
    both files share one mode."""
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
    lex = [ln for ln in lines if "│ baseline:lexical" in ln]  # the whole name on one line, never "baseline:lexi / cal"
    length = [ln for ln in lines if "│ baseline:length" in ln]
    assert "MIXED" not in out and any("│ 12 " in ln and "│ none " in ln for ln in lex)
    assert all("│ 40 " in ln for ln in length) and len(length) == 2
    assert any("top_k=10" in ln for ln in lex) and all("top_k=5" in ln for ln in length)  # changes the profile number
    assert all("top_k" not in ln for ln in lex if "│ none " in ln)  # top_k does not act on `none`: not shown there
    assert "gain over control" in out and "profile - wrong-profile" in out  # what the gain subtracts
    rows = json.loads((tmp_path / "runs" / "leaderboard.json").read_text())["rows"]
    assert sorted((r["model"], r["condition"], r["settings"].get("top_k")) for r in rows) == [
        ("baseline:length", "profile", 5), ("baseline:length", "wrong-profile", 5), ("baseline:lexical", "none", None),
        ("baseline:lexical", "profile", 10), ("baseline:lexical", "wrong-profile", 10)]
    modes = {os.stat(tmp_path / "runs" / f"leaderboard.{ext}").st_mode & 0o777 for ext in ("csv", "json")}
    mask = os.umask(0)
    os.umask(mask)
    assert modes == {0o666 & ~mask}
    with (tmp_path / "runs" / "leaderboard.csv").open(encoding="utf-8") as fh:
        by_run = {(r["model"], r["condition"]): r for r in csv.DictReader(fh)}
    assert by_run[("baseline:lexical", "none")]["n"] == "12" and by_run[("baseline:length", "profile")]["top_k"] == "5"


def test_wrap_name_breaks_only_after_separators() -> None:
    from prbench.leaderboard import wrap_name

    assert wrap_name("baseline:embedding") == "baseline:embedding"
    assert wrap_name("judge[likelihood]:smollm2-135m-instruct") == "judge[likelihood]:\nsmollm2-135m-instruct"
    assert "".join(wrap_name("hf:org/a-long-model-name:rev").split("\n")) == "hf:org/a-long-model-name:rev"
