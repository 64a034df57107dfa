"""The leaderboard shows every run identity and survives a damaged run folder (issue 21, points 4 and 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from prbench.testing.records import make_records


def test_runs_with_different_options_are_separate_labelled_rows(tmp_path: Path) -> None:
    data = tmp_path / "bench.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_records(8)), encoding="utf-8")
    env = {**os.environ, "PRBENCH_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "runs"
    base = [sys.executable, "-m", "prbench", "eval", "-q", "-d", str(data), "-o", str(out)]
    for extra in ([], ["--max-length", "40"], ["-m", "baseline:random"]):
        model = [] if "-m" in extra else ["-m", "baseline:length"]
        assert subprocess.run([*base, *model, *extra], check=False, env=env, timeout=120).returncode == 0
    # a damaged summary in a fourth run folder must not hide the others
    assert subprocess.run([*base, "-m", "baseline:short"], check=False, env=env, timeout=120).returncode == 0
    broken = next(p for p in out.rglob("summary.json") if "baseline_short" in str(p))
    broken.write_text('{"model": "baseline:short", "metr', encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "prbench", "leaderboard", str(out), "--json"], check=False, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert sorted(r["label"] for r in rows) == ["baseline:length (max_length=40)", "baseline:length (max_length=default)",
                                                "baseline:random"]
    assert {json.dumps(r["options"]) for r in rows if r["model"] == "baseline:length"} == {"{}", '{"max_length": 40}'}
    assert all(r["cells"]["none"]["n"] == 8 for r in rows)
    assert res.stderr.count("\n") == 1 and f"skipped: {broken}:1: damaged JSON" in res.stderr, res.stderr
    assert "delete it and rerun the eval" in res.stderr
    csv = (out / "leaderboard.csv").read_text(encoding="utf-8")
    assert "baseline:length (max_length=40)" in csv and "baseline:length (max_length=default)" in csv
