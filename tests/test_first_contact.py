"""First contact: what a new user meets first (issues #22 and #23), each case with its exit code and line.

Real processes where the behaviour is about a process (exit codes, stderr off a terminal, an
HTTP endpoint); in-process `main()` where only the CLI's text is under test.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from prbench.testing.cli import run_cli as run_main

SRC = str(Path(__file__).resolve().parents[1] / "src")


def env(**extra: str) -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]), **extra}
    return out


def prbench(*args: str, cwd: Path | None = None, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(check=False, args=[sys.executable, "-m", "prbench", *args], capture_output=True, text=True, cwd=cwd,
                          env=env(**extra_env), timeout=300)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRBENCH_CACHE_DIR", str(tmp_path / "cache"))


# -- 22.1: the README's Python example -----------------------------------------------------------
def test_evaluate_works_after_importing_a_submodule_that_imports_the_driver(tmp_path: Path) -> None:
    code = ("import prbench, types\n"
            "from prbench.capabilities.bon.driver import best_of_n\n"
            "from prbench.meta import meta_evaluate\n"
            "from prbench.study import stages\n"  # imports the driver's private module first
            "res = prbench.evaluate('baseline:length', 'sample', 'oracle', out='runs', seed=0, limit=5)\n"
            "from prbench import evaluate, EvalResult\n"
            "assert isinstance(evaluate, types.FunctionType) and evaluate is prbench.evaluate\n"
            "assert isinstance(res, EvalResult)\n"
            "print(res.summary.accuracy, res.path)\n")
    r = subprocess.run(check=False, args=[sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env(),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    acc, path = r.stdout.split()
    assert 0 <= float(acc) <= 1 and (tmp_path / path / "examples.jsonl").exists()


# -- 23.4: usage errors ------------------------------------------------------------------------------
def test_bare_prbench_shows_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys)
    assert code == 0 and "Usage: prbench" in out and "Commands:" in out and "error" not in err


@pytest.mark.parametrize("args, suggestion", [
    (["evl"], "Did you mean 'eval'?"),
    (["eval", "--condtion", "profile"], "did you mean --condition?"),
    (["data", "validat", "sample"], "Did you mean 'validate'?"),
    (["eval", "-m", "baseline:length", "--limit", "many"], "'--limit'"),
])
def test_usage_errors_show_usage_one_error_line_and_exit_2(capsys: pytest.CaptureFixture[str], args: list[str],
                                                           suggestion: str) -> None:
    code, _, err = run_main(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 2 and lines[0].startswith("Usage: prbench") and lines[1].startswith("error: "), err
    assert suggestion in lines[1] and "--help" in lines[1] and "Traceback" not in err


# -- 22.5: help at 80 columns ---------------------------------------------------------------------------
def _all_commands() -> list[list[str]]:
    import typer

    from prbench.cli import _register, app

    _register()
    group = typer.main.get_command(app)

    def walk(cmd, path):
        yield path
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])
    return list(walk(group, []))


def test_help_is_readable_at_80_columns(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    commands = _all_commands()
    assert len(commands) > 25
    for path in commands:
        code, out, _ = run_main(capsys, *path, "--help")
        assert code == 0, path
        long = [ln for ln in out.splitlines() if len(ln) > 80]
        assert not long, (path, long)
        for placeholder in ("<str>", "<int>", "<bool>", "<path>", "<float>", "<list"):
            assert placeholder not in out, (path, placeholder)
        listed = out.split("Commands:", 1)[1].splitlines() if "Commands:" in out else []
        assert not [ln for ln in listed if ln.rstrip().endswith("...")], (path, listed)  # short first sentences
    _, out, _ = run_main(capsys, "eval", "--help")
    assert "-m, --model SPEC" in out and "--limit N" in out and "--out PATH" in out
    _, out, _ = run_main(capsys, "train", "bt", "--help")
    assert "hf:<out>" not in out and "bt:OUT" in out


# -- 22.2: progress off a terminal -------------------------------------------------------------------------
def test_long_commands_print_plain_stage_and_progress_lines_off_a_terminal(tmp_path: Path) -> None:
    r = prbench("eval", "-m", "baseline:lexical", "-c", "none,profile", "--data", "sample", "--batch-size", "8",
                "--out", str(tmp_path / "runs"), PRBENCH_PROGRESS_SECONDS="0")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert "baseline:lexical [none]: started, 0/63 done" in lines
    assert "baseline:lexical [profile]: started, 0/63 done" in lines
    steps = [ln for ln in lines if ln.startswith("baseline:lexical [profile]: ") and "/63 (" in ln]
    # the first append after the first RM call (one batch of 8), then one per four batches
    assert steps[0].startswith("baseline:lexical [profile]: 8/63 (13%)") and "elapsed" in steps[0] and "ETA" in steps[0]
    assert "items/s" not in steps[0]  # counts and times: a rate of a few slow items reads "0.00 items/s"
    assert steps[1].startswith("baseline:lexical [profile]: 40/63 (63%)")
    assert steps[-1].startswith("baseline:lexical [profile]: 63/63 (100%)") and "done in" in steps[-1]
    assert len(steps) == 3  # one line per append when the interval is 0
    quiet = prbench("eval", "-m", "baseline:lexical", "--data", "sample", "--out", str(tmp_path / "q"), "--quiet",
                    PRBENCH_PROGRESS_SECONDS="0")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""


def test_progress_lines_are_rate_limited_and_announcements_respect_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    from rich.markup import escape

    from prbench.runtime.progress import LogProgress, announce, quiet

    buf = io.StringIO()
    p = LogProgress(stream=buf, interval=3600)
    task = p.add_task(escape("eval x [none]"), total=10_000)  # callers pass rich markup
    for i in range(1, 10_001):
        p.update(task, completed=i, total=10_000)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "eval x [none]: started, 1/10000 done"
    assert lines[-1].startswith("eval x [none]: 10000/10000 (100%)")
    assert len(lines) == 2  # 10,000 updates within the interval: no flood
    capsys.readouterr()
    announce("one-time set-up: converting (about 25 s)")
    with quiet():
        announce("never shown")
    err = capsys.readouterr().err
    assert "one-time set-up: converting (about 25 s)" in err and "never shown" not in err


# -- 22.3: fail fast and plainly ----------------------------------------------------------------------------
class _Hub(BaseHTTPRequestHandler):
    """A hub endpoint that is down (503 to everything) and counts what it was asked."""

    requests: list[str] = []  # noqa: RUF012 (reset per test by the fixture)

    def do_GET(self) -> None:
        self.requests.append(self.path)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def down_hub():
    _Hub.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", _Hub.requests
    httpd.shutdown()


def test_hub_ids_fail_at_once_without_a_retry_loop(tmp_path: Path, down_hub) -> None:
    endpoint, requests = down_hub
    online = {"HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf")}
    r = prbench("eval", "-m", "hf:someone/no-such-rm", "--limit", "2", "--out", str(tmp_path / "r"), **online)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "hf:someone/no-such-rm: no such folder or cached hub model" in r.stderr and "pass hf:DIR" in r.stderr
    assert len(requests) == 1  # one probe; transformers' retries never started
    requests.clear()
    r = prbench("sample", "--policy", "hf:someone/no-such-policy", "--n", "2", "--limit", "1", "--quiet",
                "--out", str(tmp_path / "s"), **online)
    assert r.returncode == 2 and "hf:someone/no-such-policy: no such folder" in r.stderr and len(requests) == 1
    requests.clear()
    r = prbench("data", "validate", "someone/no-such-data", **online)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and len(requests) == 1, r.stderr
    requests.clear()
    offline = {**online, "HF_HUB_OFFLINE": "1"}
    r = prbench("eval", "-m", "hf:someone/no-such-rm", "--limit", "2", "--out", str(tmp_path / "r"), **offline)
    assert r.returncode == 2 and "hub access is off (HF_HUB_OFFLINE)" in r.stderr and "pass hf:DIR" in r.stderr
    assert requests == []  # offline means not even the probe


def test_local_looking_specs_that_do_not_exist_say_no_such_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bt-head").mkdir()
    for spec, hint in [("hf:./bt-heda", "did you mean hf:bt-head?"), ("bt:bt-heda", "did you mean bt:bt-head?"),
                       ("pal:bt-heda", "did you mean pal:bt-head?"), ("hf:runs/models/x", "")]:
        code, _, err = run_main(capsys, "eval", "-m", spec, "--limit", "2")
        assert code == 2 and err.count("\n") == 1, (spec, err)
        assert err.startswith(f"error: {spec}: no such folder") and hint in err, err
        assert "Repo id" not in err and not (tmp_path / "runs").exists()


def _invalid_rm(tmp_path: Path) -> str:
    (tmp_path / "nan_rm.py").write_text(
        "import math\n"
        "from prbench.rewards.base import PointwiseRM, Score\n"
        "class Every(PointwiseRM):\n"
        "    calls_model = False\n"
        "    def __init__(self, **_): pass\n"
        "    def score(self, batch):\n"
        "        return [Score(math.nan, error='endpoint down') for _ in batch]\n"
        "class Some(PointwiseRM):\n"
        "    calls_model = False\n"
        "    def __init__(self, **_): pass\n"
        "    def score(self, batch):\n"
        "        return [Score(math.nan if len(r) % 5 == 0 else float(len(r))) for _, r in batch]\n")
    return str(tmp_path / "nan_rm.py")


def test_runs_of_invalid_records_exit_non_zero_and_reruns_name_retry_failed(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    rm = _invalid_rm(tmp_path)
    args = ["eval", "-m", f"py:{rm}:Every", "--limit", "6", "--out", str(tmp_path / "runs"), "--quiet"]
    code, _, err = run_main(capsys, *args)
    assert code == 1 and "all 6 records are invalid (first: endpoint down)" in err and "--retry-failed" in err
    code, _, err = run_main(capsys, *args[:-1])  # a rerun returns the stored run: it says so
    assert code == 1
    assert "finished earlier with 6 invalid of 6 items" in err and "add --retry-failed" in err
    some = ["eval", "-m", f"py:{rm}:Some", "--out", str(tmp_path / "runs"), "--json"]
    code, out, err = run_main(capsys, *some)
    [summary] = json.loads(out)
    bad, total = summary["metrics"]["n_invalid"], summary["metrics"]["n_total"]
    assert code == 0 and 0 < bad < total  # default bound: only an all-invalid run fails
    code, _, err = run_main(capsys, *some, "--max-invalid", str(round(bad / total / 2, 3)))
    assert code == 1 and f"{bad} of {total} records are invalid" in err and "--max-invalid" in err


# -- 22.4: folders written by prbench, whatever prefix ---------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `prbench train bt --frozen-encoder` folder and the data it came from (tiny: seconds)."""
    root = tmp_path_factory.mktemp("trained")
    r = prbench("data", "synth-users", str(root / "synth.jsonl"), "--users", "4", "--items-per-user", "4",
                cwd=root)
    assert r.returncode == 0, r.stderr
    r = prbench("train", "bt", "--data", "synth.jsonl", "--condition", "profile", "--frozen-encoder", "--epochs", "2",
                "--out", "bt-head", "--json", cwd=root, PRBENCH_CACHE_DIR=str(root / "cache"))
    assert r.returncode == 0, r.stderr
    return root


