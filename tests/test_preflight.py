"""#41: every spec, condition and data source of a command is checked before any model loads.

The RM below writes a marker file when it is built: a typo in a later `-m` / `-c` entry must stop
the command (exit 2, one line with "did you mean") before that file exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prbench.testing.cli import run_cli


def _marking_rm(tmp_path: Path) -> tuple[str, Path]:
    marker = tmp_path / "loaded"
    (tmp_path / "marking_rm.py").write_text(
        "from pathlib import Path\n"
        "from prbench.rewards.base import PointwiseRM, Score\n"
        "class Marking(PointwiseRM):\n"
        "    calls_model = False\n"
        "    def __init__(self, **_):\n"
        f"        Path({str(marker)!r}).write_text('built')\n"
        "    def score(self, batch):\n"
        "        return [Score(float(len(r))) for _, r in batch]\n")
    return f"py:{tmp_path / 'marking_rm.py'}:Marking", marker


@pytest.mark.parametrize(("extra", "says"), [
    (["-m", "baseline:lexcial", "-c", "none"], "did you mean 'baseline:lexical'?"),
    (["-c", "none,wrong-profle"], "did you mean 'wrong-profile'?"),
    (["-m", "hf:./no-such-folder", "-c", "none"], "hf:./no-such-folder: no such folder"),
    (["-c", "none", "--data", "no-such.jsonl"], "no-such.jsonl"),
])
def test_a_typo_anywhere_stops_eval_before_any_model_is_built(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               extra: list[str], says: str) -> None:
    spec, marker = _marking_rm(tmp_path)
    code, _, err = run_cli(capsys, "eval", "-m", spec, *extra, "--out", str(tmp_path / "runs"), "--quiet")
    assert code == 2, err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not marker.exists() and not (tmp_path / "runs").exists()


def test_a_local_folder_is_one_model_however_it_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    spec, _ = _marking_rm(tmp_path)
    monkeypatch.chdir(tmp_path)
    for written in ("py:marking_rm.py:Marking", "py:./marking_rm.py:Marking", spec):
        code, _, err = run_cli(capsys, "eval", "-m", written, "--limit", "4", "--out", "runs", "--quiet")
        assert code == 0, err
    [run] = [p for p in (tmp_path / "runs").glob("*/*") if p.is_dir()]  # one model folder, not three
    summary = json.loads((run / "none" / "summary.json").read_text())
    assert summary["model"] == "py:marking_rm.py:Marking"  # the short name, kept
