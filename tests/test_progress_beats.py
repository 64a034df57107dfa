"""A demo that talks: off a terminal, generation prints a progress line at least every
PRBENCH_PROGRESS_SECONDS from inside its token loop, not only when an item or a stage finishes;
stage lines carry counts and times, never a rate of a handful of slow items."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from prbench.progress import LogProgress, _Task


class Recorder:
    """stderr that remembers when each line was written (what a log file shows, with timestamps)."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        now = time.monotonic()
        self.lines += [(now, ln) for ln in text.splitlines() if ln.strip()]
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False


def run_cli(*args: str) -> int:
    from prbench.cli import main

    with mock.patch.object(sys, "argv", ["prbench", *args]):
        try:
            main()
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
    return 0


def test_sample_with_a_slow_model_prints_a_line_at_least_every_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm: Path) -> None:
    import transformers

    step_s, interval = 0.15, 1.0
    forwards: list[float] = []
    original = transformers.LlamaForCausalLM.forward

    def slow_forward(self, *args, **kwargs):  # a stand-in for a policy that takes seconds per answer
        forwards.append(time.monotonic())
        time.sleep(step_s)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(transformers.LlamaForCausalLM, "forward", slow_forward)
    monkeypatch.setenv("PRBENCH_PROGRESS_SECONDS", str(interval))
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    err = Recorder()
    monkeypatch.setattr(sys, "stderr", err)
    code = run_cli("sample", "--policy", f"hf:{tiny_lm}", "--data", "sample", "--n", "2", "--limit", "2",
                   "--max-new-tokens", "60", "--out", str(tmp_path / "samples"))
    monkeypatch.undo()
    assert code == 0, err.lines[-5:]
    start, end = forwards[0], forwards[-1]
    assert end - start > 6 * interval  # one engine call of 60 token steps: no item finishes before its end
    during = [t for t, _ in err.lines if start <= t <= end]
    beats = [ln for t, ln in err.lines if start <= t <= end and "token" in ln]
    assert len(beats) >= 5, err.lines
    assert beats[0].startswith("sampling: generating 4 answers, batch 1/1, token "), beats[0]
    gaps = [b - a for a, b in zip([start, *during], [*during, end])]
    assert max(gaps) <= interval + 1.5, gaps  # the interval, plus one slow token step and scheduling slack


def test_stage_lines_give_counts_and_times_not_rates() -> None:
    t = _Task("sample", total=6, completed=2, started=0.0)
    line = LogProgress.line(t, now=100.0)
    assert line == "sample: 2/6 (33%), 1m40s elapsed, ETA 3m20s"
    t.completed = 0
    assert LogProgress.line(t, now=30.0) == "sample: 0/6 (0%), 30s elapsed"
    t.completed = 6
    assert LogProgress.line(t, now=330.0) == "sample: 6/6 (100%), done in 5m30s"
    stages = _Task("study demo", total=6, completed=2, started=0.0, eta=False)  # stages of unlike cost
    assert LogProgress.line(stages, now=947.0) == "study demo: 2/6 (33%), 15m47s elapsed"


def test_one_long_step_still_gets_a_line_every_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """A single forward pass can take longer than the interval: the ticker says it is still running."""
    from prbench import progress as prog

    err = Recorder()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(prog.console, "file", err)
    monkeypatch.setenv("PRBENCH_PROGRESS_SECONDS", "0.4")
    with prog.progress() as bar:
        task = bar.add_task("judge (none)", total=4)
        bar.update(task, completed=0)
        prog.beat("scoring a batch of 8 sequences")
        time.sleep(1.5)  # one step, no loop to beat from
        bar.update(task, completed=4)
    time.sleep(0.5)
    texts = [ln for _, ln in err.lines]
    running = [ln for ln in texts if ln.startswith("judge (none): scoring a batch of 8 sequences")]
    assert len(running) >= 2 and "(running 1s)" in running[-1], texts
    assert texts[0] == "judge (none): started, 0/4 done" and texts[-1].startswith("judge (none): 4/4 (100%), done in")
