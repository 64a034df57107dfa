"""Run-folder integrity: one writer at a time, each id once, damaged files named, failed starts
leave nothing, finished runs open on read-only media, URL credentials never stored (issue 21)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from prbench import evaluate
from prbench.errors import DataError, PrbenchError
from prbench.store.runs import RunDir, redact_url
from prbench.testing.records import make_records

PRBENCH = [sys.executable, "-m", "prbench"]


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PRBENCH_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    p = tmp_path / "bench.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in make_records(12)), encoding="utf-8")
    return p


def eval_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PRBENCH, "eval", "-q", *args], check=False, env=env, capture_output=True, text=True, timeout=120)


def only(root: Path, name: str) -> Path:
    found = list(root.rglob(name))
    assert len(found) == 1, found
    return found[0]


def test_two_concurrent_evals_end_byte_identical_to_one_run(tmp_path: Path, env: dict[str, str]) -> None:
    single = eval_cli(env, "-m", "baseline:lexical", "-o", str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    reference = only(tmp_path / "one", "examples.jsonl").read_bytes()
    args = [*PRBENCH, "eval", "-q", "-m", "baseline:lexical", "-o", str(tmp_path / "two")]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.pid, p.wait(timeout=120), p.stderr.read()) for p in procs]
    for pid, rc, err in results:
        other = next(q for q, _, _ in results if q != pid)
        # either it ran alone (before or after the other) or it was refused at once, naming the writer
        assert rc == 0 or (rc == 2 and f"being written by another prbench process (pid {other})" in err), err
    assert only(tmp_path / "two", "examples.jsonl").read_bytes() == reference
    summary = json.loads(only(tmp_path / "two", "summary.json").read_text())
    assert summary["n_total"] == 63 == len(reference.splitlines())


def test_second_writer_fails_at_once_naming_the_holder(tmp_path: Path, data: Path, env: dict[str, str]) -> None:
    evaluate("baseline:length", str(data), "none", out=tmp_path / "runs")
    folder = only(tmp_path / "runs", "config.json").parent
    (folder / "summary.json").unlink()  # the run must write again, so it needs the lock
    holder = RunDir(folder, json.loads((folder / "config.json").read_text()))
    res = eval_cli(env, "-m", "baseline:length", "-d", str(data), "-o", str(tmp_path / "runs"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"pid {os.getpid()}" in res.stderr and str(folder) in res.stderr
    holder.close()
    assert eval_cli(env, "-m", "baseline:length", "-d", str(data), "-o", str(tmp_path / "runs")).returncode == 0


def test_reopening_in_one_process_retires_the_older_handle(tmp_path: Path) -> None:
    first = RunDir(tmp_path / "r", {"model": "x"})
    second = RunDir(tmp_path / "r", {"model": "x"})
    second.append([{"id": "a"}])
    with pytest.raises(PrbenchError, match="reopened by another writer"):
        first.append([{"id": "b"}])
    with pytest.raises(PrbenchError, match="refusing to record id 'a' twice"):
        second.append([{"id": "a"}])
    with pytest.raises(PrbenchError, match="twice"):
        second.append([{"id": "c"}, {"id": "c"}])
    assert (tmp_path / "r" / "examples.jsonl").read_text() == '{"id":"a"}\n'


def test_duplicates_are_refused_on_load_and_repair_keeps_the_first(tmp_path: Path, data: Path,
                                                                   env: dict[str, str]) -> None:
    clean = evaluate("baseline:length", str(data), "none", out=tmp_path / "runs")
    ex = only(tmp_path / "runs", "examples.jsonl")
    original = ex.read_bytes()
    lines = original.decode().splitlines()
    flipped = [json.loads(x) for x in lines[:5]]
    for r in flipped:
        r["credit"] = 1.0 - r["credit"]
    ex.write_text(original.decode() + "".join(json.dumps(r) + "\n" for r in flipped), encoding="utf-8")
    with pytest.raises(DataError, match=rf"examples.jsonl:13: id: duplicate id '{flipped[0]['id']}' \(first on line 1\)"
                                        r" \(4 more such lines\); rerun the same command with --repair"):
        evaluate("baseline:length", str(data), "none", out=tmp_path / "runs")
    res = eval_cli(env, "-m", "baseline:length", "-d", str(data), "-o", str(tmp_path / "runs"))
    assert res.returncode == 2 and "examples.jsonl:13: id: duplicate id" in res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    res = eval_cli(env, "-m", "baseline:length", "-d", str(data), "-o", str(tmp_path / "runs"), "--repair", "--json")
    assert res.returncode == 0, res.stderr
    assert "dropped 5 lines (5 duplicate ids, 0 unreadable or without an id); kept 12 records" in res.stderr
    assert ex.read_bytes() == original
    summary = json.loads(only(tmp_path / "runs", "summary.json").read_text())
    assert summary["n_total"] == 12 and summary["accuracy"] == clean.summary.accuracy


@pytest.mark.parametrize("bad, where, reason", [
    ("{not json\n", "examples.jsonl:3", "not a JSON record"),
    ('{"credit": 1.0}\n', "examples.jsonl:3: id", "record without an id"),
    ('["a list"]\n', "examples.jsonl:3: id", "record without an id"),
])
def test_damaged_record_lines_name_file_line_and_fix(tmp_path: Path, data: Path, env: dict[str, str],
                                                     bad: str, where: str, reason: str) -> None:
    evaluate("baseline:length", str(data), "none", out=tmp_path / "runs")
    ex = only(tmp_path / "runs", "examples.jsonl")
    lines = ex.read_text().splitlines(keepends=True)
    ex.write_text("".join(lines[:2]) + bad + "".join(lines[2:]), encoding="utf-8")
    res = eval_cli(env, "-m", "baseline:length", "-d", str(data), "-o", str(tmp_path / "runs"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"{where}: {reason}" in res.stderr and "--repair" in res.stderr
    res = eval_cli(env, "-m", "baseline:length", "-d", str(data), "-o", str(tmp_path / "runs"), "--repair")
    assert res.returncode == 0, res.stderr
    assert "".join(lines) == ex.read_text()


def test_damaged_summary_is_recomputed(tmp_path: Path, data: Path, caplog: pytest.LogCaptureFixture) -> None:
    clean = evaluate("baseline:length", str(data), "none", out=tmp_path / "runs")
    summary = only(tmp_path / "runs", "summary.json")
    summary.write_text('{"accuracy": 0.9', encoding="utf-8")
    again = evaluate("baseline:length", str(data), "none", out=tmp_path / "runs")
    assert again.summary.accuracy == clean.summary.accuracy and again.summary.n_total == 12
    assert "summary.json:1: damaged JSON" in caplog.text
    assert json.loads(summary.read_text())["n_total"] == 12


def test_mismatch_names_each_setting_and_the_way_out(tmp_path: Path, data: Path) -> None:
    evaluate("baseline:length", str(data), "none", out=tmp_path, max_context_chars=100)
    with pytest.raises(PrbenchError) as err:
        evaluate("baseline:length", str(data), "none", out=tmp_path, max_context_chars=200, top_k=3)
    msg = str(err.value)
    assert "different config (max_context_chars: 100 -> 200; top_k: 10 -> 3)" in msg, msg
    assert "choose another --out" in msg and "discard its 12 recorded examples, pass --overwrite" in msg


def test_failed_start_leaves_nothing_and_the_corrected_command_runs(tmp_path: Path, data: Path,
                                                                    env: dict[str, str]) -> None:
    out = tmp_path / "runs"
    res = eval_cli(env, "-m", "baseline:length", "-d", str(data), "-c", "planner", "-o", str(out))
    assert res.returncode == 2 and "needs planner output" in res.stderr
    assert not out.exists(), list(out.rglob("*"))  # no folder holding only config.json
    plan = tmp_path / "plan.jsonl"
    plan.write_text("".join(json.dumps({"id": r["id"], "aspects": [{"aspect": "tone", "reason": "x"}]}) + "\n"
                            for r in make_records(12)), encoding="utf-8")
    # a leftover config of a failed start (e.g. from a killed process) does not block either
    evaluate_args = ["-m", "baseline:length", "-d", str(data), "-c", "planner", "-o", str(out)]
    res = eval_cli(env, *evaluate_args, "--planner-file", str(plan))
    assert res.returncode == 0, res.stderr
    folder = only(out, "config.json").parent
    (folder / "examples.jsonl").unlink()
    (folder / "summary.json").unlink()
    assert eval_cli(env, *evaluate_args, "--planner-file", str(tmp_path / "plan.jsonl"), "--top-k", "3"
                    ).returncode == 0


def test_finished_run_opens_on_read_only_media(tmp_path: Path, data: Path, env: dict[str, str]) -> None:
    out = tmp_path / "runs"
    args = ["-m", "baseline:length", "-d", str(data), "-o", str(out), "--json"]
    first = eval_cli(env, *args)
    assert first.returncode == 0, first.stderr
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def read_only(*cmd: str) -> subprocess.CompletedProcess:
        # a real read-only file system: a read-only bind mount in a private mount namespace
        script = f'mount --bind "{out}" "{out}" && mount -o remount,bind,ro "{out}" && exec "$@"'
        return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *PRBENCH, "eval", "-q", *cmd],
                              check=False, env=env, capture_output=True, text=True, timeout=120)

    res = read_only(*args)
    assert res.returncode == 0, res.stderr
    assert [s["accuracy"] for s in json.loads(res.stdout)] == [s["accuracy"] for s in json.loads(first.stdout)]
    res = read_only(*args, "-c", "profile")  # another run: it would need to write
    assert res.returncode == 2 and "is on read-only media" in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_url_credentials_are_redacted_in_config_and_summary(tmp_path: Path, data: Path) -> None:
    url = "http://alice:hunter2@127.0.0.1:9/v1?api_key=abc123&region=eu"
    assert redact_url(url) == "http://REDACTED@127.0.0.1:9/v1?api_key=REDACTED&region=eu"
    # a judge, since a run records the options its RM takes (a baseline never sees --base-url); the port is
    # closed, so both items end as counted failures after the engine's retries (~10 s)
    opts = {"base_url": url, "api_key_env": "PRBENCH_REDACT_TEST_KEY"}
    with mock.patch.dict(os.environ, {"PRBENCH_REDACT_TEST_KEY": "sk-test"}):
        res = evaluate("judge:openai:m", str(data), "none", out=tmp_path, model_options=opts, limit=2, n_boot=10)
        again = evaluate("judge:openai:m", str(data), "none", out=tmp_path, model_options=opts, limit=2, n_boot=10)
    assert again.reused and again.path == res.path  # the redacted config matches on resume: read back, not redone
    for name in ("config.json", "summary.json", "examples.jsonl"):
        text = only(tmp_path, name).read_text()
        assert "hunter2" not in text and "abc123" not in text and "alice" not in text, name
    assert "http://REDACTED@127.0.0.1:9/v1?api_key=REDACTED&region=eu" in only(tmp_path, "config.json").read_text()


def test_limit_zero_is_an_error_in_the_api_and_the_cli(tmp_path: Path, data: Path, env: dict[str, str]) -> None:
    for bad in (0, -5, True, 2.5):
        with pytest.raises(PrbenchError, match="limit must be a whole number >= 1"):
            evaluate("baseline:length", str(data), "none", out=tmp_path / "runs", limit=bad)
    res = eval_cli(env, "-m", "baseline:length", "-d", str(data), "-o", str(tmp_path / "runs"), "--limit", "0")
    assert res.returncode == 2 and "error: limit must be a whole number >= 1" in res.stderr
    assert not (tmp_path / "runs").exists()