def test_a_prbench_folder_is_recognised_whatever_prefix_and_keeps_its_name(trained: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(trained)
    code, _, err = run_main(capsys, "eval", "-m", "hf:bt-head", "--data", "synth.jsonl", "--limit", "4")
    assert code == 2 and err.count("\n") == 1
    assert "holds a context-bt model written by `prbench train bt --frozen-encoder`" in err and "use bt:bt-head" in err
    assert "sentencepiece" not in err
    for prefix in ("bt", "pal"):
        code, out, err = run_main(capsys, "eval", "-m", f"{prefix}:bt-head", "--data", "synth.jsonl", "--limit", "4",
                                  "-c", "profile", "--out", "runs", "--json")
        assert code == 0, err
        [s] = json.loads(out)
        assert s["model"] == f"{prefix}:bt-head" and f"/{prefix}_bt-head-" in s["path"]


def test_embedding_grader_works_in_bon_on_a_samples_folder_cut_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from prbench.testing.openai_server import serve

    monkeypatch.setenv("FIRST_CONTACT_KEY", "local-key")
    with serve(lambda body: f"Plan a cheap hike with friends, answer {body['seed'] % 3}.") as policy:
        code, _, err = run_main(capsys, "sample", "--policy", "openai:policy", "--base-url", policy.base_url,
                                "--api-key-env", "FIRST_CONTACT_KEY", "--data", "sample", "--n", "4", "--limit", "3",
                                "--out", str(tmp_path / "samples"), "--quiet")
        assert code == 0, err
    code, out, err = run_main(capsys, "bon", "--samples", str(tmp_path / "samples"), "--rm", "baseline:lexical",
                              "--rm", "baseline:length", "--grader", "embedding:builtin:minilm-l6", "--n-boot", "50",
                              "--out", str(tmp_path / "bon"), "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["k"] == [1, 2, 4] and len(s["rms"]) == 2
