"""Ctrl-C and SIGTERM: what was scored is kept, one line says how to resume, exit 130 / 143.

A real `prbench eval` process runs a slow plug-in RM (each `score` call sleeps, then logs that
it finished); the test interrupts it mid-run, checks the exit code and the one line, checks
that every finished batch is on disk (nothing lost beyond the batch in flight), resumes with
the printed command and compares the bytes with an uninterrupted run.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SLOW_RM = '''
import math, os, time
from prbench.rewards.base import PointwiseRM, Score

class Slow(PointwiseRM):
    """Word overlap with the question, slowly; logs each finished call (one per batch)."""
    calls_model = False

    def __init__(self, **_):
        self.log = os.environ.get("SLOW_LOG")
        self.delay = float(os.environ.get("SLOW_DELAY", "0"))

    def score(self, batch):
        time.sleep(self.delay)
        log = self.log and os.path.exists(self.log) and open(self.log).read().split()
        if os.environ.get("SLOW_SIGNAL") and len(log or ()) == int(os.environ["SLOW_AFTER"]):
            os.kill(os.getpid(), int(os.environ["SLOW_SIGNAL"]))  # the signal lands mid-run, at a known call
            time.sleep(30)
        out = []
        for view, response in batch:
            q = set(view.question.lower().split())
            out.append(Score(float(len(q & set(response.lower().split()))) + 1e-3 * math.log(1 + len(response))))
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{len(batch)}\\n")
        return out
'''

BATCH = 4


def _env(tmp: Path, delay: float, cache: str) -> dict[str, str]:
    # separate score caches: the interrupted run must really score, not read the clean run's cache
    env = {**os.environ, "SLOW_LOG": str(tmp / "calls.log"), "SLOW_DELAY": str(delay),
           "PRBENCH_CACHE_DIR": str(tmp / cache), "PRBENCH_PROGRESS_SECONDS": "0"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                         env.get("PYTHONPATH", "")])
    return env


def _cmd(tmp: Path, out: str) -> list[str]:
    return [sys.executable, "-m", "prbench", "eval", "-m", f"py:{tmp / 'slow.py'}:Slow", "--data", "sample",
            "-c", "profile", "--batch-size", str(BATCH), "--out", str(tmp / out)]


def _examples(root: Path) -> Path:
    [path] = list(root.rglob("examples.jsonl"))
    return path


def _calls(tmp: Path) -> list[int]:
    """Examples per finished RM call (each call scores chosen and rejected: two texts an example)."""
    log = tmp / "calls.log"
    return [int(n) // 2 for n in log.read_text().split()] if log.exists() else []


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_saves_finished_batches_and_resumes_byte_identical(tmp_path: Path, sig: int, code: int) -> None:
    (tmp_path / "slow.py").write_text(SLOW_RM)
    clean = subprocess.run(check=False, args=_cmd(tmp_path, "clean"), env=_env(tmp_path, 0, "cache-clean"), capture_output=True,
                           text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    (tmp_path / "calls.log").unlink()

    # The RM signals its own process when its third call starts: the interrupt lands at a known
    # point however loaded the machine is (a timed kill from outside made this test flaky).
    env = {**_env(tmp_path, 0, "cache"), "SLOW_SIGNAL": str(int(sig)), "SLOW_AFTER": "2"}
    proc = subprocess.run(_cmd(tmp_path, "runs"), env=env, capture_output=True, text=True, timeout=120, check=False)
    err = proc.stderr
    assert proc.returncode == code, err
    lines = [ln for ln in err.splitlines() if ln.startswith("interrupted")]
    assert len(lines) == 1, err
    calls = _calls(tmp_path)
    saved = _examples(tmp_path / "runs").read_text().splitlines()
    # the two finished calls are on disk (the first is one RM batch: an interrupt after the first call
    # keeps it), the one in flight is lost, and the line counts the disk
    assert len(calls) == 2 and calls[0] == BATCH and len(saved) == sum(calls), (len(saved), calls)
    assert f"{sum(calls)} of 63 items saved in" in lines[0]
    resume = lines[0].split("resume with: ", 1)[1]
    argv = shlex.split(resume)
    assert argv[0] == "prbench" and "--overwrite" not in argv
    again = subprocess.run(check=False, args=[sys.executable, "-m", "prbench", *argv[1:]], env=_env(tmp_path, 0, "cache"),
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert _examples(tmp_path / "runs").read_bytes() == _examples(tmp_path / "clean").read_bytes()
