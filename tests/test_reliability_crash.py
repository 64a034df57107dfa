"""Crash safety: `kill -9` at seeded random points, then resume; final files equal an uninterrupted run.

Each test starts the real `prbench` command in a subprocess, waits (seeded) until it is some way
into its work, kills it with SIGKILL, does that again, then lets a last run finish. The final
files must be byte-identical to a run that was never interrupted (made in-process with its own
cache folder): no missing ids, no duplicates, no half-written lines. Covered: `prbench eval`
(a slow `py:` plug-in RM), `prbench build`, `prbench sample` and `prbench bon` (the loopback
OpenAI-compatible server answering slowly).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from prbench.testing.openai_server import Fault
from prbench.testing.records import make_records

pytestmark = pytest.mark.slow

KEY_ENV = "PRBENCH_CRASH_TEST_KEY"
ITEM = re.compile(r"\(item (\d+)\)")

# The real CLI.
CLI_SCRIPT = '''
import prbench.cli as cli
cli.main()
'''

PLUGIN = '''
import hashlib, os, time
from prbench.rewards import PointwiseRM, Score

class SlowRM(PointwiseRM):
    """Deterministic scores from content; sleeps per batch so a kill lands mid-run."""

    def __init__(self, **_):
        pass

    def score(self, batch):
        time.sleep(float(os.environ.get("PRBENCH_TEST_SLEEP", "0")))
        return [Score(int(hashlib.sha256((v.example_id + r).encode()).hexdigest()[:6], 16) / 1e5)
                for v, r in batch]
'''


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    script = tmp_path / "prbench_cli.py"
    script.write_text(CLI_SCRIPT, encoding="utf-8")
    monkeypatch.setenv(KEY_ENV, "sk-test-crash")
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "clean-cache"))  # in-process clean runs
    env = {**os.environ, "PRBENCH_CACHE_DIR": str(tmp_path / "crash-cache"), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return {"script": script, "env": env, "tmp": tmp_path}


def run_in_process(*args: str) -> None:
    from prbench.cli import main

    with mock.patch.object(sys, "argv", ["prbench", *args]):
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, f"prbench {' '.join(args)} exited {exc.code}"


def _with_downstream_registered() -> None:
    from prbench import cli

    cli._register()


def kill_twice_then_finish(world: dict[str, Any], args: list[str], progress: Callable[[], int],
                           total: int, seed: int, step: tuple[int, int], unfinished: Callable[[], bool]) -> int:
    """Start `prbench ARGS`, SIGKILL it once `progress()` has advanced a seeded amount plus a seeded
    jitter, twice; then run it to the end. Returns the number of kills that landed mid-run."""
    rng = random.Random(seed)
    cmd = [sys.executable, str(world["script"]), *args]
    kills = 0
    for _ in range(2):
        target = min(total - 1, progress() + rng.randint(*step))
        proc = subprocess.Popen(cmd, env=world["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 90
        while progress() < target and proc.poll() is None:
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.15))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait(timeout=30)
        _, err = proc.communicate()
        assert proc.returncode in (-signal.SIGKILL, 0), err.decode()[-2000:]
        assert unfinished() or proc.returncode == 0
    final = subprocess.run(cmd, env=world["env"], capture_output=True, timeout=180, check=False)
    assert final.returncode == 0, final.stderr.decode()[-3000:]
    return kills


def lines_of(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def assert_clean_jsonl(path: Path, ids: list[str], key: str = "id") -> None:
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    recs = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert [r[key] for r in recs] == ids  # every id once, in order: nothing missing, nothing twice


def source_file(tmp: Path, n: int, with_pairs: bool = True) -> Path:
    rows = make_records(n)
    if not with_pairs:
        for r in rows:
            r.pop("chosen"), r.pop("rejected")
    path = tmp / ("bench.jsonl" if with_pairs else "source.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _prompt(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


# -- prbench eval ---------------------------------------------------------------------------------
def test_kill_eval_and_resume(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = world["tmp"]
    plugin = tmp / "slow_rm.py"
    plugin.write_text(PLUGIN, encoding="utf-8")
    data = source_file(tmp, 24)
    spec = f"py:{plugin}:SlowRM"
    world["env"]["PRBENCH_TEST_SLEEP"] = "0.25"  # per batch of 4 examples (batch size 1: chunks of 4)
    args = ["eval", "-m", spec, "--data", str(data), "--out", str(tmp / "crash"), "--batch-size", "1", "-q"]
    examples = lambda: next((tmp / "crash").rglob("examples.jsonl"), tmp / "none")

    kills = kill_twice_then_finish(world, args, lambda: lines_of(examples()), 24, seed=11, step=(2, 7),
                                   unfinished=lambda: not (examples().parent / "summary.json").exists())
    assert kills == 2
    monkeypatch.setenv("PRBENCH_TEST_SLEEP", "0")
    run_in_process("eval", "-m", spec, "--data", str(data), "--out", str(tmp / "clean"), "--batch-size", "4", "-q")
    clean = next((tmp / "clean").rglob("examples.jsonl"))
    assert examples().read_bytes() == clean.read_bytes()
    assert_clean_jsonl(examples(), [r["id"] for r in make_records(24)])
    summary = json.loads((examples().parent / "summary.json").read_text())
    assert summary["n_total"] == 24 and summary["resumed_from"] > 0


# -- prbench build --------------------------------------------------------------------------------
def build_reply(body: dict[str, Any]) -> str:
    text = _prompt(body)
    i = int(ITEM.search(text).group(1))
    topic = ["hiking", "baking", "chess", "poetry"][i % 4]
    if "What THIS PERSON EXPECTS" in text:
        return f"Spend a cheap and relaxed Saturday on {topic}, then rest at home on Sunday (item {i})."
    if "does NOT want" in text:
        return f"Book a guided city tour on Saturday and a long brunch on Sunday (item {i})."
    answer = text.split("<<<ANSWER\n", 1)[1].split("\nANSWER>>>", 1)[0]
    fit = 5 if topic in answer else 1
    return json.dumps({"factuality": 5, "relevance": 5, "helpfulness": 4 + i % 2, "rubric_fit": fit})


def test_kill_build_and_resume(world: dict[str, Any], fake_openai, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = world["tmp"]
    srv = fake_openai(build_reply, faults=lambda n, body: Fault.delay(0.12))
    source = source_file(tmp, 10, with_pairs=False)

    def args(out: Path) -> list[str]:
        return ["build", "--source", str(source), "--generator", "openai:fake-model", "--validator",
                "openai:fake-model", "--generator-base-url", srv.base_url, "--validator-base-url", srv.base_url,
                "--api-key-env", KEY_ENV, "--out", str(out), "--batch-size", "2", "--top-k", "3", "-q"]

    crash = tmp / "crash"
    kills = kill_twice_then_finish(world, args(crash), lambda: srv.n_posts, 40, seed=12, step=(9, 14),
                                   unfinished=lambda: not (crash / "build" / "summary.json").exists())
    assert kills == 2
    # a batch is 8 requests (2 items x chosen, rejected, 2 validations): a kill after request 9 or
    # later always finds a finished batch on disk, so the last run resumed
    assert json.loads((crash / "build" / "summary.json").read_text())["resumed_from"] >= 2
    run_in_process(*args(tmp / "clean"))
    assert_clean_jsonl(crash / "build" / "examples.jsonl", [f"ex-{i:03d}" for i in range(10)])
    volatile = {Path("build/summary.json"), Path("build/config.json"), Path("build/cost.json"),  # spend: a crash
                Path("build/cost.sent.jsonl")}  # pays more (the journal of what was sent, #51 item 9)
    crash_files = {p.relative_to(crash) for p in crash.rglob("*") if p.is_file()} - volatile
    clean_files = {p.relative_to(tmp / "clean") for p in (tmp / "clean").rglob("*") if p.is_file()} - volatile
    assert crash_files == clean_files and Path("build/examples.jsonl") in crash_files
    for rel in sorted(crash_files):
        assert (crash / rel).read_bytes() == (tmp / "clean" / rel).read_bytes(), rel


# -- prbench sample -------------------------------------------------------------------------------
def policy_reply(body: dict[str, Any]) -> str:
    i = int(ITEM.search(_prompt(body)).group(1))
    return f"Answer {body.get('seed')} for item {i}: go outside and keep it simple."


def test_kill_sample_and_resume(world: dict[str, Any], fake_openai) -> None:
    _with_downstream_registered()
    tmp = world["tmp"]
    srv = fake_openai(policy_reply, faults=lambda n, body: Fault.delay(0.1))
    data = source_file(tmp, 12)

    def args(out: Path) -> list[str]:
        return ["sample", "--policy", "openai:fake-model", "--base-url", srv.base_url, "--api-key-env", KEY_ENV,
                "--data", str(data), "--out", str(out), "--n", "2", "--batch-size", "1", "--top-k", "2", "-q"]

    crash = tmp / "crash"
    kills = kill_twice_then_finish(world, args(crash), lambda: srv.n_posts, 24, seed=13, step=(5, 8),
                                   unfinished=lambda: not (crash / "summary.json").exists())
    assert kills == 2
    assert json.loads((crash / "summary.json").read_text())["resumed_from"] >= 2  # 4 requests per call
    run_in_process(*args(tmp / "clean"))
    assert_clean_jsonl(crash / "samples.jsonl", [f"ex-{i:03d}" for i in range(12)])
    for name in ("samples.jsonl", "items.jsonl"):
        assert (crash / name).read_bytes() == (tmp / "clean" / name).read_bytes(), name


# -- prbench bon ----------------------------------------------------------------------------------
def grade_reply(body: dict[str, Any]) -> str:
    text = _prompt(body)
    answer = text.split("<<<ANSWER\n", 1)[1].split("\nANSWER>>>", 1)[0]
    n = int(re.search(r"expects \((\d+) aspects\)", text).group(1))
    h = hashlib.sha256(answer.encode()).digest()
    return json.dumps({"grades": [{"aspect": j + 1, "score": h[j] % 3} for j in range(n)]})


def test_kill_bon_and_resume(world: dict[str, Any], fake_openai) -> None:
    from prbench.capabilities.sample.driver import sample_policy
    from prbench.engines.base import Engine, Generation
    from prbench.schema import Example

    _with_downstream_registered()

    class Policy(Engine):
        spec = "test:policy"

        def generate(self, prompts, params):
            return [Generation(f"Answer {p.seed}: keep it simple and local.") for p in params]

    tmp = world["tmp"]
    items = [Example.model_validate(r) for r in make_records(10)]
    samples = tmp / "samples"
    sample_policy(Policy(), items, samples, n=4, top_k=2)
    srv = fake_openai(grade_reply, faults=lambda n, body: Fault.delay(0.1))

    def args(out: Path) -> list[str]:
        return ["bon", "--samples", str(samples), "--rm", "baseline:length", "--rm", "baseline:random",
                "--grader", "openai:fake-model", "--grader-base-url", srv.base_url, "--grader-api-key-env", KEY_ENV,
                "--out", str(out), "--n-boot", "200", "-q"]

    crash = tmp / "crash"
    kills = kill_twice_then_finish(world, args(crash), lambda: srv.n_posts, 40, seed=14, step=(4, 14),
                                   unfinished=lambda: not (crash / "bon.json").exists())
    assert kills == 2
    posts_with_crashes = srv.n_posts
    run_in_process(*args(tmp / "clean"))
    assert srv.n_posts - posts_with_crashes == 40  # the clean run grades every distinct sample once
    # grades finished before a kill were kept (cache): the crashed runs together asked at most
    # one grading chunk (16) per kill again
    assert posts_with_crashes <= 40 + 2 * 16
    # the spend counts what was sent, the killed runs' requests included (#51 item 9): at least what the stand-in
    # received, at most that plus what each kill caught journalled but not yet on the wire
    spent = json.loads((crash / "bon.json").read_text())["cost"]["requests"]
    assert posts_with_crashes <= spent <= posts_with_crashes + 2 * 16, (spent, posts_with_crashes)
    files = sorted(p.relative_to(crash) for p in crash.rglob("*") if p.is_file()
                   and p.name not in ("cost.json", "cost.sent.jsonl"))
    assert Path("grades.jsonl") in files and Path("curves.csv") in files
    for rel in files:
        a, b = (crash / rel).read_bytes(), (tmp / "clean" / rel).read_bytes()
        if rel.suffix == ".json":  # timings, call counters and spend differ by design; the numbers must not
            a, b = strip_volatile(json.loads(a)), strip_volatile(json.loads(b))
            a, b = ({k: v for k, v in d.items() if k != "cost"} if isinstance(d, dict) else d for d in (a, b))
        assert a == b, rel
    assert_clean_jsonl(crash / "grades.jsonl", [f"ex-{i:03d}" for i in range(10)])


VOLATILE_KEYS = {"wall_time_s", "grader", "grader_calls", "calls", "cache_hits", "deduped", "saved", "requested"}


def strip_volatile(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: strip_volatile(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [strip_volatile(v) for v in obj]
    return obj
