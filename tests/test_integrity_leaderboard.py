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
    # baseline:random's own seed option makes another run; --max-length does not reach a baseline (it has
    # no such option), so that run is the plain baseline:length one again
    for extra in (["-m", "baseline:random"], ["-m", "baseline:random", "-M", "seed=7"], ["-m", "baseline:length"],
                  ["-m", "baseline:length", "--max-length", "40"]):
        assert subprocess.run([*base, *extra], check=False, env=env, timeout=120).returncode == 0
    # a damaged summary in a fourth run folder must not hide the others
    assert subprocess.run([*base, "-m", "baseline:short"], check=False, env=env, timeout=120).returncode == 0
    broken = next(p for p in out.rglob("summary.json") if "baseline_short" in str(p))
    broken.write_text('{"model": "baseline:short", "metr', encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "prbench", "leaderboard", str(out), "--json"], check=False, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert sorted(r["label"] for r in rows) == ["baseline:length", "baseline:random (seed=7)",
                                                "baseline:random (seed=default)"]
    assert {json.dumps(r["options"]) for r in rows if r["model"] == "baseline:random"} == {"{}", '{"seed": 7}'}
    assert all(r["cells"]["none"]["n"] == 8 for r in rows)
    assert res.stderr.count("\n") == 1 and f"skipped: {broken}:1: damaged JSON" in res.stderr, res.stderr
    assert "delete it and rerun the eval" in res.stderr
    csv = (out / "leaderboard.csv").read_text(encoding="utf-8")
    assert "baseline:random (seed=7)" in csv and "baseline:random (seed=default)" in csv
