"""A demo that talks: off a terminal, generation prints a progress line at least every
PRBENCH_PROGRESS_SECONDS from inside its token loop, not only when an item or a stage finishes;
stage lines carry counts and times, never a rate of a handful of slow items."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from prbench.runtime.progress import LogProgress, _Task


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
    from prbench.runtime import progress as prog

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


def test_a_whole_reduced_demo_never_goes_quiet_for_longer_than_the_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#41: off a terminal, every stage (eval, sample, Best-of-N, meta, report) says it is alive, with a
    slow stand-in RM; meta and the report have no counted tasks of their own, the study's stage line
    speaks for them. No gap between two lines may exceed the interval plus scheduling slack."""
    from prbench.testing.openai_server import serve

    interval = 1.0
    (tmp_path / "slow_rm.py").write_text(
        "import time\n"
        "from prbench.rewards.base import PointwiseRM, Score\n"
        "class Slow(PointwiseRM):\n"
        "    calls_model = False\n"
        "    def __init__(self, **_): pass\n"
        "    def score(self, batch):\n"
        "        time.sleep(0.6 * len(batch))\n"  # several intervals per batch: only the ticker can speak
        "        return [Score(float(len(r.split()))) for _, r in batch]\n")
    monkeypatch.setenv("PRBENCH_PROGRESS_SECONDS", str(interval))
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DEMO_KEY", "local-key")
    with serve(lambda body: f"A cheap weekend plan, take {body['seed'] % 3}.") as policy:
        (tmp_path / "study.yaml").write_text(
            "name: reduced\ndata: sample\nout: out\nlimit: 4\nconditions: [none, profile]\n"
            f"models:\n  - spec: py:{tmp_path / 'slow_rm.py'}:Slow\n  - spec: baseline:length\n"
            "sample:\n  policy: openai:policy\n  n: 2\n  limit: 2\n"
            f"  options: {{base_url: '{policy.base_url}', api_key_env: DEMO_KEY}}\n"
            "bon:\n  condition: profile\n  grader: embedding:builtin:minilm-l6\n"
            "stages: [eval, sample, bon, meta, report]\nestimates: {duration: about a minute}\n", encoding="utf-8")
        err = Recorder()
        monkeypatch.setattr(sys, "stderr", err)
        t0 = time.monotonic()
        code = run_cli("study", str(tmp_path / "study.yaml"))
        t1 = time.monotonic()
        monkeypatch.undo()
    assert code == 0, err.lines[-5:]
    assert err.lines[0][0] - t0 < 30  # imports and the config's checks, then the first line
    times = [*(t for t, _ in err.lines), t1]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= interval + 1.5, [(round(g, 1), ln) for g, (_, ln) in zip(gaps, err.lines) if g > interval]
    texts = [ln for _, ln in err.lines]
    assert texts[0] == "study reduced: 5 stages, expect about a minute"  # said before any work
    for stage in ("eval", "sample", "bon", "meta", "report"):
        assert any(ln.startswith(f"study reduced: {stage}: ") for ln in texts), (stage, texts)
    # a stage's line is printed when it starts, with the count of stages done before it
    assert "study reduced: eval: 0/5 done" in texts and "study reduced: sample: 1/5 done" in texts
