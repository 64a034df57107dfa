"""Commands that compose: a hint a command prints is a complete command that does what it says."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from prbench.testing.cli import run_cli as testing_run_cli


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code, out, _ = testing_run_cli(capsys, *args)
    return code, out


def test_train_hint_evaluates_the_held_out_data_not_the_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    assert run_cli(capsys, "data", "synth-users", "train.jsonl", "--users", "4")[0] == 0
    assert run_cli(capsys, "data", "synth-users", "held.jsonl", "--users", "2", "--seed", "1")[0] == 0
    code, out = run_cli(capsys, "train", "bt", "--data", "train.jsonl", "--eval-data", "held.jsonl", "--condition",
                        "profile", "--frozen-encoder", "--no-protocol", "--out", "bt-head")
    assert code == 0, out
    [hint] = [ln for ln in out.splitlines() if ln.startswith("evaluate with: ")]
    args = shlex.split(hint.removeprefix("evaluate with: "))
    assert args[:3] == ["prbench", "eval", "-m"] and "--data" in args and "--out" in args
    assert run_cli(capsys, *args[1:])[0] == 0
    [summary] = Path("runs").rglob("profile/summary.json")
    assert '"held.jsonl"' in summary.read_text(encoding="utf-8")  # the held-out users, not the built-in sample
